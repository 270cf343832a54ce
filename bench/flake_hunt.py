"""Flake hunt (issue #32): the tests that wait on a screen, a server, a process or a file, run again
and again while CPU burners keep every core busy, with each test's pass count printed.

    .venv/bin/python bench/flake_hunt.py                  # 20 rounds of the waiting tests, 2 burners
    .venv/bin/python bench/flake_hunt.py --rounds 5 tests/test_tui_nodes.py
    .venv/bin/python bench/flake_hunt.py -m "not slurm and not ray" --rounds 20

Which tests wait: every test module whose source waits on a state (``wait_for``, a Pilot's
``pause``/``wait_for_*``, tmux ``wait``/``until``, ``asyncio.wait_for``, polling an exit code);
named files override it. Each round is one pytest run over all of them (their own fixtures, as the
suite has them), with a JUnit report read back per test; a burner is a process spinning in
Python at normal priority, one per core unless ``--burn`` says otherwise. Exit status 1 when
any test failed in any round. A failing round's failure text (the JUnit ``failure``/``error``
element, with the captured output) is kept under ``--keep`` (default ``.flake-hunt/``), one file
per failing test and round, and its path printed.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
WAITS = re.compile(r"wait_for\(|\.pause\(|wait_for_|\.wait\(|until\(|wait_until|exit_code")


def waiting_modules() -> list[str]:
    return sorted(str(p.relative_to(REPO)) for p in (REPO / "tests").glob("test_*.py") if WAITS.search(p.read_text()))


def burners(n: int) -> list[subprocess.Popen[bytes]]:
    return [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(n)]


def keep_failure(case: ET.Element, name: str, keep: Path, round_no: int) -> Path:
    """The failure's message and text, and the test's captured output, in one file."""
    keep.mkdir(parents=True, exist_ok=True)
    out = keep / f"round-{round_no:02d}-{re.sub(r'[^A-Za-z0-9_.-]+', '_', name)[-120:]}.txt"
    parts = []
    for tag in ("failure", "error", "system-out", "system-err"):
        for el in case.iter(tag):
            parts.append(f"--- {tag}: {el.get('message', '')}\n{el.text or ''}")
    out.write_text("\n".join(parts))
    return out


def one_round(paths: list[str], marks: str, report: Path, keep: Path, round_no: int) -> tuple[Counter[str], Counter[str]]:
    subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-m", marks, "-o", "junit_logging=all", f"--junitxml={report}", *paths],
        cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    passed: Counter[str] = Counter()
    failed: Counter[str] = Counter()
    if not report.exists():
        return passed, failed
    for case in ET.parse(report).getroot().iter("testcase"):
        name = f"{case.get('classname')}::{case.get('name')}"
        if case.find("skipped") is not None:
            continue
        if case.find("failure") is not None or case.find("error") is not None:
            failed[name] += 1
            print(f"  failed: {name} -> {keep_failure(case, name, keep, round_no)}", flush=True)
        else:
            passed[name] += 1
    return passed, failed


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("paths", nargs="*", help="test files or node ids (default: every module that waits)")
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--burn", type=int, default=os.cpu_count() or 2, help="CPU burners (default: one per core)")
    ap.add_argument("--keep", type=Path, default=REPO / ".flake-hunt", help="folder for failing rounds' text")
    ap.add_argument("-m", dest="marks", default="not slurm and not ray", help="pytest marker expression")
    args = ap.parse_args()
    paths = args.paths or waiting_modules()
    passed: Counter[str] = Counter()
    failed: Counter[str] = Counter()
    hot = burners(args.burn)
    t0 = time.monotonic()
    try:
        with tempfile.TemporaryDirectory(prefix="flake-hunt-") as tmp:
            for i in range(args.rounds):
                p, f = one_round(paths, args.marks, Path(tmp) / f"round-{i}.xml", args.keep, i + 1)
                passed.update(p)
                failed.update(f)
                print(f"round {i + 1}/{args.rounds}: {sum(p.values())} passed, {sum(f.values())} failed ({time.monotonic() - t0:.0f} s)", flush=True)
    finally:
        for b in hot:
            b.kill()
    print(f"\n{len(paths)} modules, {args.rounds} rounds, {args.burn} burners, {time.monotonic() - t0:.0f} s")
    for name in sorted(passed.keys() | failed.keys(), key=lambda n: (-failed[n], n)):
        print(f"{passed[name]:>3}/{passed[name] + failed[name]:<3} {name}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
