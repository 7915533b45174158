"""The probe message of `python -m components verify`: its SQS message attribute, and telling a probe from work."""
from __future__ import annotations

import json

VERIFY_PROBE_ATTRIBUTE = "gpuburst-verify"
"""Message attribute `python -m components verify` puts on its probe message (its value is the probe's uuid)."""


def verify_probe_id(msg: dict) -> str | None:
    """The uuid of a `verify` probe message (by its attribute, or a JSON body `{"verify_probe": uuid}`), else None."""
    attr = (msg.get("MessageAttributes") or {}).get(VERIFY_PROBE_ATTRIBUTE)
    if attr and attr.get("StringValue"):
        return attr["StringValue"]
    body = msg.get("Body", "")
    if "verify_probe" not in body:
        return None
    try:
        doc = json.loads(body)
    except ValueError:
        return None
    if isinstance(doc, dict) and set(doc) == {"verify_probe"} and isinstance(doc["verify_probe"], str):
        return doc["verify_probe"]
    return None
