"""Acceptance figures and the Prometheus text they are read from.

Each engine counts acceptance its own way (engine adapters implement ``read_acceptance``); this
module holds what they share: counter reading with ``prometheus_client``'s parser (never by
hand: label escaping and exposition details differ). The :class:`Acceptance` result, the
:class:`AcceptanceWindow` protocol the runner drives around the timed requests and
:class:`LatencyHistograms` are named by the adapter protocol, so they live in ``engines/adapters/exchange.py``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from servelab.engines.adapters.exchange import Acceptance, LatencyHistograms


def sum_counters(text: str, names: Iterable[str], by_label: str | None = None) -> dict[str, Any]:
    """Sum the ``<name>_total`` samples of each counter over all label sets (engines, DP ranks).

    With ``by_label``, a counter's value is a ``{label value: sum}`` dict instead (per position).
    Counters not exposed are absent from the result.
    """
    wanted = set(names)
    out: dict[str, Any] = {}
    for family in text_string_to_metric_families(text):
        base = family.name[: -len("_total")] if family.name.endswith("_total") else family.name
        if base not in wanted:
            continue
        for sample in family.samples:
            if sample.name not in (base + "_total", base):
                continue
            if by_label is not None and by_label in sample.labels:
                bucket = out.setdefault(base, {})
                if not isinstance(bucket, dict):
                    continue
                key = sample.labels[by_label]
                bucket[key] = bucket.get(key, 0.0) + float(sample.value)
            elif by_label is None:
                out[base] = float(out.get(base, 0.0)) + float(sample.value)
    return out


class NoAcceptance:
    """The window for a server that does not speculate: nothing to count."""

    async def start(self) -> None:
        return None

    def request_fields(self) -> dict[str, Any]:
        return {}

    def note(self, payload: Mapping[str, Any]) -> None:
        return None

    async def finish(self) -> Acceptance | None:
        return None


@dataclass(frozen=True)
class ServerLatency:
    """Mean TTFT and inter-token latency by the server's histograms over one window (sum/count deltas).

    A figure is None when the server does not expose that histogram or counted nothing meanwhile.
    """

    source: str
    requests: float | None
    mean_ttft_ms: float | None
    mean_itl_ms: float | None


def histogram_totals(text: str, names: Iterable[str]) -> dict[str, tuple[float, float]]:
    """``{histogram: (sum, count)}`` over all label sets, read with prometheus_client's parser."""
    wanted = set(names)
    out: dict[str, tuple[float, float]] = {}
    for family in text_string_to_metric_families(text):
        if family.name not in wanted or family.type != "histogram":
            continue
        total, count = 0.0, 0.0
        for sample in family.samples:
            if sample.name == family.name + "_sum":
                total += float(sample.value)
            elif sample.name == family.name + "_count":
                count += float(sample.value)
        out[family.name] = (total, count)
    return out


def latency_between(hist: LatencyHistograms, before: str, after: str) -> ServerLatency:
    """The server's mean TTFT and ITL over the window between two ``/metrics`` scrapes."""
    a = histogram_totals(before, (hist.ttft, hist.itl))
    b = histogram_totals(after, (hist.ttft, hist.itl))

    def mean_ms(name: str) -> tuple[float | None, float | None]:
        if name not in a or name not in b:
            return None, None
        count = b[name][1] - a[name][1]
        return ((b[name][0] - a[name][0]) / count * 1000.0 if count > 0 else None), count

    ttft, requests = mean_ms(hist.ttft)
    itl, _ = mean_ms(hist.itl)
    return ServerLatency(f"server /metrics histograms {hist.ttft}, {hist.itl} (sum/count delta over the timed requests)", requests, ttft, itl)
