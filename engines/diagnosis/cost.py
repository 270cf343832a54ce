"""The measured cost of a speculative step against a plain decode step, and what it predicts.

At concurrency 1 every engine step emits one chunk per request, so the time between a request's
outputs is the time of one step: on the speculative run, draft + verify; on the baseline run (no
speculation), one plain decode step. The server's own inter-token histogram (vLLM observes it once
per step and request) is preferred over the client's gaps between streamed chunks, which a busy
2-core machine can read late and in bursts (issue 15). Their ratio, with the per-position curve,
gives the speedup estimate that is shown next to the measured one (see ``curve``).
"""

from __future__ import annotations

from servelab.engines.diagnosis.curve import estimate_by_k, recommend_k
from servelab.engines.diagnosis.model import Arm, StepCost


def step_cost(
    overall: Arm, k: int | None, plain_ms: float | None, baseline_run: str | None, measured: float | None, note: str = "", *, server_step_ms: float | None = None
) -> StepCost:
    """The cost model for this run; ``plain_ms`` is the baseline's time per token at concurrency 1.

    ``server_step_ms``: the server's mean time per step over the suite, used instead of the
    client's median chunk gap when the engine has the histogram.
    """
    step = server_step_ms if server_step_ms is not None and server_step_ms > 0 else overall.median_step_ms
    if step is None or step <= 0 or plain_ms is None or plain_ms <= 0 or not k:
        why = note or ("no timed steps" if step is None else "no baseline run probed with the same model and concurrency")
        return StepCost(step, plain_ms, baseline_run, None, None, None, measured, None, {}, why)
    ratio = step / plain_ms
    per_draft = max(0.0, (ratio - 1.0) / k)
    est = estimate_by_k(overall.per_position, per_draft) if overall.per_position else {}
    estimated = (overall.length / ratio) if overall.length is not None else None
    return StepCost(step, plain_ms, baseline_run, ratio, per_draft, estimated, measured, recommend_k(est), est, note)
