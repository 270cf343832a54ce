"""``ProbeSummary``: a probe's summary (``probe.json``) as one typed, read-only value.

Built once where the JSON is read (:meth:`ProbeSummary.from_json`) or made (the runner, a
campaign point's report); every reader uses its attributes. Older files read the same as they
always did: a missing key gives the default the readers used to give it (None, an empty list or
mapping, 0 requests). :meth:`to_json` writes the very bytes servelab has always saved, key order
included, and keys it does not name (new figures, older layouts) are kept as they are.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any


def _json_default(value: Any) -> Any:
    """Anything JSON cannot encode natively (paths, enums) is written as text."""
    return str(value)


def _mapping(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _number(value: Any) -> float | None:
    return value if isinstance(value, (int, float)) and not isinstance(value, bool) else None


@dataclass(frozen=True, eq=False)
class ProbeSummary(Mapping[str, Any]):
    """One probe's figures (``vllm bench serve``'s key names), identity and load stages.

    It is a read-only mapping of the JSON too (``summary["stats"]``), for scripts and tests that
    read the file's keys; servelab's own readers use the attributes.
    """

    data: dict[str, Any] = field(default_factory=dict)

    # -- building and writing ---------------------------------------------------------------------
    @classmethod
    def from_json(cls, text: str | bytes) -> ProbeSummary:
        """The summary in ``probe.json``'s text; ValueError when it is not JSON, TypeError when not an object."""
        data = json.loads(text)
        if not isinstance(data, dict):
            raise TypeError("a probe summary is a JSON object")
        return cls(data)

    @classmethod
    def of(cls, value: Mapping[str, Any]) -> ProbeSummary:
        """``value`` itself when it is a summary, else its keys as one."""
        return value if isinstance(value, ProbeSummary) else cls(dict(value))

    def to_json(self) -> str:
        """``probe.json``'s text: indented, keys in the order they were made."""
        return json.dumps(self.data, indent=2, sort_keys=False, default=_json_default) + "\n"

    def with_fields(self, **fields: Any) -> ProbeSummary:
        """A copy with ``fields`` set: a key it had keeps its place, a new one comes last."""
        return ProbeSummary({**self.data, **fields})

    # -- the mapping ------------------------------------------------------------------------------
    def __getitem__(self, key: str) -> Any:
        return self.data[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self.data)

    def __len__(self) -> int:
        return len(self.data)

    # -- any figure by its key --------------------------------------------------------------------
    def figure(self, key: str) -> Any:
        """The top-level value under ``key`` (None when absent): the median over repeats for a figure."""
        return self.data.get(key)

    def stat(self, key: str) -> dict[str, Any]:
        """``stats[key]`` (median, MAD, n, unstable), empty when the file has none for it."""
        return _mapping(self.stats.get(key))

    # -- the figures servelab reads by name ---------------------------------------------------------
    @property
    def identity(self) -> dict[str, Any]:
        return _mapping(self.data.get("identity"))

    @property
    def stats(self) -> dict[str, Any]:
        return _mapping(self.data.get("stats"))

    @property
    def model(self) -> Any:
        """The model: the identity's, else the served model id the probe learnt."""
        return self.identity.get("model") or self.data.get("model_id")

    @property
    def host(self) -> Any:
        return self.identity.get("host")

    @property
    def engine(self) -> Any:
        """The engine: the identity's, else the backend the probe named."""
        return self.identity.get("engine") or self.data.get("backend")

    @property
    def baseline_experiment(self) -> Any:
        """The experiment this one is measured against (the summary's, else the identity's)."""
        return self.data.get("baseline_experiment") or self.identity.get("baseline")

    @property
    def max_tokens(self) -> Any:
        return self.data.get("max_tokens")

    @property
    def max_concurrency(self) -> Any:
        return self.data.get("max_concurrency")

    @property
    def repeats(self) -> Any:
        return self.data.get("repeats")

    @property
    def output_throughput(self) -> float | None:
        return _number(self.data.get("output_throughput"))

    @property
    def median_ttft_ms(self) -> float | None:
        return _number(self.data.get("median_ttft_ms"))

    @property
    def median_tpot_ms(self) -> float | None:
        return _number(self.data.get("median_tpot_ms"))

    @property
    def median_itl_ms(self) -> float | None:
        return _number(self.data.get("median_itl_ms"))

    @property
    def server_mean_itl_ms(self) -> float | None:
        return _number(self.data.get("server_mean_itl_ms"))

    @property
    def acceptance_rate(self) -> float | None:
        """``spec_decode_acceptance_rate``, in percent."""
        return _number(self.data.get("spec_decode_acceptance_rate"))

    @property
    def acceptance_length(self) -> float | None:
        """``spec_decode_acceptance_length``."""
        return _number(self.data.get("spec_decode_acceptance_length"))

    @property
    def per_position(self) -> list[float]:
        """``spec_decode_per_position_acceptance_rates`` (fractions), empty when not measured."""
        return list(self.data.get("spec_decode_per_position_acceptance_rates") or [])

    @property
    def unstable(self) -> list[str]:
        """The figures whose MAD is over 10 % of their median."""
        return list(self.data.get("unstable") or [])

    @property
    def acceptance_source(self) -> Any:
        return self.data.get("acceptance_source")

    @property
    def latency_source(self) -> Any:
        return self.data.get("latency_source")

    @property
    def server_latency_source(self) -> Any:
        return self.data.get("server_latency_source")

    @property
    def output_distinct_share(self) -> float | None:
        return _number(self.data.get("output_distinct_share"))

    @property
    def requests(self) -> int:
        """How many requests a campaign point's figures stand on (0 when not said)."""
        return int(self.data.get("requests") or 0)

    @property
    def load_stages_s(self) -> dict[str, Any] | None:
        """Seconds each startup stage took (None when the file has none)."""
        stages = self.data.get("load_stages_s")
        return stages if isinstance(stages, dict) else None

    @property
    def per_category(self) -> dict[str, Any]:
        return _mapping(self.data.get("per_category"))
