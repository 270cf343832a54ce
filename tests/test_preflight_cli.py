"""``servelab patches check|apply|revert`` and ``servelab preflight`` from the command line.

The host is this machine and the package is a small real one in a temporary folder (run with this
interpreter), so these tests are fast; the same commands against vLLM are in the engine tests.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from tests.fixtures.patching import udiff
from servelab.tui.cli import main

CONFIG = b"SUPPORTED = [\n    'llama',\n    'qwen',\n]\n"


@pytest.fixture
def setup(tmp_path: Path) -> tuple[Path, Path]:
    """(experiments folder, package root): one experiment with one patch against ``pkgx/config.py``."""
    root = tmp_path / "site"
    (root / "pkgx").mkdir(parents=True)
    (root / "pkgx" / "__init__.py").write_bytes(b"")
    (root / "pkgx" / "config.py").write_bytes(CONFIG)
    folder = tmp_path / "experiments"
    (folder / "patches").mkdir(parents=True)
    (folder / "hosts.toml").write_text(f'[hosts.local]\npython = "{sys.executable}"\nworkdir = "{tmp_path / "work"}"\n')
    (folder / "patches" / "kimi.diff").write_bytes(udiff("pkgx/config.py", CONFIG, CONFIG.replace(b"    'qwen',\n", b"    'qwen',\n    'kimi_k2',\n")))
    (folder / "exp.toml").write_text(
        'engine = "vllm"\nmodel = "/nonexistent/model"\nport = 8999\n\n[[patches]]\nfile = "patches/kimi.diff"\ndescription = "whitelist"\n'
    )
    return folder, root


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_patches_check_apply_twice_revert(setup: tuple[Path, Path], capsys: pytest.CaptureFixture[str]) -> None:
    folder, root = setup
    common = ("--root", str(root))
    code, out, _ = run(capsys, "--dir", str(folder), "patches", "check", "exp", *common)
    assert code == 0 and out.splitlines()[0].startswith("applies     kimi.diff  sha256 ")
    assert "patches check exp: check passed" in out

    code, out, _ = run(capsys, "--dir", str(folder), "patches", "apply", "exp", *common)
    assert code == 0 and "patches apply exp: applied" in out
    assert f"changed     {root}/pkgx/config.py" in out
    assert b"'kimi_k2'" in (root / "pkgx/config.py").read_bytes()

    code, out, _ = run(capsys, "--dir", str(folder), "patches", "apply", "exp", *common, "--json")
    data = json.loads(out)
    assert code == 0 and data["ok"] and not data["changed"] and data["patches"][0]["status"] == "applied"
    assert data["record"]["files"]["pkgx/config.py"]["after"] == data["files"][0]["sha256_after"]

    code, out, _ = run(capsys, "--dir", str(folder), "patches", "revert", "exp", *common)
    assert code == 0 and "patches revert exp: reverted" in out
    assert (root / "pkgx/config.py").read_bytes() == CONFIG


def test_a_conflict_is_one_line_and_exit_1(setup: tuple[Path, Path], capsys: pytest.CaptureFixture[str]) -> None:
    folder, root = setup
    (root / "pkgx" / "config.py").write_bytes(b"SUPPORTED = []\n")
    code, _, err = run(capsys, "--dir", str(folder), "patches", "apply", "exp", "--root", str(root))
    assert code == 1
    assert err == "servelab: patches apply exp: kimi.diff: pkgx/config.py: hunk 1 (line 1) does not match near 'SUPPORTED = ['\n"


def test_patches_find_the_package_root_with_the_hosts_python(setup: tuple[Path, Path], capsys: pytest.CaptureFixture[str]) -> None:
    """Without --root the host's python locates the engine package: here vllm is not installed."""
    folder, _ = setup
    code, _, err = run(capsys, "--dir", str(folder), "patches", "check", "exp")
    assert code == 1 and err.startswith("servelab: no module named 'vllm' in ") and err.count("\n") == 1


def test_preflight_json_lists_every_check(setup: tuple[Path, Path], capsys: pytest.CaptureFixture[str]) -> None:
    folder, root = setup
    code, out, _ = run(capsys, "--dir", str(folder), "preflight", "exp", "--root", str(root), "--json")
    data = json.loads(out)
    assert code == 1 and data["ok"] is False
    by_name = {c["name"]: c for c in data["checks"]}
    assert by_name["host reachable"]["ok"] and by_name["engine python"]["ok"]
    assert by_name["model path"]["detail"] == "/nonexistent/model does not exist on local"
    assert by_name["patch set"]["ok"], by_name["patch set"]["detail"]  # checked under --root, not written
    assert (root / "pkgx/config.py").read_bytes() == CONFIG


def test_preflight_prints_one_line_per_check(setup: tuple[Path, Path], capsys: pytest.CaptureFixture[str]) -> None:
    folder, root = setup
    code, out, err = run(capsys, "--dir", str(folder), "preflight", "exp", "--root", str(root))
    lines = out.splitlines()
    assert code == 1 and len(lines) == 7
    assert all(line[:4] in ("PASS", "FAIL", "SKIP") for line in lines)
    assert err.startswith("preflight of exp on local: ")


def test_unknown_experiment_is_one_line(setup: tuple[Path, Path], capsys: pytest.CaptureFixture[str]) -> None:
    folder, _ = setup
    code, _, err = run(capsys, "--dir", str(folder), "preflight", "nope")
    assert code == 1 and err.startswith("servelab: no experiment named 'nope'") and err.count("\n") == 1


async def test_preflight_with_apply_patches_for_a_launch_once(setup: tuple[Path, Path]) -> None:
    """What launch uses: the checked set is then applied, and the report carries the record to store."""
    from servelab.engines.catalog.folder import load_catalog
    from servelab.engines.preflight.checks import run_preflight

    folder, root = setup
    catalog = load_catalog(folder)
    report = await run_preflight(catalog, "exp", package_root=str(root), apply=True)
    check = report.get("patch set")
    assert check is not None and check.ok and check.detail.endswith("(applied now)")
    assert b"'kimi_k2'" in (root / "pkgx/config.py").read_bytes()
    assert report.patches is not None and report.patches.action == "apply"
    record = report.patches.record()
    assert list(record["patches"]) == ["kimi.diff"] and list(record["files"]) == ["pkgx/config.py"]
    again = await run_preflight(catalog, "exp", package_root=str(root), apply=True)
    check = again.get("patch set")
    assert check is not None and check.ok and not check.detail.endswith("(applied now)")
    assert again.patches is not None and again.patches.record() == record


@pytest.mark.ssh
async def test_preflight_and_patches_over_real_ssh(setup: tuple[Path, Path], ssh_config: object, tmp_path: Path) -> None:
    """The same checks through the SSH host (a real sshd on 127.0.0.1): paths, python, patch set, apply, revert."""
    from servelab.engines.catalog.folder import load_catalog
    from servelab.engines.hosts.registry import close_all
    from servelab.engines.catalog.patches import apply_patches, load_patch_set, revert_patches
    from servelab.engines.preflight.checks import run_preflight

    folder, root = setup
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text("{}")
    (folder / "hosts.toml").write_text(f'[hosts.box]\nssh = "servelab-test"\npython = "{sys.executable}"\nworkdir = "{tmp_path / "remote-work"}"\n')
    (folder / "exp.toml").write_text((folder / "exp.toml").read_text().replace('model = "/nonexistent/model"', f'host = "box"\nmodel = "{model}"'))
    catalog = load_catalog(folder)
    try:
        report = await run_preflight(catalog, "exp", package_root=str(root))
        by_name = {c.name: c for c in report}
        assert by_name["host reachable"].ok and by_name["engine python"].ok
        assert by_name["model path"].ok and by_name["model path"].detail == str(model)
        assert by_name["patch set"].ok and "1 applies" in by_name["patch set"].detail
        assert not by_name["engine versions"].ok and "no module named 'vllm'" in by_name["engine versions"].detail
        assert by_name["engine arguments"].detail.startswith("cannot import vLLM's argument parser")

        exp = catalog.get("exp")
        from servelab.engines.hosts.registry import open_host

        host = open_host(catalog.host("box"))
        applied = await apply_patches(host, load_patch_set(exp), str(root))
        assert applied.ok and applied.changed, applied.error
        assert b"'kimi_k2'" in (root / "pkgx/config.py").read_bytes()
        assert (tmp_path / "remote-work" / "patches").is_dir()  # backups live in the host's workdir
        reverted = await revert_patches(host, load_patch_set(exp), str(root))
        assert reverted.ok and (root / "pkgx/config.py").read_bytes() == CONFIG
    finally:
        await close_all()


@pytest.mark.ssh
async def test_a_relative_model_path_over_ssh_says_what_it_is_relative_to(setup: tuple[Path, Path], ssh_config: object, tmp_path: Path) -> None:
    from servelab.engines.catalog.folder import load_catalog
    from servelab.engines.hosts.registry import close_all
    from servelab.engines.preflight.checks import run_preflight

    folder, root = setup
    (folder / "hosts.toml").write_text(f'[hosts.box]\nssh = "servelab-test"\npython = "{sys.executable}"\nworkdir = "{tmp_path / "remote-work"}"\n')
    (folder / "exp.toml").write_text((folder / "exp.toml").read_text().replace('model = "/nonexistent/model"', 'host = "box"\nmodel = "../.models/tiny-llama"'))
    catalog = load_catalog(folder)
    assert [w.path for w in catalog.warnings()] == ["model"]  # `check` said so before any preflight
    try:
        report = await run_preflight(catalog, "exp", package_root=str(root))
    finally:
        await close_all()
    detail = report.get("model path").detail  # type: ignore[union-attr]
    assert detail == "../.models/tiny-llama does not exist on box (a relative path: over SSH it is taken from the login directory, not from the experiments folder)"
