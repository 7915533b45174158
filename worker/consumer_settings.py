"""How the SQS consumer runs (ConsumerSettings), as `python -m worker consume` fills it from flags and environment."""
from __future__ import annotations

from dataclasses import dataclass, field

from worker import s3io
from worker.models import model_store
from worker.precisions import PRECISIONS
from worker.slides.limits import SlideLimits

#: SQS's limits on a visibility timeout, in seconds.
SQS_MAX_VISIBILITY_S = 43200


@dataclass(frozen=True)
class ConsumerSettings:
    """How the consumer runs; `python -m worker consume` fills it from flags (and a few environment variables)."""

    queue_url: str
    """The SQS work queue's URL (flag --queue-url, env QUEUE_URL)."""
    mode: str = "job"
    """'job' (a KEDA ScaledJob pod: exit 0 once a long poll comes back empty or after max_messages) or 'service'
    (the persistent Deployment: loop until idle_exit_s without messages, or SIGTERM). Default 'job'."""
    max_messages: int | None = None
    """Stop after receiving this many messages (both modes); None (default) = no limit."""
    idle_exit_s: float | None = None
    """Service mode: exit 0 after this many seconds without a message; None (default) = run until SIGTERM."""
    device: str = "auto"
    """'auto', 'cuda' or 'cpu' (flag --device, env DEVICE); 'cuda' without a usable GPU exits at once. Default auto."""
    precision: str = "auto"
    """The compute dtype (flag --precision, env PRECISION): "auto" (default: bf16/fp16 on CUDA, bf16 on CPUs that
    compute it natively, else fp32), "fp32" (the model's own float32 forward, reproducible across machines), "bf16"
    or "fp16"; a dtype the device cannot run is refused at start (worker.device.check_precision)."""
    model_path: str | None = None
    """The model: a local file or s3://bucket/key, a .pt2 (torch.export) or TorchScript file (flag --model, env
    MODEL_URI or MODEL_PATH); None (default) = the built-in model."""
    model_sha256: str | None = None
    """The model file's SHA-256, 64 hex digits (flag --model-sha256, env MODEL_SHA256): other bytes are refused before
    any message is received. Required for an s3:// model; None (default) = not pinned (the digest is still recorded
    in every summary)."""
    model_cache_dir: str | None = None
    """The node's model cache (flag --model-cache, env MODEL_CACHE_DIR): an S3 model is kept there under its digest,
    so the next Job on the node loads it from local disk. None (default) = downloaded into scratch, not kept."""
    model_cache_max_bytes: int = model_store.DEFAULT_CACHE_MAX_BYTES
    """Most bytes the model cache may hold (env MODEL_CACHE_MAX_BYTES), least recently used models deleted first.
    Default 20 GiB (model_store.DEFAULT_CACHE_MAX_BYTES, which says why)."""
    visibility_timeout_s: int = 600
    """Seconds a received message stays invisible, renewed by the heartbeat (env VISIBILITY_TIMEOUT). Default 600."""
    visibility_extension_interval_s: float = 120.0
    """Seconds between heartbeat renewals; must be below visibility_timeout_s (env VISIBILITY_EXTENSION_INTERVAL).
    Default 120."""
    wait_time_s: int = 20
    """Long-poll wait per ReceiveMessage call, 0-20 s. Default 20 (the SQS maximum; tests use less)."""
    grace_period_s: float = 25.0
    """After SIGTERM/SIGINT: seconds the current slide may still take before it is released to the queue
    (visibility 0) and the process exits 0. Default 25, below Kubernetes' default terminationGracePeriodSeconds 30."""
    retry_backoff_s: int = 30
    """After a failed attempt the message becomes visible again after retry_backoff_s * 2^(receives-1) seconds,
    capped at 900. Default 30; 0 = retry at once."""
    scratch_dir: str | None = None
    """Folder for downloaded slides and local results (flag --scratch, env SCRATCH_DIR, else $TMPDIR). Needs room
    for one slide plus its overlay."""
    liveness_file: str | None = None
    """A file the main loop touches at every poll and every slide progress report (env LIVENESS_FILE); the consumer
    Deployment's liveness probe fails when it is older than the visibility timeout, so a hung process is restarted
    instead of holding its message for hours. None (default) = no file."""
    hard_exit_after_grace: bool = True
    """Whether the grace-period watchdog may end the process (os._exit(0)) when the slide cannot be interrupted.
    Default True; in-process callers such as tests set False."""
    max_prefix_bytes: int = s3io.DEFAULT_MAX_PREFIX_BYTES
    """A multi-file slide (a `slide` prefix) larger than this many bytes in all is dead-lettered instead of
    downloaded. Default 64 GiB (s3io.DEFAULT_MAX_PREFIX_BYTES); at most s3io.MAX_PREFIX_OBJECTS objects either way."""
    slide_limits: SlideLimits = field(default_factory=SlideLimits)
    """What one slide may declare (pixels, tile size, decoded bytes, levels, bytes on disk, TIFF directories); a slide
    over a limit is dead-lettered at once, an object or prefix over `max_file_bytes` before it is downloaded. Default
    SlideLimits() (see worker/slides/limits.py for each default and why); `consume` reads the SLIDE_MAX_* variables
    into it (SlideLimits.from_env)."""

    max_slide_kills: int = 2
    """After this many receives of a message ended with the worker killed while processing its slide (an
    out-of-memory kill, a native parser's crash: told by the attempt record, worker.attempts), the next receive
    dead-letters it at once with that reason (env MAX_SLIDE_KILLS). Default 2: one death may be a lost node or a
    spot reclaim without notice; a second on the same slide is the slide. Below the queue's maxReceiveCount (5 by
    default) it saves the remaining receives; a good slide dead-lettered this way is put back by `dlq redrive`."""

    def validate(self) -> None:
        """Raise ValueError (one line, naming the setting) when the settings cannot work."""
        if not self.queue_url:
            raise ValueError("queue_url: required (--queue-url or QUEUE_URL)")
        if self.mode not in ("job", "service"):
            raise ValueError(f"mode={self.mode!r}: must be 'job' or 'service'")
        if self.device not in ("auto", "cuda", "cpu"):
            raise ValueError(f"device={self.device!r}: must be auto, cuda or cpu")
        if self.precision not in PRECISIONS:
            raise ValueError(f"precision={self.precision!r}: must be one of {', '.join(PRECISIONS)}")
        if not 1 <= self.visibility_timeout_s <= SQS_MAX_VISIBILITY_S:
            raise ValueError(f"visibility_timeout_s={self.visibility_timeout_s}: must be 1-{SQS_MAX_VISIBILITY_S} s")
        if not 0 < self.visibility_extension_interval_s < self.visibility_timeout_s:
            raise ValueError(f"visibility_extension_interval_s={self.visibility_extension_interval_s}: must be > 0 "
                             f"and < visibility_timeout_s={self.visibility_timeout_s}")
        if not 0 <= self.wait_time_s <= 20:
            raise ValueError(f"wait_time_s={self.wait_time_s}: must be 0-20 s (SQS long-poll limit)")
        if self.max_messages is not None and self.max_messages < 1:
            raise ValueError(f"max_messages={self.max_messages}: must be at least 1")
        if self.idle_exit_s is not None and self.idle_exit_s <= 0:
            raise ValueError(f"idle_exit_s={self.idle_exit_s}: must be > 0")
        if self.grace_period_s < 0:
            raise ValueError(f"grace_period_s={self.grace_period_s}: must be >= 0")
        if self.retry_backoff_s < 0:
            raise ValueError(f"retry_backoff_s={self.retry_backoff_s}: must be >= 0")
        if self.max_slide_kills < 1:
            raise ValueError(f"max_slide_kills={self.max_slide_kills}: must be at least 1")
        if self.max_prefix_bytes < 1:
            raise ValueError(f"max_prefix_bytes={self.max_prefix_bytes}: must be at least 1")
        self.slide_limits.validate()
        model_store.check_source(self.model_path, model_store.check_sha256(self.model_sha256, "model_sha256"),
                                 "model_path")
        if self.model_cache_max_bytes < 1:
            raise ValueError(f"model_cache_max_bytes={self.model_cache_max_bytes}: must be at least 1")
