"""Prometheus counters summed over label sets, and vLLM's acceptance window arithmetic."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx
import pytest

from servelab.engines.probe.metrics import NoAcceptance, sum_counters
from servelab.engines.adapters.vllm import ADAPTER as VLLM

# Two engines (DP ranks) in vLLM's exposition format, as /metrics serves it.
TEXT_TEMPLATE = """\
# HELP vllm:spec_decode_num_drafts_total Number of spec decoding drafts.
# TYPE vllm:spec_decode_num_drafts_total counter
vllm:spec_decode_num_drafts_total{{engine="0",model_name="tiny"}} {d0}
vllm:spec_decode_num_drafts_total{{engine="1",model_name="tiny"}} {d1}
# HELP vllm:spec_decode_num_draft_tokens_total Number of draft tokens.
# TYPE vllm:spec_decode_num_draft_tokens_total counter
vllm:spec_decode_num_draft_tokens_total{{engine="0",model_name="tiny"}} {t0}
vllm:spec_decode_num_draft_tokens_total{{engine="1",model_name="tiny"}} {t1}
# HELP vllm:spec_decode_num_accepted_tokens_total Number of accepted tokens.
# TYPE vllm:spec_decode_num_accepted_tokens_total counter
vllm:spec_decode_num_accepted_tokens_total{{engine="0",model_name="tiny"}} {a0}
vllm:spec_decode_num_accepted_tokens_total{{engine="1",model_name="tiny"}} {a1}
# HELP vllm:spec_decode_num_accepted_tokens_per_pos_total Accepted tokens per draft position.
# TYPE vllm:spec_decode_num_accepted_tokens_per_pos_total counter
vllm:spec_decode_num_accepted_tokens_per_pos_total{{engine="0",model_name="tiny",position="0"}} {p00}
vllm:spec_decode_num_accepted_tokens_per_pos_total{{engine="0",model_name="tiny",position="1"}} {p01}
vllm:spec_decode_num_accepted_tokens_per_pos_total{{engine="1",model_name="tiny",position="0"}} {p10}
vllm:spec_decode_num_accepted_tokens_per_pos_total{{engine="1",model_name="tiny",position="1"}} {p11}
# HELP vllm:num_requests_running Number of requests running.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{{engine="0",model_name="tiny"}} 1.0
"""


def text(**v: float) -> str:
    return TEXT_TEMPLATE.format(**v)


@contextmanager
def metrics_server(pages: list[str]) -> Iterator[str]:
    """A real HTTP server on 127.0.0.1 whose /metrics serves ``pages`` in turn (two DP ranks
    cannot be made with one tiny CPU server; the real server is probed in test_probe_runner.py)."""

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: object) -> None:
            return None

        def do_GET(self) -> None:
            body = (pages.pop(0) if self.path == "/metrics" else "").encode()
            self.send_response(200 if self.path == "/metrics" else 404)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


BEFORE = dict(d0=10, d1=5, t0=20, t1=10, a0=8, a1=4, p00=5, p01=3, p10=3, p11=1)
AFTER = dict(d0=30, d1=15, t0=60, t1=30, a0=38, a1=14, p00=25, p01=13, p10=9, p11=5)


def test_sum_over_label_sets() -> None:
    got = sum_counters(text(**BEFORE), ["vllm:spec_decode_num_drafts", "vllm:spec_decode_num_accepted_tokens", "vllm:absent"])
    assert got == {"vllm:spec_decode_num_drafts": 15.0, "vllm:spec_decode_num_accepted_tokens": 12.0}
    per = sum_counters(text(**BEFORE), ["vllm:spec_decode_num_accepted_tokens_per_pos"], by_label="position")
    assert per == {"vllm:spec_decode_num_accepted_tokens_per_pos": {"0": 8.0, "1": 4.0}}


async def test_vllm_window_uses_deltas() -> None:
    with metrics_server([text(**BEFORE), text(**AFTER)]) as url:
        async with httpx.AsyncClient(base_url=url, trust_env=False) as http:
            window = VLLM.read_acceptance(http, None, None, 8)  # type: ignore[arg-type]
            await window.start()
            acc = await window.finish()
    assert acc is not None
    drafts, draft_tokens, accepted = 45 - 15, 90 - 30, 52 - 12
    assert acc.drafts == drafts and acc.draft_tokens == draft_tokens and acc.accepted == accepted
    assert acc.rate == pytest.approx(accepted / draft_tokens)
    assert acc.length == pytest.approx(1 + accepted / drafts)
    assert acc.per_position == pytest.approx([(34 - 8) / drafts, (18 - 4) / drafts])


async def test_vllm_window_without_speculation_is_none() -> None:
    page = "# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running{engine=\"0\"} 0.0\n"
    with metrics_server([page, page]) as url:
        async with httpx.AsyncClient(base_url=url, trust_env=False) as http:
            window = VLLM.read_acceptance(http, None, None, 8)  # type: ignore[arg-type]
            await window.start()
            assert await window.finish() is None
    empty = NoAcceptance()
    await empty.start()
    assert await empty.finish() is None and empty.request_fields() == {}


async def test_missing_metrics_endpoint_is_one_clean_line() -> None:
    from servelab.engines.catalog.folder import load_catalog
    from servelab.engines.errors import ServelabError
    from servelab.engines.probe import prompts
    from servelab.engines.catalog.experiment import ProbeSettings
    from servelab.engines.probe.runner import run_probe
    from tests.conftest import EXPERIMENTS
    from tests.fixtures.fake_sglang import FakeSglangServer

    exp = load_catalog(EXPERIMENTS).get("tiny-cpu-vllm-ngram").experiment
    with FakeSglangServer("native") as server:  # answers chat, but has no /metrics
        with pytest.raises(ServelabError, match=r"probe of http://127\.0\.0\.1:\d+ failed: HTTPStatusError") as info:
            await run_probe(server.url, prompts.builtin("math"), ProbeSettings(max_tokens=4, repeats=1, warmup=0), adapter=VLLM, experiment=exp)
    assert "\n" not in str(info.value)
