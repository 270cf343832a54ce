"""How the run view copes with a huge, fast log: keypress-to-screen latency and the app's memory.

A real run (started by the host helper, like any launch) writes a 1,000,000-line vLLM-style log;
once the dashboard has indexed it, the run keeps growing it at 5,000 lines/s (with tqdm ``\\r`` bars and warnings mixed in). The dashboard
opens its run screen headless, follows the log, and gets a key every 200 ms (alternately ``k``,
which scrolls up and pauses, and ``G``, which resumes following). For each key we time from sending
it to the first frame drawn after its action ran. Memory is the process RSS while the log grows
(and, apart, the RSS of the ingest worker process when the dashboard has one).

Opening: "first screen" is the time from opening the run screen until a frame shows the log's
last line (the dashboard follows the end); "full index" is when every line is indexed and
classified (folding, errors), so any line can be jumped to.

``--burn`` starts a CPU-bound process beside the dashboard for the whole bench (bounded in time,
ended by the bench), as another engineer's job on a 2-core machine would. The bench prints the
machine's load average before and after: timings are only comparable at similar loads.

    .venv/bin/python bench/tui_follow.py [--lines 1000000] [--rate 5000] [--seconds 30] [--burn]

Where memory goes: ``--tracemalloc 4`` prints the Python allocations that grew in the second half
of the growing phase (by allocation site), and the RSS split into heap / files / shared memory.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # imported inside measure() at run time: the RSS before Textual loads is a figure
    from rich.console import RenderableType
    from textual.screen import Screen

    from servelab.tui.screens.run import RunScreen
    from servelab.tui.widgets.log_view import LogView

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
open(go + ".written", "w").close()  # the first `total` lines are in the log
while not os.path.exists(go):  # the bench says when the dashboard has caught up
    time.sleep(0.05)
start = time.monotonic(); batch = max(rate // 20, 1)
while time.monotonic() - start < seconds:
    out.write(b"".join(line(n + k) for k in range(batch))); out.flush(); n += batch
    time.sleep(max(0.0, (n - total) / rate - (time.monotonic() - start)))
"""


BURNER = r"""
import sys, time
end = time.monotonic() + float(sys.argv[1])
while time.monotonic() < end:
    pass
"""


def cpu_s(pid: int | str = "self") -> float:
    """CPU seconds (user + system) a process has used: a figure the machine's load does not inflate."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def rss_mb(pid: int | str = "self") -> float:
    with open(f"/proc/{pid}/status") as f:
        for row in f:
            if row.startswith("VmRSS:"):
                return int(row.split()[1]) / 1024
    return float("nan")


def rss_parts_mb(pid: int | str = "self") -> dict[str, float]:
    """RSS split into anonymous memory (the heap), mapped files and shared memory."""
    parts: dict[str, float] = {}
    with open(f"/proc/{pid}/status") as f:
        for row in f:
            if row.startswith(("RssAnon:", "RssFile:", "RssShmem:")):
                parts[row.split(":")[0][3:].lower()] = int(row.split()[1]) / 1024
    return parts


def start_run(tmp: Path, lines: int, rate: int, seconds: float) -> tuple[Path, str, Path]:
    from tests.fixtures.tui import RUNCTL, make_tui_folder
    from servelab.engines.runs.records import LOG_NAME, RUN_JSON, RunRecord, new_run_id

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

    rss_start = rss_mb()
    burner = None
    if args.burn:
        # Bounded even if the bench dies: it stops by itself after the longest the bench can take.
        burner = subprocess.Popen([sys.executable, "-c", BURNER, str(args.seconds + 300)])
    print(f"machine: {os.cpu_count()} CPUs, load average {load()} (1/5/15 min){', with a CPU burner beside' if burner else ''}")
    try:
        await measure(args, tmp, rss_start)
    finally:
        if burner is not None:
            burner.terminate()
            burner.wait()
    print(f"load average at the end {load()}")


def load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def last_marker(lines: int) -> str:
    """Text of the last ordinary stats line the writer puts in the first ``lines`` lines."""
    i = lines - 1
    while i % 997 == 0 or i % 1499 == 0:
        i -= 1
    return f"step {i}"


def shows(view: LogView, marker: str) -> bool:
    """The view draws a line ending with ``marker`` (from whichever index it shows: the log's end first)."""
    index = view.index
    top = int(view.scroll_offset.y)
    for row in range(top, min(top + view.size.height, index.row_count)):
        if index.text(index.line_at_row(row)).endswith(marker):
            return True
    return False


def fully_indexed(screen: RunScreen, lines: int) -> bool:
    return screen.index.line_count >= lines and screen.index.unclassified == 0


async def measure(args: argparse.Namespace, tmp: Path, rss_start: float) -> None:
    from servelab.tui.app import ServelabApp
    from servelab.tui.screens.run import RunScreen
    from servelab.tui.widgets.log_view import LogView

    folder, run_id, go = start_run(tmp, args.lines, args.rate, args.seconds)
    written = go.with_name(go.name + ".written")
    while not written.exists():  # open the run screen on the whole log, as a user opening a long run
        await asyncio.sleep(0.05)
    app = ServelabApp(folder)
    app.watch_runs = False
    from servelab.tui.app import tune_process

    if not args.no_tune:
        tune_process()  # as run_app does
    if args.switch_interval is not None:
        sys.setswitchinterval(args.switch_interval)
    print(f"GIL switch interval {sys.getswitchinterval() * 1000:.1f} ms")
    frames: list[float] = []
    original_display = app._display

    def display(screen: Screen[Any], renderable: RenderableType | None) -> None:
        frames.append(time.perf_counter())
        original_display(screen, renderable)

    app._display = display  # type: ignore[method-assign]
    acted: list[float] = []
    latencies: list[float] = []
    waits: list[float] = []  # key sent -> its action ran (the rest is layout + paint)
    samples: list[tuple[int, float, float]] = []
    marker = last_marker(args.lines)
    async with app.run_test(size=(160, 45)) as pilot:
        t_open, cpu_open = time.perf_counter(), cpu_s()
        await app.push_screen(RunScreen(run_id))
        screen = app.screen
        assert isinstance(screen, RunScreen)
        view = screen.query_one(LogView)
        t_first = None
        while time.perf_counter() - t_open < 120:
            if t_first is None and shows(screen.query_one(LogView), marker):
                seen = time.perf_counter()
                while not any(f >= seen for f in frames) and time.perf_counter() - seen < 5:
                    await asyncio.sleep(0.002)
                t_first = next((f for f in frames if f >= seen), seen) - t_open
            if t_first is not None:
                break
            await asyncio.sleep(0.005)
        while not fully_indexed(screen, args.lines) and time.perf_counter() - t_open < 300:
            await asyncio.sleep(0.02)
        t_full, cpu_opening = time.perf_counter() - t_open, cpu_s() - cpu_open
        view = screen.query_one(LogView)
        for name in ("action_scroll_up", "action_bottom"):
            original = getattr(view, name)

            def hooked(original: Callable[[], None] = original) -> None:
                original()
                acted.append(time.perf_counter())

            setattr(view, name, hooked)
        first = f"{t_first:.2f} s" if t_first is not None else "not within 120 s"
        print(f"first screen (the log's last line drawn) after {first} (target < 1 s); "
              f"all {args.lines:,} lines indexed after {t_full:.2f} s (target < 5 s); load average {load()}")
        worker = screen.ingest.worker_pid
        while screen.ingest.analysed_bytes < screen.index.size and time.perf_counter() - t_open < 300:
            await asyncio.sleep(0.05)
        print(f"analysis caught up after {time.perf_counter() - t_open:.2f} s (in the ingest worker)")
        print(f"CPU to open and index: dashboard process {cpu_opening:.2f} s")
        print(f"spool {screen.index.size / 1e6:.0f} MB, RSS {rss_mb():.0f} MB (started at {rss_start:.0f} MB)"
              + (f", ingest worker RSS {rss_mb(worker):.0f} MB" if worker else ""))
        go.touch()
        traced = None
        traced_at = (0, 0.0)
        if args.tracemalloc:
            import tracemalloc

            tracemalloc.start(args.tracemalloc)
        profiler = None
        if args.profile:
            import cProfile

            profiler = cProfile.Profile()
            profiler.enable()
        grow_start = time.perf_counter()
        gc_pauses: list[tuple[int, float]] = []  # (generation, ms) of each collection while growing
        gc_full: list[tuple[float, int, int]] = []  # each full collection: (ms, objects it walked, garbage it freed)
        gc_began = [0.0]
        gc_walked = [0]

        def on_gc(phase: str, info: dict[str, int]) -> None:
            if phase == "start":
                if info["generation"] == 2 and args.gc_types:  # costs a walk itself: only when asked
                    gc_walked[0] = len(gc.get_objects())
                gc_began[0] = time.perf_counter()
            else:
                ms = (time.perf_counter() - gc_began[0]) * 1000
                gc_pauses.append((info["generation"], ms))
                if info["generation"] == 2:
                    gc_full.append((ms, gc_walked[0], info["collected"]))

        gc.callbacks.append(on_gc)
        cpu_start = (cpu_s(), cpu_s(worker) if worker else 0.0)
        key = "k"
        parts_start = rss_parts_mb()
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
                waits.append((t_act - t0) * 1000)
            samples.append((screen.index.line_count, rss_mb(), rss_mb(worker) if worker else 0.0))
            if args.tracemalloc and traced is None and time.perf_counter() - grow_start > args.seconds / 2:
                # at half time, once caches and the latest analysis have been replaced by traced copies
                traced = tracemalloc.take_snapshot()
                traced_at = (screen.index.line_count, rss_mb())
            key = "G" if key == "k" else "k"
            await asyncio.sleep(0.2)
        follow_ok = view.follow or key == "G"
        gc.callbacks.remove(on_gc)
        if args.gc_types:
            from collections import Counter

            kinds = Counter(f"{type(o).__module__}.{type(o).__qualname__}" for o in gc.get_objects())
            print("objects the collector walks, by type: " + ", ".join(f"{name} {n:,}" for name, n in kinds.most_common(args.gc_types)))
            # A full pass visits every reference of every tracked object: a few big containers cost more than many small ones.
            sizes = sorted(((len(gc.get_referents(o)), f"{type(o).__module__}.{type(o).__qualname__}") for o in gc.get_objects()), reverse=True)
            print(f"references the collector follows: {sum(n for n, _ in sizes):,}; biggest containers: "
                  + ", ".join(f"{name} {n:,}" for n, name in sizes[:args.gc_types]))
            # What the cyclic garbage is (the collector frees it; refcounting could not): 3 s more of following.
            gc.set_debug(gc.DEBUG_SAVEALL)
            gc.collect()
            gc.garbage.clear()
            await asyncio.sleep(3.0)
            gc.collect()
            cyclic = Counter(f"{type(o).__module__}.{type(o).__qualname__}" for o in gc.garbage)
            gc.garbage.clear()
            gc.set_debug(0)
            print(f"cyclic garbage in 3 s: {sum(cyclic.values()):,} objects; "
                  + ", ".join(f"{name} {n:,}" for name, n in cyclic.most_common(args.gc_types)))
            took = []
            for _ in range(3):
                t_gc = time.perf_counter()
                gc.collect()
                took.append((time.perf_counter() - t_gc) * 1000)
            print("gc.collect() now, 3 in a row: " + ", ".join(f"{ms:.1f} ms" for ms in took))
            print("full collections (ms, objects walked, garbage freed): "
                  + ", ".join(f"{ms:.1f}/{walked:,}/{freed:,}" for ms, walked, freed in gc_full))
        grown_s = time.perf_counter() - grow_start
        parts_end = rss_parts_mb()
        if args.trim:  # how much of the RSS is heap the process freed but glibc kept
            import ctypes

            before_trim = rss_mb()
            ctypes.CDLL("libc.so.6").malloc_trim(0)
            print(f"malloc_trim(0) after growing: RSS {before_trim:.1f} -> {rss_mb():.1f} MB")
        cpu_ui, cpu_worker = cpu_s() - cpu_start[0], (cpu_s(worker) - cpu_start[1]) if worker else 0.0
        if profiler is not None:
            profiler.disable()
            profiler.dump_stats(args.profile)
        if traced is not None:
            import tracemalloc

            grown = tracemalloc.take_snapshot().compare_to(traced, "traceback")
            tracemalloc.stop()
            lines_then, rss_then = traced_at
            print(f"tracemalloc, second half ({screen.index.line_count - lines_then:,} lines): Python allocations "
                  f"{sum(d.size_diff for d in grown) / 1e6:+.2f} MB, RSS {rss_mb() - rss_then:+.1f} MB; largest growers "
                  "(allocation site first):")
            for diff in grown[:args.tracemalloc_top]:
                print(f"  {diff.size_diff / 1e3:+9.1f} kB {diff.count_diff:+7d} blocks  "
                      + " <- ".join(f"{Path(f.filename).name}:{f.lineno}" for f in reversed(diff.traceback)))
    latencies.sort()
    p99 = latencies[min(len(latencies) - 1, int(round(0.99 * (len(latencies) - 1))))] if latencies else float("nan")
    target = "100 ms with a CPU burner" if args.burn else "50 ms on a quiet machine"
    print(f"keys: {len(latencies)}  latency median {statistics.median(latencies):.1f} ms  p99 {p99:.1f} ms  "
          f"max {latencies[-1]:.1f} ms  (target p99 < {target}); load average {load()}")
    waits.sort()
    print(f"  of which key -> action: median {statistics.median(waits):.1f} ms, p99 {waits[int(round(0.99 * (len(waits) - 1)))]:.1f} ms")
    (l0, m0, w0), (l1, m1, w1) = samples[0], samples[-1]
    growth = f"while growing {l0:,} -> {l1:,} lines ({(l1 - l0) / args.seconds:,.0f} lines/s): RSS {m0:.0f} -> {m1:.0f} MB"
    if l1 - l0 >= 10_000:
        per = (l1 - l0) / 100_000
        growth += f" ({(m1 - m0) / per:+.2f} MB per 100k lines, target < 2 MB; texts stay in the spool)"
        if worker:
            growth += f"; ingest worker {w0:.0f} -> {w1:.0f} MB ({(w1 - w0) / per:+.2f} MB per 100k lines)"
        half_lines, half_mb, _ = samples[len(samples) // 2]
        if l1 - half_lines >= 10_000:  # caches (strips, texts) fill early on and then stay bounded
            growth += f"; second half {(m1 - half_mb) / ((l1 - half_lines) / 100_000):+.2f} MB per 100k lines"
    print(growth)
    print("  RSS change by kind: " + ", ".join(f"{k} {parts_end[k] - parts_start.get(k, 0.0):+.1f} MB" for k in parts_end))
    print(f"CPU while growing: dashboard process {cpu_ui / grown_s * 100:.0f}% of a core (incl. this bench's key loop)"
          + (f", ingest worker {cpu_worker / grown_s * 100:.0f}%" if worker else ""))
    full = [ms for gen, ms in gc_pauses if gen == 2]
    print(f"GC while growing: {len(gc_pauses)} collections, longest {max((ms for _, ms in gc_pauses), default=0.0):.1f} ms; "
          f"{len(full)} full (gen 2), longest {max(full, default=0.0):.1f} ms; objects tracked {len(gc.get_objects()):,}, "
          f"frozen {gc.get_freeze_count():,}")
    print(f"following at the end: {follow_ok}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lines", type=int, default=1_000_000)
    parser.add_argument("--rate", type=int, default=5000)
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--burn", action="store_true", help="run a CPU-bound process beside the dashboard")
    parser.add_argument("--profile", metavar="FILE", help="cProfile the UI thread while the log grows, into FILE")
    parser.add_argument("--tracemalloc", type=int, default=0, metavar="FRAMES",
                        help="trace Python allocations while the log grows (FRAMES deep) and print the largest growers")
    parser.add_argument("--trim", action="store_true", help="glibc only: after growing, print how much RSS malloc_trim returns")
    parser.add_argument("--tracemalloc-top", type=int, default=12, help="how many growers --tracemalloc prints")
    parser.add_argument("--switch-interval", type=float, default=None, help="override the app's GIL switch interval (s)")
    parser.add_argument("--gc-types", type=int, default=0, metavar="N", help="print the N commonest types the collector walks")
    parser.add_argument("--no-tune", action="store_true", help="skip run_app's process settings (switch interval, gc.freeze)")
    asyncio.run(main(parser.parse_args()))
