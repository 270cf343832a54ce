"""Bytes that must hold one JSON object (a config file, a safetensors header): the one decoder."""

from __future__ import annotations

import json
from typing import Any


def json_object(raw: bytes) -> dict[str, Any]:
    """``raw`` (UTF-8) as a JSON object: ValueError (a UnicodeDecodeError too) when it is not JSON,
    TypeError when it is JSON but not an object. The caller words the one-line error."""
    doc = json.loads(raw.decode("utf-8"))
    if not isinstance(doc, dict):
        raise TypeError("not a JSON object")
    return doc
