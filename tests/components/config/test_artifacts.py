"""What the workers run, as the stack config says it: a workload's model, batch and precision, and the worker image
(prebuilt by digest, or the lab's build); each refusal one line naming the key and the value."""
import json

import pytest

from components import catalogue
from components.config import ModelSource, WorkerBuild, parse_config
from components.spec.validation import ConfigError

DIGEST = "ab" * 32
IMAGE = "123456789012.dkr.ecr.us-east-1.amazonaws.com/tils-lab-worker"
SLIDES = {"itemsIndependent": True, "modelLoadS": 45, "secondsPerItem": 8, "burstItems": 200,
          "expectedProcessingS": 300}
STUDIES = {"itemsIndependent": False, "ordered": True, "stateful": True}


def config(slides: dict | None = None, studies: dict | None = None, **top) -> dict:
    deployer = "arn:aws:iam::123456789012:role/gpuburst-deploy"
    raw = {"gpuburst:alarmEmails": json.dumps(["oncall@example.org"]),
           "gpuburst:deploy": json.dumps({"deployerRoleArns": [deployer],
                                          "runner": {"roleArn": deployer, "backendUrl": "s3://example-state"}}),
           "gpuburst:workloads": json.dumps({"slides": {**SLIDES, **(slides or {})},
                                             "studies": {**STUDIES, **(studies or {})}})}
    raw.update({f"gpuburst:{k}": v if isinstance(v, str) else json.dumps(v) for k, v in top.items()})
    return raw


def refusal(raw: dict) -> str:
    with pytest.raises(ConfigError) as e:
        parse_config(raw)
    text = str(e.value)
    assert "\n" not in text
    return text


def slides(raw: dict):
    return next(w for w in parse_config(raw).workloads if w.name == "slides")


def test_a_model_by_uri_and_digest_is_parsed_with_the_catalogue_cache_size():
    w = slides(config({"model": {"uri": "s3://tils-lab-models/tils/v3.pt2", "sha256": DIGEST.upper()}}))
    assert w.model == ModelSource(uri="s3://tils-lab-models/tils/v3.pt2", sha256=DIGEST, kms_key_arn=None,
                                  cache_gib=catalogue.MODEL_CACHE_DEFAULT_GIB)
    assert (w.model.bucket, w.model.key) == ("tils-lab-models", "tils/v3.pt2")


@pytest.mark.parametrize("model,key,value", [
    ({"uri": "https://tils-lab-models.s3.amazonaws.com/v3.pt2", "sha256": DIGEST}, "uri",
     "https://tils-lab-models.s3.amazonaws.com/v3.pt2"),
    ({"uri": "s3://tils-lab-models/models/", "sha256": DIGEST}, "uri", "s3://tils-lab-models/models/"),
    ({"uri": "s3://Tils_Lab/v3.pt2", "sha256": DIGEST}, "uri", "s3://Tils_Lab/v3.pt2"),
    ({"uri": "s3://tils-lab-models/v3.pt2", "sha256": "abc123"}, "sha256", "abc123"),
    ({"uri": "s3://tils-lab-models/v3.pt2", "sha256": "g" * 64}, "sha256", "g" * 64),
    ({"uri": "s3://tils-lab-models/v3.pt2", "sha256": DIGEST, "kmsKeyArn": "alias/lab"}, "kmsKeyArn", "alias/lab"),
    ({"uri": "s3://tils-lab-models/v3.pt2", "sha256": DIGEST, "cacheGiB": 0}, "cacheGiB", 0),
    ({"uri": "s3://tils-lab-models/v3.pt2", "sha256": DIGEST, "digest": "x"}, "digest", "x"),
    ({"uri": "s3://tils-lab-models/v3.pt2"}, "sha256", None),
])
def test_a_bad_model_is_refused_in_one_line_naming_the_key_and_value(model, key, value):
    text = refusal(config({"model": model}))
    assert text.startswith(f"gpuburst:workloads.slides.model.{key}: {value!r} is not valid: "), text


def test_a_kms_key_arn_is_kept():
    arn = "arn:aws:kms:us-east-1:123456789012:key/1234abcd-12ab-34cd-56ef-1234567890ab"
    w = slides(config({"model": {"uri": "s3://tils-lab-models/v3.pt2", "sha256": DIGEST, "kmsKeyArn": arn,
                                 "cacheGiB": 50}}))
    assert (w.model.kms_key_arn, w.model.cache_gib) == (arn, 50)


def test_messages_per_job_and_precision_are_parsed_with_defaults():
    assert (slides(config()).messages_per_job, slides(config()).precision) == (1, "auto")
    w = slides(config({"messagesPerJob": 25, "precision": "fp32"}))
    assert (w.messages_per_job, w.precision) == (25, "fp32")


@pytest.mark.parametrize("bad,key,value", [({"messagesPerJob": 0}, "messagesPerJob", 0),
                                           ({"messagesPerJob": 1001}, "messagesPerJob", 1001),
                                           ({"messagesPerJob": "25"}, "messagesPerJob", "25"),
                                           ({"precision": "int8"}, "precision", "int8")])
def test_bad_batch_or_precision_is_refused(bad, key, value):
    assert refusal(config(bad)).startswith(f"gpuburst:workloads.slides.{key}: {value!r} is not valid: ")


def test_a_batch_whose_job_deadline_would_pass_a_week_is_refused_naming_the_largest():
    text = refusal(config({"messagesPerJob": 1000, "expectedProcessingS": 3000, "pattern": "scaledjob"}))
    assert text.startswith("gpuburst:workloads.slides.messagesPerJob: 1000 is not valid: at most 201: ") and \
        "3000045 s" in text


def test_messages_per_job_on_a_consumer_is_refused_naming_why_it_is_one():
    text = refusal(config(studies={"messagesPerJob": 5}))
    assert text.startswith("gpuburst:workloads.studies.messagesPerJob: 5 is not valid: 1 or unset: ") and \
        "runs as the persistent consumer (ordered:" in text
    forced = refusal(config({"pattern": "consumer", "messagesPerJob": 5}))
    assert "(pattern: consumer)" in forced
    assert parse_config(config(studies={"messagesPerJob": 1}))  # the default, stated, does nothing wrong


def test_a_prebuilt_worker_image_by_digest_is_kept_and_by_tag_refused():
    assert parse_config(config(workerImage=f"{IMAGE}@sha256:{DIGEST}")).worker_image == f"{IMAGE}@sha256:{DIGEST}"
    text = refusal(config(workerImage=f"{IMAGE}:v3"))
    assert text.startswith(f"gpuburst:workerImage: '{IMAGE}:v3' is not valid: ") and "pin it by digest" in text
    assert refusal(config(workerImage=f"{IMAGE}@sha256:abc")).startswith("gpuburst:workerImage: ")


def test_a_worker_build_is_parsed_and_excludes_a_prebuilt_image():
    cfg = parse_config(config(workerBuild={"context": "lab-image"}))
    assert cfg.worker_build == WorkerBuild(context="lab-image", dockerfile="Dockerfile")
    both = refusal(config(workerBuild={"context": "lab-image"}, workerImage=f"{IMAGE}@sha256:{DIGEST}"))
    assert both.startswith("gpuburst:workerBuild: {'context': 'lab-image'} is not valid: unset when workerImage")
    assert refusal(config(workerBuild={"context": "/home/lab"})).startswith(
        "gpuburst:workerBuild.context: '/home/lab' is not valid: a relative path")
    assert refusal(config(workerBuild={"path": "x"})).startswith("gpuburst:workerBuild.path: 'x' is not valid: ")
    assert refusal(config(workerBuild={"dockerfile": "D"})).startswith("gpuburst:workerBuild.context: None ")


def test_worker_image_cuda_needs_a_lab_image_and_a_known_major():
    assert parse_config(config(workerImage=f"{IMAGE}@sha256:{DIGEST}", workerImageCuda="12.8")
                        ).worker_image_cuda == "12.8"
    assert refusal(config(workerImageCuda="12.8")).startswith(
        "gpuburst:workerImageCuda: '12.8' is not valid: unset unless workerImage or workerBuild")
    text = refusal(config(workerImage=f"{IMAGE}@sha256:{DIGEST}", workerImageCuda="11.8"))
    assert text.startswith("gpuburst:workerImageCuda: '11.8' is not valid: ") and "12.x or 13.x" in text
