"""How the run view copes with a huge, fast log: keypress-to-screen latency and the app's memory.

A real run (started by the host helper, like any launch) writes a 1,000,000-line vLLM-style log;
once the dashboard has indexed it, the run keeps growing it at 5,000 lines/s (with tqdm ``\\r`` bars and warnings mixed in). The dashboard
opens its run screen headless, follows the log, and gets a key every 200 ms (alternately ``k``,
which scrolls up and pauses, and ``G``, which resumes following). For each key we time from sending
it to the first frame drawn after its action ran. Memory is the process RSS while the log grows.

    .venv/bin/python bench/tui_follow.py [--lines 1000000] [--rate 5000] [--seconds 30]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

WRITER = r"""
import sys, time
import os
total, rate, seconds, go = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3]), sys.argv[4]
out = sys.stdout.buffer
n = 0
def line(i):
    if i % 997 == 0:
        return b"(EngineCore pid=42) WARNING 11-29 10:25:36 [vllm.py:1605] something odd happened at step %d\n" % i
    if i % 1499 == 0:
        return b"Loading safetensors checkpoint shards:  %d%% Completed | %d/64 [00:10<00:20,  2.0s/it]\r\n" % (i % 100, i % 64)
    return (b"(APIServer pid=41) INFO 11-29 10:25:35 [loggers.py:335] Engine 000: Avg prompt throughput: %d.0 tokens/s, "
            b"Avg generation throughput: 812.4 tokens/s, Running: 4 reqs, Waiting: 0 reqs, KV cache usage: 3.1%% step %d\n" % (i % 97, i))
buf = []
while n < total:
    buf.append(line(n)); n += 1
    if len(buf) >= 10000:
        out.write(b"".join(buf)); buf.clear()
out.write(b"".join(buf)); buf.clear(); out.flush()
while not os.path.exists(go):  # the bench says when the dashboard has caught up
    time.sleep(0.05)
start = time.monotonic(); batch = max(rate // 20, 1)
while time.monotonic() - start < seconds:
    out.write(b"".join(line(n + k) for k in range(batch))); out.flush(); n += batch
    time.sleep(max(0.0, (n - total) / rate - (time.monotonic() - start)))
"""


def rss_mb() -> float:
    with open("/proc/self/status") as f:
        for row in f:
            if row.startswith("VmRSS:"):
                return int(row.split()[1]) / 1024
    return float("nan")


def start_run(tmp: Path, lines: int, rate: int, seconds: float) -> tuple[Path, str, Path]:
    from tests.fixtures.tui import RUNCTL, make_tui_folder
    from engines.runs import LOG_NAME, RUN_JSON, RunRecord, new_run_id

    folder = make_tui_folder(tmp)
    # The synthetic log has serving stats but no server behind it: no automatic probe.
    toml = folder.folder / "tiny-cpu-vllm-baseline.toml"
    toml.write_text(toml.read_text().replace("[probe]\n", "[probe]\nauto = false\n"))
    run_id = new_run_id("tiny-cpu-vllm-baseline")
    run_dir = folder.workdir / "runs" / run_id
    run_dir.mkdir(parents=True)
    rec = RunRecord(id=run_id, experiment="tiny-cpu-vllm-baseline", engine="vllm", host="local",
                    argv=[sys.executable, "-c", WRITER, str(lines), str(rate), str(seconds), str(tmp / "go")], env={}, port=18998,
                    model="bench", run_dir=str(run_dir), log_path=str(run_dir / LOG_NAME))
    (run_dir / RUN_JSON).write_text(json.dumps(rec.to_json()))
    done = subprocess.run([sys.executable, str(RUNCTL), "start", str(run_dir)], capture_output=True, timeout=60)
    assert json.loads(done.stdout.decode().strip().splitlines()[-1]).get("ok"), done
    return folder.folder, run_id, tmp / "go"


async def main(args: argparse.Namespace) -> None:
    tmp = Path(tempfile.mkdtemp(prefix="servelab-bench-"))
    os.environ["XDG_CACHE_HOME"] = str(tmp / "cache")
    from tui.app import ServelabApp
    from tui.screens.run import RunScreen
    from tui.widgets.log_view import LogView

    rss_start = rss_mb()
    folder, run_id, go = start_run(tmp, args.lines, args.rate, args.seconds)
    app = ServelabApp(folder)
    app.watch_runs = False
    from tui.app import SWITCH_INTERVAL_S

    sys.setswitchinterval(args.switch_interval if args.switch_interval is not None else SWITCH_INTERVAL_S)  # as run_app does
    print(f"GIL switch interval {sys.getswitchinterval() * 1000:.1f} ms, load average {os.getloadavg()[0]:.1f}")
    frames: list[float] = []
    original_display = app._display

    def display(screen, renderable):  # type: ignore[no-untyped-def]
        frames.append(time.perf_counter())
        original_display(screen, renderable)

    app._display = display  # type: ignore[method-assign]
    acted: list[float] = []
    latencies: list[float] = []
    samples: list[tuple[int, float]] = []
    async with app.run_test(size=(160, 45)) as pilot:
        await app.push_screen(RunScreen(run_id))
        screen = app.screen
        view = screen.query_one(LogView)
        for name in ("action_scroll_up", "action_bottom"):
            original = getattr(view, name)

            def hooked(original=original):  # type: ignore[no-untyped-def]
                original()
                acted.append(time.perf_counter())

            setattr(view, name, hooked)
        t_ingest = time.perf_counter()
        while screen.index.line_count < args.lines:
            await asyncio.sleep(0.2)
        print(f"indexed the first {args.lines:,} lines in {time.perf_counter() - t_ingest:.1f} s "
              f"(spool {screen.index.size / 1e6:.0f} MB, RSS {rss_mb():.0f} MB, started at {rss_start:.0f} MB)")
        go.touch()
        grow_start = time.perf_counter()
        key = "k"
        while time.perf_counter() - grow_start < args.seconds - 1:
            before_frames, before_acted = len(frames), len(acted)
            t0 = time.perf_counter()
            await pilot.press(key)
            while len(acted) == before_acted and time.perf_counter() - t0 < 2:
                await asyncio.sleep(0.001)
            t_act = acted[-1] if len(acted) > before_acted else t0
            while not any(f >= t_act for f in frames[before_frames:]) and time.perf_counter() - t0 < 2:
                await asyncio.sleep(0.001)
            drawn = next((f for f in frames[before_frames:] if f >= t_act), None)
            if drawn is not None:
                latencies.append((drawn - t0) * 1000)
            samples.append((screen.index.line_count, rss_mb()))
            key = "G" if key == "k" else "k"
            await asyncio.sleep(0.2)
        follow_ok = view.follow or key == "G"
    latencies.sort()
    p99 = latencies[min(len(latencies) - 1, int(round(0.99 * (len(latencies) - 1))))] if latencies else float("nan")
    print(f"keys: {len(latencies)}  latency median {statistics.median(latencies):.1f} ms  p99 {p99:.1f} ms  max {latencies[-1]:.1f} ms  (target p99 < 100 ms)")
    (l0, m0), (l1, m1) = samples[0], samples[-1]
    growth = f"while growing {l0:,} -> {l1:,} lines ({(l1 - l0) / args.seconds:,.0f} lines/s): RSS {m0:.0f} -> {m1:.0f} MB"
    if l1 - l0 >= 10_000:
        growth += f" ({(m1 - m0) / ((l1 - l0) / 100_000):+.1f} MB per 100k lines; the index keeps ~13 B/line, texts stay in the spool)"
    print(growth)
    print(f"following at the end: {follow_ok}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lines", type=int, default=1_000_000)
    parser.add_argument("--rate", type=int, default=5000)
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--switch-interval", type=float, default=None, help="override the app's GIL switch interval (s)")
    asyncio.run(main(parser.parse_args()))
