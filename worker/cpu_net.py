"""The CPU fast path: the built-in TinySegNet re-expressed for CPU inference (CpuNet), built once per model."""
from __future__ import annotations

import threading
import weakref
from collections.abc import Sequence

import numpy as np
import torch
import torch.nn.functional as F

from worker.models.loaded_model import LoadedModel
from worker.models.tinyseg import TinySegNet


class CpuNet:
    """The built-in TinySegNet re-expressed for CPU inference: the same function, computed with less work.

    * The model's input normalisation (x / 255 - mean_c) / std_c per channel c is folded into the stem convolution
      (exact: that convolution has no padding), so a uint8 tile converts straight to the compute dtype (0-255 are
      exact in bfloat16) and the elementwise passes over every input pixel disappear.
    * The head's 3x3 convolution over cat(fine, upsample2x(context)) is split by input channels (convolution is
      linear): its fine part stays a 3x3 convolution at 1/4, and its context part, a 3x3 convolution over a
      nearest-upsampled image, equals a 4x4 stride-2 transposed convolution over the context itself at 1/8 (each
      output pixel's 3x3 window meets 2x2 context pixels). That is 40 % fewer multiply-adds in the head (~14 % of
      the net), and no upsampled or concatenated copy of the context is made. In float32 the result matches the
      module to ~1e-6.
    * Weights are held in the compute dtype (bfloat16 where the CPU computes it natively): no per-call autocast
      casts of weights and activations.
    * Each ReLU, and the sum of the head's two parts, runs inside a convolution (oneDNN post-ops) instead of as
      another pass over the activations, and the convolution weights are pre-packed into oneDNN's layout once per
      batch size, not reordered at every call.

    Built once per model and process (`cpu_net`), checked there against the model's own float32 forward. It holds
    converted copies of the weights taken then: a module changed in place afterwards needs a new LoadedModel.
    """

    def __init__(
        self,
        net: torch.nn.Module,
        dtype: torch.dtype,
        tile_size: int,
        mean: Sequence[float] = (0.0, 0.0, 0.0),
        std: Sequence[float] = (1.0, 1.0, 1.0),
    ):
        """`mean`/`std`: the input normalisation per RGB channel on the [0, 1] scale (default 0 and 1: x / 255)."""
        self.dtype = dtype
        self.tile_size = tile_size
        self._mean = torch.tensor([float(v) for v in mean], dtype=torch.float64)
        self._std = torch.tensor([float(v) for v in std], dtype=torch.float64)
        if self._mean.shape != (3,) or self._std.shape != (3,) or not bool((self._std > 0).all()):
            raise ValueError(f"mean={list(mean)}, std={list(std)}: expected 3 values each, std > 0")
        self._stem = [self._conv(blk, first=(i == 0)) for i, blk in enumerate(net.stem)]
        self._context = [self._conv(blk) for blk in net.context]
        head, last = self._conv(net.head[0]), net.head[1]
        if not isinstance(last, torch.nn.Conv2d) or last.kernel_size != (1, 1):
            raise TypeError("head[1] is not a 1x1 Conv2d")
        if (head["kernel"], head["padding"], head["stride"], head["dilation"]) != ([3, 3], [1, 1], [1, 1], [1, 1]):
            raise TypeError("head[0] is not a 3x3 'same' convolution")
        self._last = self._conv_spec(last, relu=False)
        # Split the head by its input channels: cat(fine, context) -> fine part + context part.
        w = net.head[0][0].weight.detach().to("cpu", torch.float64)
        fine_ch = self._stem[-1]["weight"].shape[0]
        w_fine, w_ctx = w[:, :fine_ch], w[:, fine_ch:]
        self._head_fine = dict(head, weight=w_fine.to(dtype).contiguous(memory_format=torch.channels_last))
        # Output row 2i+a, kernel row u reads upsampled row 2i+a+u-1, i.e. context row i + (a+u-1)//2. As a
        # transposed convolution (stride 2, padding 1, kernel 4) that context row i+d feeds output row 2i+a through
        # kernel row 2(-d) + a + 1.
        wt = torch.zeros(w_ctx.shape[1], w_ctx.shape[0], 4, 4, dtype=torch.float64)  # in, out, kh, kw
        for a in (0, 1):
            for b in (0, 1):
                for u in range(3):
                    for v in range(3):
                        du, dv = (a + u - 1) // 2, (b + v - 1) // 2
                        wt[:, :, a + 1 - 2 * du, b + 1 - 2 * dv] += w_ctx[:, :, u, v].T
        self._ctx_up = wt.to(dtype).contiguous(memory_format=torch.channels_last)
        self._fused = torch.backends.mkldnn.is_available() and hasattr(torch.ops.mkldnn, "_convolution_pointwise")
        self._pack = self._fused and hasattr(torch.ops.mkldnn, "_reorder_convolution_weight")
        transposed_ops = ("_reorder_convolution_transpose_weight", "_convolution_transpose_pointwise")
        self._pack_transposed = self._fused and all(hasattr(torch.ops.mkldnn, op) for op in transposed_ops)
        self._packed: dict[int, list] = {}  # batch size -> weight per convolution, packed for it
        self._warm: set[int] = set()  # batch sizes run once already

    def _conv(self, blk: torch.nn.Module, first: bool = False) -> dict:
        # A ConvBNReLU whose BatchNorm was folded: [Conv2d, Identity, ReLU].
        conv, bn, act = blk[0], blk[1], blk[2]
        nn = torch.nn
        if not (isinstance(conv, nn.Conv2d) and isinstance(bn, nn.Identity) and isinstance(act, nn.ReLU)):
            raise TypeError("not a folded Conv-BN-ReLU block")
        return self._conv_spec(conv, relu=True, raw_input=first)

    def _conv_spec(self, conv: torch.nn.Conv2d, relu: bool, raw_input: bool = False) -> dict:
        if conv.groups != 1 or conv.padding_mode != "zeros" or isinstance(conv.padding, str) or conv.bias is None:
            raise TypeError("unsupported convolution")
        w, b = conv.weight.detach().to("cpu", torch.float64), conv.bias.detach().to("cpu", torch.float64)
        if raw_input:
            if any(conv.padding):
                raise TypeError("the stem convolution pads its input: the input scaling cannot be folded into it")
            if w.shape[1] != 3:
                raise TypeError("the stem convolution does not take 3 input channels")
            # conv((x / 255 - mean_c) / std_c) = conv'(x) with w'[:, c] = w[:, c] / (255 std_c) and
            # b' = b - sum over c, kh, kw of w[:, c] * mean_c / std_c; computed in float64, rounded once.
            inv = 1.0 / self._std
            b = b - (w.sum(dim=(2, 3)) * (self._mean * inv)).sum(dim=1)
            w = w * (inv / 255.0).view(1, 3, 1, 1)
        return {
            "weight": w.to(self.dtype).contiguous(memory_format=torch.channels_last), "bias": b.to(self.dtype),
            "kernel": list(conv.kernel_size), "padding": list(conv.padding), "stride": list(conv.stride),
            "dilation": list(conv.dilation), "relu": relu,
        }

    def _weights(self, n: int) -> list:
        """The convolution weights (stem..., context..., head's fine part, last, head's context part), packed for
        batch size n."""
        packed = self._packed.get(n)
        if packed is None:
            specs = [*self._stem, *self._context]
            side = self.tile_size
            sides = []
            for spec in specs:  # input side of each convolution
                sides.append(side)
                k, p, s, d = spec["kernel"][0], spec["padding"][0], spec["stride"][0], spec["dilation"][0]
                side = (side + 2 * p - d * (k - 1) - 1) // s + 1
            fine_side = sides[len(self._stem)] if self._context else side
            specs += [self._head_fine, self._last]
            sides += [fine_side, fine_side]
            packed = []
            for spec, side in zip(specs, sides):
                w = spec["weight"]
                if self._pack:  # the input size only steers oneDNN's choice of weight layout
                    w = torch.ops.mkldnn._reorder_convolution_weight(
                        w, spec["padding"], spec["stride"], spec["dilation"], 1, [n, w.shape[1], side, side]
                    )
                packed.append(w)
            w = self._ctx_up
            if self._pack_transposed:
                w = torch.ops.mkldnn._reorder_convolution_transpose_weight(
                    w, [1, 1], [0, 0], [2, 2], [1, 1], 1, [n, w.shape[0], fine_side // 2, fine_side // 2]
                )
            packed.append(w)
            self._packed[n] = packed  # a race only packs twice: both results are the same
        return packed

    def _run(self, x: torch.Tensor, w: torch.Tensor, spec: dict, add: torch.Tensor | None = None) -> torch.Tensor:
        """relu(conv(x) + add) (relu and add as the spec says), as one oneDNN call where torch has it."""
        if self._fused:
            unary = "relu" if spec["relu"] else "none"
            args = (spec["padding"], spec["stride"], spec["dilation"], 1)
            if add is None:
                return torch.ops.mkldnn._convolution_pointwise(x, w, spec["bias"], *args, unary, [], "")
            return torch.ops.mkldnn._convolution_pointwise.binary(
                x, add, w, spec["bias"], *args, "add", None, unary if spec["relu"] else None, [], ""
            )
        y = F.conv2d(x, w, spec["bias"], spec["stride"], spec["padding"], spec["dilation"])
        if add is not None:
            y = y.add_(add)
        return y.relu_() if spec["relu"] else y

    def logits(self, x: torch.Tensor) -> torch.Tensor:
        """Class logits (N x C x T/s x T/s) for x: N x 3 x T x T, raw 0-255 RGB values in `dtype`, channels_last."""
        packed = self._weights(x.shape[0])
        weights = iter(packed)
        for spec in self._stem:
            x = self._run(x, next(weights), spec)
        fine = x
        for spec in self._context:
            x = self._run(x, next(weights), spec)
        if 2 * x.shape[-2] != fine.shape[-2] or 2 * x.shape[-1] != fine.shape[-1]:
            raise RuntimeError("the context branch is not at half the resolution of the fine one")
        if self._pack_transposed:
            ctx_part = torch.ops.mkldnn._convolution_transpose_pointwise(
                x, packed[-1], None, [1, 1], [0, 0], [2, 2], [1, 1], 1, "none", [], ""
            )
        else:
            ctx_part = F.conv_transpose2d(x, self._ctx_up, None, stride=2, padding=1)
        x = self._run(fine, next(weights), self._head_fine, add=ctx_part)
        return self._run(x, next(weights), self._last)

    def warm(self, n: int) -> None:
        """Run one blank batch of n tiles, once per size and process: oneDNN builds its kernels for a shape on its
        first call, which would otherwise stall the first batch of the first slide."""
        if n in self._warm:
            return
        with torch.inference_mode():
            x = torch.zeros(n, 3, self.tile_size, self.tile_size, dtype=self.dtype)
            self.logits(x.contiguous(memory_format=torch.channels_last))
        self._warm.add(n)

    def __call__(self, batch: np.ndarray) -> torch.Tensor:
        """uint8 class maps (N x T/s x T/s) for a uint8 N x T x T x 3 batch."""
        # NHWC -> NCHW is a view with channels_last strides; the dtype conversion keeps that layout.
        x = torch.from_numpy(batch).permute(0, 3, 1, 2).to(self.dtype)
        return self.logits(x).argmax(1).to(torch.uint8)


_CPU_NETS: weakref.WeakKeyDictionary[torch.nn.Module, dict] = weakref.WeakKeyDictionary()
_CPU_NETS_LOCK = threading.Lock()


def cpu_net(model: LoadedModel, amp: str) -> CpuNet | None:
    """The CpuNet of `model` computing in bfloat16 (amp "bf16") or float32 ("off"), or None where it does not apply.

    It applies to an eager TinySegNet on CPU (the built-in model, or any .pt2 whose metadata names that
    architecture), with the model's normalisation folded in. It is built once per model and process (later slides
    reuse it, kernels and packed weights warm) and only kept if its float32 twin computes the model's own float32
    logits on prepared input (within 1e-3) on a random tile: any other net, or a changed forward, falls back to the
    plain module.
    """
    net = model.module
    if model.device.type != "cpu" or type(net) is not TinySegNet or amp not in ("bf16", "off"):
        return None  # fp16 on a CPU (where it is native) runs the module under autocast
    dtype = torch.bfloat16 if amp == "bf16" else torch.float32
    key = (dtype, tuple(model.normalisation.mean), tuple(model.normalisation.std))
    with _CPU_NETS_LOCK:
        built = _CPU_NETS.setdefault(net, {})
        if key not in built:
            built[key] = _build_cpu_net(model, dtype)
        return built[key]


def _build_cpu_net(model: LoadedModel, dtype: torch.dtype) -> CpuNet | None:
    T = model.tile_size
    norm = {"mean": model.normalisation.mean, "std": model.normalisation.std}
    try:
        check = CpuNet(model.module, torch.float32, T, **norm)
        rgb = torch.randint(0, 256, (1, T, T, 3), generator=torch.Generator().manual_seed(0), dtype=torch.uint8)
        with torch.inference_mode():
            want = model.module(model.prepare(rgb))
            got = check.logits(rgb.permute(0, 3, 1, 2).float())  # channels_last strides, as __call__ passes it
        tolerance = 1e-3 * max(1.0, float(want.abs().max()))
        if got.shape != want.shape or not torch.allclose(got, want, rtol=0, atol=tolerance):
            return None
        fast = check if dtype == torch.float32 else CpuNet(model.module, dtype, T, **norm)
        fast.warm(1)
    except Exception:  # noqa: BLE001 - not the net this was written for, or an op this torch lacks: the plain
        return None  # module computes it
    return fast
