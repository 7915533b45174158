"""The worker pod's settings for a lab's model and precision: the URI, digest and key checks the config and the pod
share, and the one-line refusals of a ModelMount or a precision that cannot work."""
from __future__ import annotations

import pytest

from components.spec import worker_pod as wp
from components.spec.validation import ConfigError

DIGEST = "ab" * 32
IMAGE = "123456789012.dkr.ecr.us-east-1.amazonaws.com/w@sha256:" + "0" * 64


@pytest.mark.parametrize("uri,ok", [("s3://tils-lab-models/tils/v3.pt2", True), ("s3://a.b-c/k", True),
                                    ("s3://tils-lab-models/", False), ("s3://tils-lab-models", False),
                                    ("s3://Tils/v3.pt2", False), ("s3://a..b/k", False), ("gs://b/k", False),
                                    ("s3://tils-lab-models/dir/", False), (None, False)])
def test_model_uri_problem(uri, ok):
    assert (wp.model_uri_problem(uri) is None) is ok


def test_sha256_and_kms_key_arn_problems():
    assert wp.sha256_problem(DIGEST) is None and wp.sha256_problem(DIGEST.upper()) is not None
    assert wp.sha256_problem(DIGEST[:-1]) is not None
    assert wp.kms_key_arn_problem("arn:aws:kms:eu-west-1:123456789012:key/mrk-" + "a" * 32) is None
    assert wp.kms_key_arn_problem("arn:aws:kms:eu-west-1:123456789012:key/1234abcd-12ab-34cd-56ef-1234567890ab") is None
    assert wp.kms_key_arn_problem("arn:aws:kms:eu-west-1:123456789012:alias/lab") is not None


def test_model_object_arn():
    assert wp.model_object_arn("s3://tils-lab-models/tils/v3.pt2") == "arn:aws:s3:::tils-lab-models/tils/v3.pt2"


@pytest.mark.parametrize("model,field", [
    (wp.ModelMount(uri="s3://b-b/", sha256=DIGEST), "uri"),
    (wp.ModelMount(uri="s3://bbb/k", sha256="x"), "sha256"),
    (wp.ModelMount(uri="s3://bbb/k", sha256=DIGEST, kms_key_arn="alias/x"), "kms_key_arn"),
    (wp.ModelMount(uri="s3://bbb/k", sha256=DIGEST, cache_claim="c"), "cache_sub_path"),
    (wp.ModelMount(uri="s3://bbb/k", sha256=DIGEST, cache_max_bytes=0), "cache_max_bytes"),
])
def test_a_model_that_cannot_work_is_refused_naming_the_field(model, field):
    with pytest.raises(ConfigError) as e:
        wp.check_settings(wp.WorkerPodSettings(image=IMAGE, model=model))
    assert e.value.field == f"ModelMount.{field}" and "\n" not in str(e.value)


def test_precision_is_one_of_the_workers_and_the_model_env_is_reserved():
    with pytest.raises(ConfigError, match=r"^WorkerPodSettings.precision: 'int8' is not valid: one of auto, fp32"):
        wp.check_settings(wp.WorkerPodSettings(image=IMAGE, precision="int8"))
    for name in ("MODEL_URI", "MODEL_SHA256", "MODEL_CACHE_DIR", "MODEL_CACHE_MAX_BYTES", "PRECISION"):
        with pytest.raises(ConfigError, match="set by the component"):
            wp.check_settings(wp.WorkerPodSettings(image=IMAGE, env={name: "x"}))
    wp.check_settings(wp.WorkerPodSettings(image=IMAGE, precision="fp32",
                                           model=wp.ModelMount(uri="s3://bbb/k", sha256=DIGEST, cache_claim="c",
                                                               cache_sub_path="slides")))


def test_the_stacks_precisions_are_the_workers():
    # The components may not import the worker (its image ships worker/ alone), so the list is written twice.
    from worker.precisions import PRECISIONS

    assert wp.PRECISIONS == PRECISIONS
