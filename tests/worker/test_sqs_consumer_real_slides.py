"""The queue flow with the real model on real scanner files: an SVS object and a DICOM WSI series sent as a prefix,
through moto_server, as a pod would meet them."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

from sqs_helpers import RESULTS, SLIDES, clients, counts, drain, get_json, make_buckets, make_queues, send  # noqa: E402

from worker.consumer_settings import ConsumerSettings  # noqa: E402
from worker.message_actions import DLQ_REASON_ATTR  # noqa: E402
from worker.models.loading import load_model  # noqa: E402
from worker.sqs_consumer import Consumer, model_processor  # noqa: E402

REAL = Path(__file__).resolve().parents[3] / "shared" / "real-slides"
pytestmark = pytest.mark.skipif(not (REAL / "README.md").is_file(),
                                reason=f"{REAL} is absent: the real scanner slides are shared data")
OUT = f"s3://{RESULTS}/real/"


def test_an_svs_object_is_analysed_and_a_coarse_dicom_prefix_is_dead_lettered_naming_s3(aws, tmp_path):
    s3, sqs = clients()
    make_buckets(s3)
    s3.upload_file(str(REAL / "CMU-1-Small-Region.svs"), SLIDES, "in/CMU-1-Small-Region.svs")
    for f in sorted((REAL / "dicom-bpaec").iterdir()):
        s3.upload_file(str(f), SLIDES, f"in/bpaec/{f.name}")
    url, dlq = make_queues(sqs)
    send(sqs, url, {"slide": f"s3://{SLIDES}/in/CMU-1-Small-Region.svs", "output": OUT})
    send(sqs, url, {"slide": f"s3://{SLIDES}/in/bpaec/", "output": OUT})
    settings = ConsumerSettings(queue_url=url, mode="job", wait_time_s=0, visibility_timeout_s=60,
                                visibility_extension_interval_s=20, retry_backoff_s=0, hard_exit_after_grace=False,
                                scratch_dir=str(tmp_path / "scratch"))
    c = Consumer(settings, model_processor(load_model(None, torch.device("cpu"))))
    assert c.run() == 0
    assert [o.status for o in c.outcomes] == ["done", "dead-lettered"]
    summary = get_json(s3, "real/CMU-1-Small-Region.json")
    assert summary["input"]["format"] == "Aperio SVS" and summary["input"]["reader"] == "tifffile"
    assert summary["analysis"]["mpp_um"] == pytest.approx(0.499) and summary["tiles_seen"] > 0
    dead = drain(sqs, dlq)
    reason = dead[0]["MessageAttributes"][DLQ_REASON_ATTR]["StringValue"]
    assert reason.startswith(f"bad slide s3://{SLIDES}/in/bpaec/: ")
    assert "coarser than the model needs" in reason and "DICOM PixelSpacing" in reason
    assert str(tmp_path) not in reason  # the operator sees the S3 prefix, not the pod's scratch folder
    assert counts(sqs, url) == (0, 0)


def test_each_slide_carries_its_clock_and_the_model_load_is_charged_once(aws, tmp_path, caplog):
    from worker.sqs_consumer import run as consume

    s3, sqs = clients()
    make_buckets(s3)
    for name in ("first", "second"):
        s3.upload_file(str(REAL / "CMU-1-Small-Region.svs"), SLIDES, f"in/{name}.svs")
    url, _ = make_queues(sqs)
    for name in ("first", "second"):
        send(sqs, url, {"slide": f"s3://{SLIDES}/in/{name}.svs", "output": OUT})
    settings = ConsumerSettings(queue_url=url, mode="job", wait_time_s=0, visibility_timeout_s=60,
                                visibility_extension_interval_s=20, retry_backoff_s=0, hard_exit_after_grace=False,
                                scratch_dir=str(tmp_path / "scratch"), device="cpu")
    with caplog.at_level("INFO", logger="worker.consumer"):
        assert consume(settings) == 0
    first, second = (get_json(s3, f"real/{n}.json") for n in ("first", "second"))
    load = first["model_load_s_process"]
    assert load > 0 and second["model_load_s_process"] == load  # the same process, one load
    assert first["stages_s"]["model_load"] == load and second["stages_s"]["model_load"] == 0.0
    for s in (first, second):
        stages = s["stages_s"]
        assert set(stages) == {"download", "model_load", "open", "tissue", "inference", "write", "upload", "total"}
        assert all(v >= 0 for v in stages.values())
        assert stages["inference"] > 0 and stages["inference"] <= s["timings_s"]["total"]
        # Download, the pipeline and upload run one after the other inside the consumer's total; the pipeline's own
        # stages each lie within its total (its overlay writes may overlap the analysis, so their sum may not).
        pipeline = s["timings_s"]["total"]
        assert stages["download"] + pipeline + stages["upload"] <= stages["total"] + 0.01
        assert all(stages[k] <= pipeline + 0.001 for k in ("open", "tissue", "inference", "write"))
    done = [r.getMessage() for r in caplog.records if r.getMessage().startswith("slide.done ")]
    assert len(done) == 2
    for line in done:
        for key in ("download_s=", "model_load_s=", "tissue_s=", "inference_s=", "upload_s="):
            assert key in line, line
