"""ProbeSummary: probe.json as one typed value, written byte for byte as before, older files read as before."""

from __future__ import annotations

import json

from servelab.engines.probe.summary import ProbeSummary

SAVED = {
    "format": "servelab-probe/1",
    "model_id": "tiny",
    "output_throughput": 120.5,
    "spec_decode_acceptance_length": 2.5,
    "stats": {"output_throughput": {"median": 120.5, "mad": 1.5, "n": 3, "unstable": False}},
    "unstable": [],
    "identity": {"model": "/m/tiny", "host": "local", "engine": "vllm", "path": __file__},
    "load_stages_s": {"weights": 1.0},
}


def test_to_json_is_what_was_saved_and_reads_back() -> None:
    old = json.dumps(SAVED, indent=2, sort_keys=False, default=str) + "\n"
    s = ProbeSummary.from_json(old)
    assert s.to_json() == old
    assert ProbeSummary.from_json(old.encode("utf-8")) == s == SAVED
    assert s.with_fields(run="r1", model_id="x").to_json() == json.dumps({**SAVED, "model_id": "x", "run": "r1"}, indent=2) + "\n"


def test_attributes() -> None:
    s = ProbeSummary(dict(SAVED))
    assert (s.model, s.host, s.engine, s.output_throughput, s.acceptance_length) == ("/m/tiny", "local", "vllm", 120.5, 2.5)
    assert s.stat("output_throughput")["mad"] == 1.5 and s.load_stages_s == {"weights": 1.0}
    assert s["identity"]["host"] == "local" and "stats" in s


def test_an_older_file_gives_the_old_defaults() -> None:
    s = ProbeSummary.from_json('{"model_id": "m", "backend": "sglang"}')
    assert (s.model, s.engine, s.host, s.baseline_experiment) == ("m", "sglang", None, None)
    assert (s.identity, s.stats, s.stat("x"), s.per_position, s.unstable, s.requests, s.load_stages_s) == ({}, {}, {}, [], [], 0, None)
    assert s.output_throughput is None and s.figure("anything") is None
