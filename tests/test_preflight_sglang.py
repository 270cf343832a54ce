"""Preflight of SGLang experiments against the real SGLang 0.5.23 (.venv-sglang): SGLang's own checks
(``resolve_once`` + ``check_server_args``) pass the tiny experiment, and a check of servelab's for what
SGLang lets through fails in servelab's words, before any engine starts. SGLang's own words for each
kind of mistake: tests/test_preflight_args.py (one interpreter for all cases)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from servelab.engines.adapters.base import get_adapter
from servelab.engines.catalog.folder import load_catalog
from servelab.engines.preflight.checks import CHECK_NAMES, run_preflight
from tests.conftest import EXPERIMENTS, SGLANG_PYTHON, TINY_MODEL, need_sglang

BROKEN = """\
engine = "sglang"
model = "{model}"
port = 8190

[env]
SGLANG_USE_CPU_ENGINE = "1"

[engine_args]
device = "cpu"
max-total-tokens = 2048
{bad}
"""


@pytest.mark.engine
async def test_sglang_preflight_passes_the_tiny_experiment_and_names_whose_check_failed(tmp_path: Path) -> None:
    need_sglang()
    folder = tmp_path / "experiments"
    folder.mkdir()
    (folder / "hosts.toml").write_text(f'[hosts.local]\npython = "{SGLANG_PYTHON}"\nworkdir = "{tmp_path / "work"}"\n')
    (folder / "fraction.toml").write_text(BROKEN.format(model=TINY_MODEL, bad="mem-fraction-static = 1.5"))
    bundled, broken = load_catalog(EXPERIMENTS), load_catalog(folder)
    good, fraction = await asyncio.gather(run_preflight(bundled, "tiny-cpu-sglang-baseline"), run_preflight(broken, "fraction"))
    assert good.ok, good.summary()
    assert [c.name for c in good] == list(CHECK_NAMES)
    versions, args = good.get("engine versions"), good.get("engine arguments")
    assert versions is not None and versions.detail.startswith("sglang 0.5.23, torch 2.13.0+cpu, CPU build (no CUDA)")
    exp = bundled.get("tiny-cpu-sglang-baseline").experiment
    flags = sum(1 for word in get_adapter("sglang").validation(exp, str(TINY_MODEL), None).flags if word.startswith("--"))
    assert flags >= 9  # the bundled file's keys, each counted once: flags, not words
    assert args is not None and args.detail == f"{flags} flags accepted by SGLang's resolve_once + check_server_args"
    # servelab's words for what SGLang lets through (SGLang's own words: tests/test_preflight_args.py)
    (failed,) = fraction.failed()
    assert failed.name == "engine arguments" and failed.detail == (
        "servelab: --mem-fraction-static 1.5 is outside (0, 1): it is the share of GPU memory for weights and KV cache "
        "(SGLang's resolve_once + check_server_args accept it)"
    )
    print(f"\npreflight of tiny-cpu-sglang-baseline: {good.seconds:.1f} s (" + ", ".join(f"{c.name} {c.seconds:.1f} s" for c in good) + ")")
