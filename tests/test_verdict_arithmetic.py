"""The verdict's arithmetic against figures worked out by hand (issue #32).

Each expected number below was computed on paper from the formula the docs state, not by calling
the code: a changed formula (the band as a plain sum of relative MADs, the acceptance length
without its bonus token, the rate over drafts instead of draft tokens) fails here.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx
import pytest

from servelab.engines.adapters.vllm import VllmCounterWindow
from servelab.engines.verdict.compare import speedup
from servelab.engines.probe.stats import mad, median


def probe(tput: float, mad_: float) -> dict[str, Any]:
    return {
        "output_throughput": tput, "max_tokens": 64, "max_concurrency": 1, "prompt_set_hash": "h", "model_id": "m",
        "repeats": 3, "stats": {"output_throughput": {"median": tput, "mad": mad_, "n": 3}},
        "identity": {"engine": "vllm", "model": "/m", "spec_method": "none", "host": "h", "prompt_set_hash": "h"},
    }


@pytest.mark.parametrize(
    "run, base, value, band, verdict",
    [
        # 120/100 = 1.2; relative MADs 3/120 = 0.025 and 2/100 = 0.02, in quadrature sqrt(0.001025)
        # = 0.0320156; band = 1.4826 * 0.0320156 * 1.2 = 0.056960. 1.2 - 0.057 = 1.143 > 1.10: helps.
        ((120.0, 3.0), (100.0, 2.0), 1.2, 0.056960, "helps"),
        # 66/100 = 0.66; 1/66 = 0.0151515 and 1/100 = 0.01: sqrt(0.00032957) = 0.0181541;
        # band = 1.4826 * 0.0181541 * 0.66 = 0.017764. 0.66 + 0.018 < 1.00: hurts.
        ((66.0, 1.0), (100.0, 1.0), 0.66, 0.017764, "hurts"),
        # 115/100 = 1.15; 4/115 = 0.0347826, 3/100 = 0.03: sqrt(0.00210983) = 0.0459329;
        # band = 1.4826 * 0.0459329 * 1.15 = 0.078314. 1.15 - 0.078 = 1.072 < 1.10: inconclusive
        # (a plain sum, 0.0647826, would give a band of 0.110 and the same word, but not this band).
        ((115.0, 4.0), (100.0, 3.0), 1.15, 0.078314, "inconclusive"),
        # No spread on either side: the band is 0 and the value decides; 1.11 > 1.10.
        ((111.0, 0.0), (100.0, 0.0), 1.11, 0.0, "helps"),
    ],
)
def test_speedup_and_its_band_match_the_hand_worked_figures(run: tuple[float, float], base: tuple[float, float], value: float, band: float, verdict: str) -> None:
    sp = speedup(probe(*run), probe(*base), "base")
    assert sp.value == pytest.approx(value, abs=1e-9)
    assert sp.band == pytest.approx(band, abs=5e-6)
    assert sp.verdict == verdict


def test_median_and_mad_by_hand() -> None:
    # sorted 1 2 3 4 100: median 3; deviations 2 1 0 1 97 -> sorted 0 1 1 2 97: MAD 1
    assert median([4, 1, 100, 3, 2]) == 3 and mad([4, 1, 100, 3, 2]) == 1
    # even count: median (2 + 3) / 2 = 2.5; deviations 1.5 0.5 0.5 1.5: MAD (0.5 + 1.5) / 2 = 1.0
    assert median([1, 2, 3, 4]) == 2.5 and mad([1, 2, 3, 4]) == 1.0


class _Metrics(BaseHTTPRequestHandler):
    """A real HTTP /metrics endpoint serving the next of a list of scrapes (vLLM's counter names)."""

    scrapes: list[str] = []

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        body = self.scrapes.pop(0).encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/plain; version=0.0.4")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        return None


def scrape(drafts: float, draft_tokens: float, accepted: float, per_pos: tuple[float, ...]) -> str:
    lines = []
    for engine in ("0", "1"):  # two DP ranks: the window sums their label sets
        lines += [
            f'vllm:spec_decode_num_drafts_total{{engine="{engine}",model_name="m"}} {drafts / 2}',
            f'vllm:spec_decode_num_draft_tokens_total{{engine="{engine}",model_name="m"}} {draft_tokens / 2}',
            f'vllm:spec_decode_num_accepted_tokens_total{{engine="{engine}",model_name="m"}} {accepted / 2}',
        ]
        lines += [f'vllm:spec_decode_num_accepted_tokens_per_pos_total{{engine="{engine}",model_name="m",position="{i}"}} {v / 2}' for i, v in enumerate(per_pos)]
    return "\n".join(["# TYPE vllm:spec_decode_num_drafts counter", *lines]) + "\n"


@pytest.fixture
def metrics_server() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Metrics)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


async def test_acceptance_rate_length_and_positions_from_the_counters_by_hand(metrics_server: str) -> None:
    # Over the window: 200 drafts of K=3 (600 draft tokens), 150 accepted, per position 90/45/15.
    # rate = 150 / 600 = 0.25; length = 1 + 150 / 200 = 1.75; per position 90/200, 45/200, 15/200.
    _Metrics.scrapes = [scrape(100, 300, 50, (40, 10, 0)), scrape(300, 900, 200, (130, 55, 15))]
    async with httpx.AsyncClient(base_url=metrics_server) as http:
        window = VllmCounterWindow(http)
        await window.start()
        acc = await window.finish()
    assert acc is not None
    assert (acc.drafts, acc.draft_tokens, acc.accepted) == (200, 600, 150)
    assert acc.rate == pytest.approx(0.25) and acc.length == pytest.approx(1.75)
    assert acc.per_position == pytest.approx([0.45, 0.225, 0.075])
