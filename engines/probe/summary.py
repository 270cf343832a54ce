"""``ProbeSummary``: a probe's summary (``probe.json``) as one typed, read-only value.

Built once where the JSON is read (:meth:`ProbeSummary.from_json`) or made (the runner, a
campaign point's report); every reader uses its attributes. Older files read the same as they
always did: a missing key gives the default the readers used to give it (None, an empty list or
mapping, 0 requests). :meth:`to_json` writes the very bytes servelab has always saved, key order
included, and keys it does not name (new figures, older layouts) are kept as they are.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar, overload


def _json_default(value: Any) -> Any:
    """Anything JSON cannot encode natively (paths, enums) is written as text."""
    return str(value)


def _mapping(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _number(value: Any) -> float | None:
    return value if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _list(value: Any) -> list[Any]:
    return list(value or [])


def _same(value: Any) -> Any:
    return value


T = TypeVar("T")


class _Key(Generic[T]):
    """A read-only attribute: the summary's top-level value under ``key``, through ``convert``
    (its default for a missing key: None, an empty list or mapping)."""

    def __init__(self, key: str, convert: Callable[[Any], T], doc: str = "") -> None:
        self.key = key
        self.convert = convert
        self.__doc__ = f"``{key}``" + (f": {doc}" if doc else "")

    @overload
    def __get__(self, obj: None, owner: type[Any]) -> _Key[T]: ...

    @overload
    def __get__(self, obj: ProbeSummary, owner: type[Any]) -> T: ...

    def __get__(self, obj: ProbeSummary | None, owner: type[Any]) -> _Key[T] | T:
        if obj is None:
            return self
        return self.convert(obj.data.get(self.key))


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
    identity = _Key("identity", _mapping)
    stats = _Key("stats", _mapping)

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

    max_tokens = _Key("max_tokens", _same)
    max_concurrency = _Key("max_concurrency", _same)
    repeats = _Key("repeats", _same)
    output_throughput = _Key("output_throughput", _number)
    median_ttft_ms = _Key("median_ttft_ms", _number)
    median_tpot_ms = _Key("median_tpot_ms", _number)
    median_itl_ms = _Key("median_itl_ms", _number)
    server_mean_itl_ms = _Key("server_mean_itl_ms", _number)
    acceptance_rate = _Key("spec_decode_acceptance_rate", _number, "in percent")
    acceptance_length = _Key("spec_decode_acceptance_length", _number)
    per_position = _Key("spec_decode_per_position_acceptance_rates", _list, "fractions, empty when not measured")
    unstable = _Key("unstable", _list, "the figures whose MAD is over 10 % of their median")
    acceptance_source = _Key("acceptance_source", _same)
    latency_source = _Key("latency_source", _same)
    server_latency_source = _Key("server_latency_source", _same)
    output_distinct_share = _Key("output_distinct_share", _number)

    @property
    def requests(self) -> int:
        """How many requests a campaign point's figures stand on (0 when not said)."""
        return int(self.data.get("requests") or 0)

    @property
    def load_s(self) -> float | None:
        """Seconds from start to ready by the log's clock (``load_s``; None in files made before it was kept)."""
        return _number(self.data.get("load_s"))

    @property
    def load_stages_s(self) -> dict[str, Any] | None:
        """Seconds each startup stage took (None when the file has none)."""
        stages = self.data.get("load_stages_s")
        return stages if isinstance(stages, dict) else None

    per_category = _Key("per_category", _mapping)
