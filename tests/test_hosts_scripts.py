"""Host scripts: uploaded once per host and content, run as ``python <path>``, put back when removed.

Each behaviour is checked on the local host and on the real OpenSSH server (tests/fixtures/sshd.py).
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from servelab.engines.errors import ServelabError
from servelab.engines.helpers import HelperError, helper_script, run_helper
from servelab.engines.hosts.base import Host
from servelab.engines.hosts.local import LocalHost
from servelab.engines.hosts.scripts import SCRIPTS, SCRIPTS_DIR, HostScript, HostScripts, ScriptUploadError
from servelab.engines.hosts.ssh import SshHost
from servelab.engines.hosts.hostsfile import HostConfig
from servelab.engines.hosts.owner import me
from tests.conftest import missing
from tests.fixtures.sshd import SshServer

#: Echoes its arguments and its stdin, and says which file it runs from.
ECHO = b"import json, sys\nprint(json.dumps({'args': sys.argv[1:], 'stdin': sys.stdin.read(), 'file': __file__}))\n"


def _config(kind: str, workdir: Path, server: SshServer | None = None) -> HostConfig:
    if kind == "local":
        return HostConfig(name="box", python=sys.executable, workdir=str(workdir))
    assert server is not None
    return HostConfig(name="box", ssh=server.alias, python=sys.executable, workdir=str(workdir))


@pytest.fixture(params=["local", pytest.param("ssh", marks=pytest.mark.ssh)])
async def host(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Host]:
    if request.param == "local":
        h: Host = LocalHost(_config("local", tmp_path / "work"))
    else:
        request.getfixturevalue("ssh_config")
        h = SshHost(_config("ssh", tmp_path / "work", request.getfixturevalue("sshd")))
    yield h
    await h.close()


def _uploads(tmp_path: Path) -> list[Path]:
    return sorted((tmp_path / "work" / ".servelab" / me().user / SCRIPTS_DIR).glob("*.py"))


async def test_a_script_is_uploaded_once_and_reused(host: Host, tmp_path: Path) -> None:
    scripts = HostScripts()
    echo = HostScript("echo.py", ECHO)
    nasty = ["$(touch PWNED)", "a; b", "it's", ""]
    for i in range(8):
        done = await scripts.run(host, sys.executable, echo, str(i), *nasty, input=b"fed")
        assert done.ok, done.stderr
        answer = json.loads(done.text())
        assert answer == {"args": [str(i), *nasty], "stdin": "fed", "file": echo.path_on(host.config)}
        assert done.argv == [sys.executable, echo.path_on(host.config), str(i), *nasty]  # not ``-c <source>``
        if i == 0:
            inode = (tmp_path / "work" / ".servelab" / me().user / SCRIPTS_DIR / f"echo-{echo.sha12}.py").stat().st_ino
    assert (scripts.uploads, scripts.checks) == (1, 1)
    [only] = _uploads(tmp_path)
    assert only.name == f"echo-{echo.sha12}.py" and only.read_bytes() == ECHO and only.stat().st_ino == inode
    assert not (tmp_path / "PWNED").exists()


async def test_concurrent_first_calls_upload_once(host: Host, tmp_path: Path) -> None:
    scripts = HostScripts()
    echo = HostScript("echo.py", ECHO)
    results = await asyncio.gather(*(scripts.run(host, sys.executable, echo, str(i), input=b"") for i in range(6)))
    assert [json.loads(r.text())["args"] for r in results] == [[str(i)] for i in range(6)]
    assert scripts.uploads == 1 and len(_uploads(tmp_path)) == 1


async def test_a_changed_script_is_a_new_file(host: Host, tmp_path: Path) -> None:
    scripts = HostScripts()
    old, new = HostScript("tool.py", b"print('old')\n"), HostScript("tool.py", b"print('new')\n")
    assert (await scripts.run(host, sys.executable, old)).text() == "old\n"
    assert (await scripts.run(host, sys.executable, new)).text() == "new\n"
    assert (await scripts.run(host, sys.executable, old)).text() == "old\n"
    assert [p.name for p in _uploads(tmp_path)] == sorted([f"tool-{old.sha12}.py", f"tool-{new.sha12}.py"])
    assert scripts.uploads == 2


async def test_a_removed_upload_is_put_back_once_and_the_call_succeeds(host: Host, tmp_path: Path) -> None:
    scripts = HostScripts()
    echo = HostScript("echo.py", ECHO)
    assert (await scripts.run(host, sys.executable, echo, "1", input=b"a")).ok
    [path] = _uploads(tmp_path)
    path.unlink()  # the workdir was wiped (or was a tmpfs, and the host rebooted)
    done = await scripts.run(host, sys.executable, echo, "2", input=b"b")
    assert done.ok, done.stderr
    assert json.loads(done.text())["args"] == ["2"] and json.loads(done.text())["stdin"] == "b"  # stdin sent again
    assert path.read_bytes() == ECHO and scripts.uploads == 2


async def test_a_script_that_still_cannot_be_opened_is_retried_once_not_forever(host: Host, tmp_path: Path) -> None:
    """An interpreter that never finds its script (here a shell script that says so, and counts its calls)."""
    calls = tmp_path / "calls"
    blind = tmp_path / "python-that-cannot-open"
    blind.write_text(f"#!/bin/sh\necho x >> {calls}\necho \"python: can't open file '$1': [Errno 2] No such file or directory\" >&2\nexit 2\n")
    blind.chmod(0o755)
    scripts = HostScripts()
    done = await scripts.run(host, str(blind), HostScript("echo.py", ECHO), input=b"")
    assert done.exit_code == 2 and b"can't open file" in done.stderr  # the caller reports it, once
    assert calls.read_text().count("x") == 2  # the call and one retry after checking the upload
    assert (scripts.uploads, scripts.checks) == (1, 2)


async def test_an_upload_that_cannot_be_written_is_one_line(host: Host, tmp_path: Path) -> None:
    (tmp_path / "work").write_text("a file where the workdir should be\n")
    scripts = HostScripts()
    with pytest.raises(ScriptUploadError) as info:
        await scripts.run(host, sys.executable, HostScript("echo.py", ECHO))
    message = str(info.value)
    assert isinstance(info.value, ServelabError) and "\n" not in message
    assert message.startswith(f"box: cannot upload echo.py to {tmp_path}/work/.servelab/{me().user}/{SCRIPTS_DIR}/echo-")
    # through the helpers' entry point it is the HelperError every caller already handles
    with pytest.raises(HelperError, match=r"^box: cannot upload hostinfo.py to "):
        await run_helper(host, sys.executable, "hostinfo.py", "json", "--quick")


async def test_helpers_run_as_uploaded_files(host: Host, tmp_path: Path) -> None:
    before = SCRIPTS.uploads
    answers = [await run_helper(host, sys.executable, "hostinfo.py", "json", "--quick") for _ in range(3)]
    assert all(a["root"] == str(Path(json.__file__).parent.parent) for a in answers)
    assert SCRIPTS.uploads - before == 1
    assert [p.name for p in _uploads(tmp_path)] == [f"hostinfo-{helper_script('hostinfo.py').sha12}.py"]


async def test_the_cache_is_per_host_a_local_and_an_ssh_host_never_share_it(ssh_config: SshServer, tmp_path: Path) -> None:
    """Same name, same workdir: the SSH host still asks its own side once (it may be another machine)."""
    scripts = HostScripts()
    echo = HostScript("echo.py", ECHO)
    local = LocalHost(_config("local", tmp_path / "work"))
    remote = SshHost(_config("ssh", tmp_path / "work", ssh_config))
    try:
        for _ in range(3):
            assert (await scripts.run(local, sys.executable, echo)).ok
        assert scripts.checks == 1
        for _ in range(3):
            assert (await scripts.run(remote, sys.executable, echo)).ok
        assert scripts.checks == 2 and scripts.uploads == 1  # the file was there: the SSH side found it
    finally:
        await remote.close()


#: A shared module, and two scripts of the same folder that import it (one as ``from x import``).
SHARED = b"WORD = 'shared-1'\n\ndef say(who):\n    return '%s %s' % (who, WORD)\n"
ONE = b"import shared\nprint(shared.say('one'))\n"
TWO = b"import sys\nfrom shared import say\nprint(say('two'), sys.argv[1:])\n"


def _bundle_folder(tmp_path: Path, words: bytes = SHARED) -> Path:
    src = tmp_path / "src"
    src.mkdir(exist_ok=True)
    (src / "shared.py").write_bytes(words)
    (src / "one.py").write_bytes(ONE)
    (src / "two.py").write_bytes(TWO)
    (src / "unused.py").write_bytes(b"raise SystemExit('never sent')\n")
    return src


def _bundles(tmp_path: Path) -> list[Path]:
    return sorted(p for p in (tmp_path / "work" / ".servelab" / me().user / SCRIPTS_DIR).iterdir() if p.is_dir())


async def test_two_scripts_sharing_a_module_each_run_with_it(host: Host, tmp_path: Path) -> None:
    src = _bundle_folder(tmp_path)
    one, two = HostScript.from_folder(src, "one.py"), HostScript.from_folder(src, "two.py")
    assert [f for f, _ in one.modules] == [f for f, _ in two.modules] == ["shared.py"]
    scripts = HostScripts()
    for _ in range(3):
        assert (await scripts.run(host, sys.executable, one)).text() == "one shared-1\n"
        done = await scripts.run(host, sys.executable, two, "$(touch PWNED)", "a b")
        assert done.text() == "two shared-1 ['$(touch PWNED)', 'a b']\n"
        assert done.argv == [sys.executable, two.path_on(host.config), "$(touch PWNED)", "a b"]
    assert (scripts.uploads, scripts.checks) == (2, 2)
    assert [p.name for p in _bundles(tmp_path)] == sorted([f"one-{one.sha12}", f"two-{two.sha12}"])
    for bundle, script in zip(_bundles(tmp_path), sorted([one, two], key=lambda s: s.name)):
        assert sorted(p.name for p in bundle.iterdir() if p.suffix == ".py") == sorted([script.name, "shared.py"])
    assert not (tmp_path / "PWNED").exists()


async def test_a_changed_shared_module_is_a_new_bundle(host: Host, tmp_path: Path) -> None:
    old = HostScript.from_folder(_bundle_folder(tmp_path), "one.py")
    scripts = HostScripts()
    assert (await scripts.run(host, sys.executable, old)).text() == "one shared-1\n"
    new = HostScript.from_folder(_bundle_folder(tmp_path, SHARED.replace(b"shared-1", b"shared-2")), "one.py")
    assert new.source == old.source and new.sha12 != old.sha12
    assert (await scripts.run(host, sys.executable, new)).text() == "one shared-2\n"
    assert (await scripts.run(host, sys.executable, old)).text() == "one shared-1\n"  # the old bundle is intact
    assert [p.name for p in _bundles(tmp_path)] == sorted([f"one-{old.sha12}", f"one-{new.sha12}"])
    assert scripts.uploads == 2


async def test_a_removed_bundle_is_put_back_once_and_the_call_succeeds(host: Host, tmp_path: Path) -> None:
    two = HostScript.from_folder(_bundle_folder(tmp_path), "two.py")
    scripts = HostScripts()
    assert (await scripts.run(host, sys.executable, two, "1")).ok
    [bundle] = _bundles(tmp_path)
    shutil.rmtree(bundle)  # the workdir was wiped
    done = await scripts.run(host, sys.executable, two, "2")
    assert done.ok, done.stderr
    assert done.text() == "two shared-1 ['2']\n" and scripts.uploads == 2
    (bundle / "shared.py").unlink()  # a cleaner took one file of it (the script is still there)
    done = await scripts.run(host, sys.executable, two, "3")
    assert done.ok, done.stderr
    assert done.text() == "two shared-1 ['3']\n" and scripts.uploads == 3
    assert (bundle / "shared.py").read_bytes() == SHARED


async def test_runctl_and_campaignctl_carry_hostlib(host: Host, tmp_path: Path) -> None:
    for name in ("runctl.py", "campaignctl.py"):
        assert [f for f, _ in helper_script(name).modules] == ["hostlib.py"]
    answer = await run_helper(host, sys.executable, "runctl.py", "holders", "1")
    assert answer == {"holders": []}
    assert [p.name for p in _bundles(tmp_path)] == [f"runctl-{helper_script('runctl.py').sha12}"]


async def test_a_shared_workdir_gets_folders_every_user_adds_to_and_one_folder_per_user(host: Host, tmp_path: Path) -> None:
    """``.servelab`` and ``runs`` are made as /tmp is (1777), each user's helpers go to a folder of its
    own (755, its owner's), and a folder already there keeps its mode (another user's choice)."""
    import stat

    scripts = HostScripts()
    await scripts.run(host, sys.executable, HostScript("echo.py", ECHO))
    shared, mine = tmp_path / "work" / ".servelab", tmp_path / "work" / ".servelab" / me().user
    assert stat.S_IMODE(shared.stat().st_mode) == 0o1777 and stat.S_IMODE(mine.stat().st_mode) == 0o755
    assert mine.stat().st_uid == os.geteuid() and _uploads(tmp_path)
    kept = tmp_path / "work" / "runs"
    kept.mkdir(mode=0o700)
    await host.make_shared_dir(str(kept))
    await host.make_shared_dir(str(tmp_path / "work" / "new" / "runs"))
    assert stat.S_IMODE(kept.stat().st_mode) == 0o700
    assert stat.S_IMODE((tmp_path / "work" / "new" / "runs").stat().st_mode) == 0o1777


async def test_a_users_folder_made_by_another_user_is_refused_in_one_line(host: Host, tmp_path: Path) -> None:
    """A user's helpers are never run from a folder another user made (who could change them)."""
    if os.geteuid() != 0:
        missing("making a folder another user's needs root (CI runs as root)")
    planted = tmp_path / "work" / ".servelab" / me().user
    planted.mkdir(parents=True)
    os.chown(planted, 65534, 65534)
    with pytest.raises(ScriptUploadError) as info:
        await HostScripts().run(host, sys.executable, HostScript("echo.py", ECHO))
    assert "\n" not in str(info.value) and "made by another user, not yours" in str(info.value), info.value
    assert not list(planted.iterdir())
