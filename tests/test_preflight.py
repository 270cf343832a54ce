"""Preflight against the real engine: the checks pass for a good tiny experiment and each kind of
mistake fails on its own line with the engine's own words, before any engine starts."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from servelab.engines.catalog.folder import load_catalog
from servelab.engines.preflight.checks import CHECK_NAMES, Check, run_preflight
from tests.conftest import ENGINE_PYTHON, EXPERIMENTS, TINY_MODEL, need_engine
from tests.fixtures.patching import DEEPSEEK, IMPORT_BLOCK, ONE_LINE, diff_of, engine_site_packages, installed_hashes, make_overlay
from tests.fixtures.ports import free_port

TINY = """\
engine = "vllm"
model = "{model}"
served_model_name = "tiny-llama"
port = {port}

[speculative]
method = "ngram"
num_tokens = 4
prompt_lookup_max = 4
prompt_lookup_min = 2
{spec_extra}
[engine_args]
dtype = "float32"
gpu-memory-utilization = 0.2
{engine_args}
{patches}
"""


def folder_with(tmp_path: Path, python: str, **experiments: dict[str, str]) -> Path:
    """An experiments folder: hosts.toml (local = the engine's python) and one TOML per experiment."""
    folder = tmp_path / "experiments"
    folder.mkdir()
    (folder / "hosts.toml").write_text(f'[hosts.local]\npython = "{python}"\nworkdir = "{tmp_path / "work"}"\n')
    for name, parts in experiments.items():
        values = {"model": str(TINY_MODEL), "port": free_port(), "spec_extra": "", "engine_args": "max-model-len = 1024", "patches": ""}
        values.update(parts)
        (folder / f"{name}.toml").write_text(TINY.format(**values))
    return folder


@pytest.mark.engine
async def test_the_bundled_tiny_experiment_passes_every_check() -> None:
    need_engine()
    catalog = load_catalog(EXPERIMENTS)
    seen: list[Check] = []
    report = await run_preflight(catalog, "tiny-cpu-vllm-ngram", host="local", progress=seen.append)
    assert report.ok, report.summary()
    assert [c.name for c in report] == list(CHECK_NAMES)
    assert sorted(c.name for c in seen) == sorted(CHECK_NAMES)  # each one reported as it ended
    versions = report.get("engine versions")
    assert versions is not None and versions.detail.startswith("vllm 0.32.0, torch 2.") and "CPU build (no CUDA)" in versions.detail
    assert report.hostinfo is not None and report.hostinfo.root and Path(report.hostinfo.root, "vllm").is_dir()
    assert report.get("drafter path").detail == "ngram needs no drafter"  # type: ignore[union-attr]
    assert report.get("model path").detail == str(TINY_MODEL.resolve())  # type: ignore[union-attr]
    args = report.get("engine arguments")
    assert args is not None
    flags = [w for w in catalog.launch_spec(catalog.get("tiny-cpu-vllm-ngram")).argv if w.startswith("--")]
    assert args.detail == f"{len(flags)} flags accepted by vllm's parser"  # flags, not words; no timing of its own
    assert args.line().count(" s)") == 1
    print(f"\npreflight of tiny-cpu-vllm-ngram: {report.seconds:.1f} s " + ", ".join(f"{c.name} {c.seconds:.1f} s" for c in report))


@pytest.mark.engine
async def test_a_typo_flag_and_a_bad_speculative_key_fail_with_the_engines_words(tmp_path: Path) -> None:
    need_engine()
    folder = folder_with(
        tmp_path,
        str(ENGINE_PYTHON),
        typo={"engine_args": "max-modle-len = 1024"},
        badkey={"spec_extra": "[speculative.extra]\nprompt_lookup_maxx = 3\n"},
    )
    catalog = load_catalog(folder)
    typo = await run_preflight(catalog, "typo")
    args = typo.get("engine arguments")
    assert args is not None and not args.ok
    assert args.detail == "vllm serve: error: unrecognized arguments: --max-modle-len"
    assert [c.name for c in typo.failed()] == ["engine arguments"]

    badkey = await run_preflight(catalog, "badkey")
    args = badkey.get("engine arguments")
    assert args is not None and not args.ok
    assert "prompt_lookup_maxx" in args.detail and args.detail.startswith("SpeculativeConfig")
    assert [c.name for c in badkey.failed()] == ["engine arguments"]


@pytest.mark.engine
async def test_a_trailing_comma_patch_fails_preflight_with_file_line_and_text(tmp_path: Path) -> None:
    need_engine()
    site = engine_site_packages()
    overlay = make_overlay(tmp_path)
    ds = (site / DEEPSEEK).read_text()
    line = ds[: ds.index(IMPORT_BLOCK)].count("\n") + 1
    port = free_port()
    folder = folder_with(
        tmp_path,
        str(ENGINE_PYTHON),
        patched={"port": port, "patches": '[[patches]]\nfile = "patches/deepseek-import.diff"\n'},
    )
    (folder / "patches").mkdir()
    (folder / "patches" / "deepseek-import.diff").write_bytes(diff_of(site, DEEPSEEK, ds.replace(IMPORT_BLOCK, ONE_LINE + ",\n")))
    before = installed_hashes(overlay, [DEEPSEEK])

    report = await run_preflight(load_catalog(folder), "patched", package_root=str(overlay))
    patch = report.get("patch set")
    assert patch is not None and not patch.ok
    assert patch.detail == f"{overlay}/{DEEPSEEK}:{line}: SyntaxError: trailing comma not allowed without surrounding parentheses: {ONE_LINE},"
    assert [c.name for c in report.failed()] == ["patch set"]
    assert installed_hashes(overlay, [DEEPSEEK]) == before and (overlay / DEEPSEEK).is_symlink()
    # No engine was started: nothing listens on the experiment's port and no run was created.
    with socket.socket() as s:
        assert s.connect_ex(("127.0.0.1", port)) != 0
    assert not (tmp_path / "work" / "runs").exists()
    print(f"\ntrailing comma caught in {patch.seconds:.1f} s (whole preflight {report.seconds:.1f} s)")


@pytest.mark.engine
async def test_a_missing_model_folder_fails_and_skips_the_parser(tmp_path: Path) -> None:
    need_engine()
    folder = folder_with(tmp_path, str(ENGINE_PYTHON), nomodel={"model": str(tmp_path / "no-such-model")})
    report = await run_preflight(load_catalog(folder), "nomodel")
    failed = {c.name: c.detail for c in report.failed()}
    assert failed == {
        "model path": f"{tmp_path / 'no-such-model'} does not exist on local",
        "engine arguments": "skipped: the model folder is missing (the parser reads its config.json)",
    }


async def test_an_engine_python_that_does_not_run_stops_the_preflight_early(tmp_path: Path) -> None:
    folder = folder_with(tmp_path, str(tmp_path / "bin" / "python3"), nopython={})
    report = await run_preflight(load_catalog(folder), "nopython")
    lines = {c.name: c for c in report}
    assert lines["host reachable"].ok
    assert not lines["engine python"].ok and lines["engine python"].detail.startswith(f"cannot run {tmp_path / 'bin' / 'python3'}: ")
    assert all(c.skipped and c.detail == "skipped: the engine's python does not run" for c in report.checks[2:])
    assert len(report) == len(CHECK_NAMES) and not report.ok


async def test_an_unreachable_host_fails_the_first_check_in_one_line(tmp_path: Path) -> None:
    folder = tmp_path / "experiments"
    folder.mkdir()
    port = free_port()  # nothing listens there
    (folder / "hosts.toml").write_text(f'[hosts.gone]\nssh = "nobody@127.0.0.1:{port}"\nconnect_timeout = 5\n')
    (folder / "far.toml").write_text(f'engine = "vllm"\nhost = "gone"\nmodel = "/models/x"\nport = {free_port()}\n')
    report = await run_preflight(load_catalog(folder), "far")
    first = report.checks[0]
    assert first.name == "host reachable" and not first.ok and "\n" not in first.detail and str(port) in first.detail
    assert all(c.skipped for c in report.checks[1:])
