"""A run's stored diagnosis: ``diagnosis.json`` beside ``probe.json``, read back.

Apart from :mod:`engines.diagnosis.artifacts` (which diagnoses and writes it) so that readers
(``engines/verdict/compare.py``'s verdict lines, the why screen) need not import the diagnosing code,
which itself asks ``engines/verdict/compare.py`` for the baseline speedup.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from servelab.engines.diagnosis.model import Diagnosis, from_dict
from servelab.engines.errors import ServelabError

if TYPE_CHECKING:
    from servelab.engines.runs.records import Located, RunsAPI

DIAGNOSIS_JSON = "diagnosis.json"


def parse(raw: bytes, run_id: str) -> Diagnosis:
    try:
        data: Any = json.loads(raw.decode("utf-8"))
        if not isinstance(data, dict):
            raise ValueError("not an object")
        return from_dict(data)
    except (ValueError, UnicodeDecodeError, KeyError, TypeError) as exc:
        raise ServelabError(f"run {run_id}: {DIAGNOSIS_JSON} is unreadable ({exc})") from None


async def load_diagnosis(runs: RunsAPI, run: str | Located) -> Diagnosis | None:
    """A run's stored diagnosis (None when it was never diagnosed); ``run``: its id, or the run located before."""
    raw = await runs.read_artifact(run, DIAGNOSIS_JSON)
    return None if raw is None else parse(raw, run if isinstance(run, str) else run.id)
