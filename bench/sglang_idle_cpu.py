"""CPU an idle SGLang server burns, with and without ``sleep-on-idle`` (the bundled tiny-cpu-sglang-baseline).

SGLang's scheduler polls its sockets in a loop; without ``--sleep-on-idle`` an idle server keeps one
core busy, which on a 2-core box slows everything beside it (the test suite shares servers for
minutes). Launches the bundled experiment through servelab twice (as bundled, then with the key
removed), waits for ready, then sums the CPU seconds of the run's process group over a window.

    .venv/bin/python bench/sglang_idle_cpu.py [--window 20]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

import httpx

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from servelab.engines.catalog.folder import load_catalog  # noqa: E402
from servelab.engines.hosts.registry import close_all  # noqa: E402
from servelab.engines.runs.manager import Runs  # noqa: E402

NAME = "tiny-cpu-sglang-baseline"
TICK = os.sysconf("SC_CLK_TCK")


def group_cpu_s(pgid: int) -> float:
    """utime + stime of every live process in the group."""
    total = 0
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[2]) == pgid:  # field 5 (pgrp), counted after the ")"
            total += int(fields[11]) + int(fields[12])
    return total / TICK


async def measure(folder: Path, window: float) -> tuple[float, float]:
    runs = Runs(load_catalog(folder))
    rec = await runs.launch(NAME, skip_preflight=True)
    t0 = time.monotonic()
    try:
        while True:
            try:
                if httpx.get(f"http://127.0.0.1:{rec.port}/health", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            st = await runs.status(rec.id, analyze=False)
            if not st.alive or time.monotonic() - t0 > 600:
                raise SystemExit(f"{NAME} did not get ready (alive={st.alive})")
            await asyncio.sleep(1)
        await asyncio.sleep(3)  # let the warm-up request settle
        assert rec.pgid is not None
        before, w0 = group_cpu_s(rec.pgid), time.monotonic()
        await asyncio.sleep(window)
        used = group_cpu_s(rec.pgid) - before
        return time.monotonic() - t0, used / (time.monotonic() - w0)
    finally:
        await runs.stop(rec.id, grace=10)
        await close_all()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--window", type=float, default=20.0)
    args = ap.parse_args()
    root = Path(tempfile.mkdtemp(prefix="servelab-idle-"))
    for label, keep in (("sleep-on-idle", True), ("busy polling", False)):
        folder = root / label.replace(" ", "-")
        shutil.copytree(REPO / "experiments", folder)
        (folder.parent / ".models").mkdir(exist_ok=True)
        link = folder.parent / ".models" / "tiny-llama"
        if not link.exists():
            link.symlink_to(REPO / ".models" / "tiny-llama")
        for venv in (".venv-engine", ".venv-sglang"):
            if not (folder.parent / venv).exists():
                (folder.parent / venv).symlink_to(REPO / venv)
        if not keep:
            toml = folder / f"{NAME}.toml"
            toml.write_text("".join(ln for ln in toml.read_text().splitlines(keepends=True) if not ln.startswith("sleep-on-idle")))
        ready_s, cores = asyncio.run(measure(folder, args.window))
        print(f"{label:>14}: ready in {ready_s:.0f} s, idle server uses {cores * 100:.0f}% of a core over {args.window:.0f} s")
    shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
