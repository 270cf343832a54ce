"""Two operators on one host, each with a dashboard (issue #36's trial): user A is the user the suite
runs as, user B a second local OS user who logs in through a real sshd; each dashboard runs in a tmux
session of its own (tmux as the terminal, its ``alert-bell`` hook counting each session's bells).

- A launches a run: A's dashboard bells and probes it; B's rings no bell, writes nothing into it and
  shows no toast about it, though it lists it.
- B rehearses the same experiment beside A's live run: ``status EXP``, A's list row and B's list row
  still show A's run and its figures once both dashboards list the rehearsal.
- B launches and stops a run of its own: B's dashboard bells and probes it, A's does neither, and
  A's history lists A's run, B's run and the rehearsal, each with its owner, the rehearsal marked.

The engine is the StubEngine (a real process serving HTTP; a test double for vLLM). B runs this
checkout's servelab with the system's Python 3.11 over a hard-linked copy of the app environment's
packages: the suite's interpreter lives under root's home, which a second user cannot enter.
"""

from __future__ import annotations

import json
import os
import pwd
import shlex
import shutil
import subprocess
import sys
import tempfile
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from servelab.engines.probe.artifacts import PROBE_JSON
from tests.conftest import REPO, missing
from tests.fixtures.ports import free_port
from tests.fixtures.runlab import wait_for
from tests.fixtures.sshd import SshServer, _keygen, start_sshd
from tests.fixtures.tui import SHARED_LOGS

USER_B = "servelab-b"
SYSTEM_PYTHON = "/usr/bin/python3.11"
EXP = "shared-srv"
SERVE_LOG = SHARED_LOGS / "vllm-cpu-ngram-startup-and-serve.log"
SIZE = ("150", "30")


def _user_b() -> pwd.struct_passwd:
    """The second OS user (made once per machine: a system user with a shell and no password)."""
    if os.geteuid() != 0:
        missing("two OS users need root to make the second one (CI runs as root)")
    if shutil.which("useradd") is None or shutil.which("tmux") is None or not Path(SYSTEM_PYTHON).exists():
        missing(f"useradd, tmux and {SYSTEM_PYTHON} are needed for the two-operator trial")
    try:
        pwd.getpwnam(USER_B)
    except KeyError:
        subprocess.run(["useradd", "--system", "--no-create-home", "--home-dir", "/nonexistent", "--shell", "/bin/sh", USER_B], check=True, capture_output=True)
    # a password of "*" logs in by key only; useradd's "!" is a locked account sshd refuses
    subprocess.run(["usermod", "-p", "*", USER_B], check=True, capture_output=True)
    return pwd.getpwnam(USER_B)


def _link_tree(src: Path, dst: Path) -> None:
    """``src`` copied as hard links (a plain copy across filesystems); caches left out."""

    def link(a: str, b: str) -> None:
        try:
            os.link(a, b)
        except OSError:
            shutil.copy2(a, b)

    shutil.copytree(src, dst, symlinks=True, copy_function=link, ignore=shutil.ignore_patterns("__pycache__"))


@dataclass
class Floor:
    """The shared host: a folder both users reach, B's login and two tmux sessions."""

    root: Path
    folder: Path
    sshd: SshServer
    key_b: Path
    uid_b: int
    socket: Path
    bells: Path

    def servelab_a(self, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "servelab.tui.cli", "--dir", str(self.folder), *args], capture_output=True,
                              text=True, cwd=REPO, env=dict(os.environ), stdin=subprocess.DEVNULL, timeout=timeout)

    def b_command(self, *args: str) -> list[str]:
        """``servelab ARGS`` as user B, through a real sshd login (``-tt``: a terminal for a dashboard)."""
        home = self.root / "home-b"
        env = {"HOME": str(home), "XDG_CONFIG_HOME": str(home / "config"), "XDG_CACHE_HOME": str(home / "cache"),
               "XDG_DATA_HOME": str(home / "data"), "XDG_STATE_HOME": str(home / "state"), "SERVELAB_CACHE": str(home / "servelab-cache"),
               "PYTHONPATH": f"{self.root / 'py' / 'app'}:{self.root / 'py' / 'site'}", "PYTHONDONTWRITEBYTECODE": "1"}
        remote = f"cd {shlex.quote(str(self.root))} && exec " + shlex.join(["env", *(f"{k}={v}" for k, v in env.items()), SYSTEM_PYTHON, "-m", "servelab.tui.cli", "--dir", str(self.folder), *args])
        return ["ssh", "-tt" if not args else "-T", "-p", str(self.sshd.port), "-i", str(self.key_b), "-o", "IdentitiesOnly=yes", "-o", "BatchMode=yes",
                "-o", f"UserKnownHostsFile={self.sshd.known_hosts}", "-o", "StrictHostKeyChecking=yes", f"{USER_B}@127.0.0.1", remote]

    def servelab_b(self, *args: str, timeout: float = 180) -> subprocess.CompletedProcess[str]:
        return subprocess.run(self.b_command(*args), capture_output=True, text=True, stdin=subprocess.DEVNULL, timeout=timeout)

    def tmux(self, *args: str) -> str:
        return subprocess.run(["tmux", "-S", str(self.socket), *args], capture_output=True, text=True, timeout=20, check=True).stdout

    def screen(self, session: str) -> str:
        return self.tmux("capture-pane", "-p", "-t", session)

    def keys(self, session: str, *keys: str) -> None:
        self.tmux("send-keys", "-t", session, *keys)

    def rang(self, session: str) -> int:
        """Bells heard from ``session``'s dashboard so far."""
        return self.bells.read_text().split().count(session) if self.bells.exists() else 0

    def row(self, session: str, name: str) -> str:
        """The list's row of ``name`` on ``session``'s screen (the table's side of the line, its words)."""
        return next((" ".join(words) for line in self.screen(session).splitlines() if (words := line.split("│")[0].split()) and words[0] == name), "")


@pytest.fixture
def floor() -> Iterator[Floor]:
    b = _user_b()
    root = Path(tempfile.mkdtemp(prefix="servelab-two-operators-", dir="/tmp"))  # pytest's own tmp is root's alone
    os.chmod(root, 0o755)
    sshd = None
    socket = root / "tmux.sock"
    try:
        py = root / "py"
        _link_tree(Path(sys.prefix) / "lib" / f"python{sys.version_info.major}.{sys.version_info.minor}" / "site-packages", py / "site")
        app = py / "app" / "servelab"
        app.mkdir(parents=True)
        for name in ("__init__.py", "__main__.py"):
            shutil.copy2(REPO / "servelab" / name, app / name)
        for part in ("engines", "tui"):
            _link_tree(REPO / part, app / part)
        _link_tree(REPO / "tests" / "stub_engine", root / "stub")
        text = SERVE_LOG.read_bytes()
        (root / "up.log").write_bytes(text[: text.index(b"Application startup complete.") + 30])  # a server up and idle
        folder = root / "experiments"
        folder.mkdir()
        work = root / "work"
        work.mkdir()
        os.chmod(work, 0o1777)  # one workdir for both users, as an admin sets one up; servelab makes what is inside
        (folder / "hosts.toml").write_text(f"[hosts.local]\npython = {json.dumps(SYSTEM_PYTHON)}\nworkdir = {json.dumps(str(work))}\n")
        (folder / f"{EXP}.toml").write_text(
            f'engine = "vllm"\nhost = "local"\nmodel = {json.dumps(str(root / "no-model"))}\nport = {free_port()}\n'
            f'[env]\nPYTHONPATH = {json.dumps(str(root / "stub"))}\nSTUB_HTTP = "1"\nSTUB_INTERVAL = "1"\nSTUB_LOG = {json.dumps(str(root / "up.log"))}\n'
        )
        home_b = root / "home-b"
        home_b.mkdir()
        os.chown(home_b, b.pw_uid, b.pw_gid)
        sshd = start_sshd(root / "sshd")
        os.chmod(root / "sshd", 0o755)  # sshd reads authorized_keys as the user logging in
        key_b = root / "sshd" / "id_b"
        pub = _keygen(key_b)
        with (root / "sshd" / "authorized_keys").open("a") as f:
            f.write(pub + "\n")
        os.chmod(root / "sshd" / "authorized_keys", 0o644)
        yield Floor(root, folder, sshd, key_b, b.pw_uid, socket, root / "bells")
    finally:
        subprocess.run(["tmux", "-S", str(socket), "kill-server"], capture_output=True, timeout=20)
        if sshd is not None:
            sshd.go_down()
        for pid in _runs_of(root / "work"):
            try:
                os.killpg(pid, 9)
            except OSError:
                pass
        shutil.rmtree(root, ignore_errors=True)


def _runs_of(work: Path) -> list[int]:
    """Process groups of the runs under ``work`` still recorded alive (the test's leftovers)."""
    out = []
    for rj in work.glob("runs/*/run.json"):
        try:
            pid = json.loads(rj.read_text()).get("pid")
        except (OSError, ValueError):
            continue
        if isinstance(pid, int) and pid > 1:
            out.append(pid)
    return out


def _files_of(run_dir: Path, uid: int) -> list[str]:
    return sorted(str(p.relative_to(run_dir)) for p in run_dir.rglob("*") if p.stat().st_uid == uid)


def test_two_users_dashboards_act_only_on_their_own_runs_and_a_rehearsal_changes_no_latest(floor: Floor) -> None:
    f = floor
    # the dashboards: A's as this user, B's through its sshd login; each bell is a line in one file
    conf = f.root / "tmux.conf"  # read before the first session: no session is resized by an option set later
    conf.write_text(f"set -g default-size {'x'.join(SIZE)}\nset -g monitor-bell on\nset -g bell-action any\n"
                    f"set-hook -g alert-bell \"run-shell 'echo #{{session_name}} >> {f.bells}'\"\n")
    f.tmux("-f", str(conf), "new-session", "-d", "-s", "a", "-x", SIZE[0], "-y", SIZE[1], "-c", str(REPO),
           "env", "-u", "COLUMNS", "-u", "LINES", sys.executable, "-m", "servelab.tui.cli", "--dir", str(f.folder))  # the pane's size
    f.tmux("new-session", "-d", "-s", "b", "-x", SIZE[0], "-y", SIZE[1], *f.b_command())
    for s in ("a", "b"):
        wait_for(lambda s=s: EXP in f.screen(s), 90, 0.2, lambda s=s: f.screen(s))

    # A launches: A's dashboard bells and probes it; B's lists it and does nothing else
    launched = f.servelab_a("launch", EXP, "--skip-preflight", "--json")
    assert launched.returncode == 0, launched.stderr
    run_a = json.loads(launched.stdout)["run"]
    dir_a = f.root / "work" / "runs" / run_a
    wait_for(lambda: (dir_a / PROBE_JSON).exists() and f.rang("a") == 1, 120, 0.2, lambda: f"bells a={f.rang('a')}; {f.screen('a')}")
    wait_for(lambda: "ready" in f.row("b", EXP).split(), 60, 0.2, lambda: f.screen("b"))
    assert f.rang("b") == 0
    assert _files_of(dir_a, f.uid_b) == []  # B's dashboard wrote nothing into A's run (no probe, no artifact)
    row_a, row_b = f.row("a", EXP), f.row("b", EXP)
    assert "ready" in row_a.split() and row_a == row_b, (row_a, row_b)

    # B rehearses beside A's live run: nobody's latest run or figures change
    rehearsed = f.servelab_b("rehearse", EXP, "--skip-preflight", "--timeout", "120", "--json")
    assert rehearsed.returncode == 0, (rehearsed.stdout, rehearsed.stderr)
    rehearsal = json.loads(rehearsed.stdout)["run_id"]
    status = f.servelab_a("status", EXP, "--json")
    assert status.returncode == 0 and json.loads(status.stdout)["run"] == run_a, status.stdout
    for s in ("a", "b"):  # once each dashboard lists the rehearsal (its history, marked), the list row is A's run still
        f.keys(s, "H")
        wait_for(lambda s=s: "rehearsal" in f.screen(s) and USER_B in f.screen(s), 60, 0.2, lambda s=s: f"{s}: {f.screen(s)}")
        f.keys(s, "q")  # back to the list
        wait_for(lambda s=s: f.row(s, EXP) != "" and "History" not in f.screen(s).splitlines()[0], 30, 0.2, lambda s=s: f.screen(s))
    assert f.row("a", EXP) == row_a and f.row("b", EXP) == row_b, (f.row("a", EXP), row_a, f.row("b", EXP), row_b)
    assert f.rang("a") == 1 and f.rang("b") == 0  # a rehearsal is never belled, even by its own user's dashboard

    # A stops its run (the port is the experiment's); B launches and stops one of its own: B's
    # dashboard bells and probes it, A's does neither
    assert f.servelab_a("stop", run_a).returncode == 0
    launched_b = f.servelab_b("launch", EXP, "--skip-preflight", "--json")
    assert launched_b.returncode == 0, launched_b.stderr
    run_b = json.loads(launched_b.stdout)["run"]
    dir_b = f.root / "work" / "runs" / run_b
    wait_for(lambda: (dir_b / PROBE_JSON).exists() and f.rang("b") == 1, 120, 0.2, lambda: f"bells b={f.rang('b')}; {f.screen('b')}")
    assert (dir_b / PROBE_JSON).stat().st_uid == f.uid_b
    assert _files_of(dir_b, os.geteuid()) == [] and f.rang("a") == 1
    stopped = f.servelab_b("stop", run_b)
    assert stopped.returncode == 0, stopped.stderr

    # A's history: both users' runs and the rehearsal, each with its owner, the rehearsal marked
    history = f.servelab_a("history", EXP, "--json")
    assert history.returncode == 0, history.stderr
    rows = {r["run"]: (r["launched_by"].split("@")[0], r["rehearsal"]) for r in json.loads(history.stdout)["runs"]}
    me = pwd.getpwuid(os.geteuid()).pw_name
    assert rows == {run_a: (me, False), rehearsal: (USER_B, True), run_b: (USER_B, False)}, rows
    f.keys("a", "H")
    wait_for(lambda: sum(USER_B in line for line in f.screen("a").splitlines()) == 2 and f"{me}@" in f.screen("a"), 60, 0.2, lambda: f.screen("a"))
    lines = f.screen("a").splitlines()
    assert [line for line in lines if "(rehearsal)" in line] == [line for line in lines if USER_B in line and "rehearsal" in line], lines
