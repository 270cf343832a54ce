"""Shared test settings. Fixture modules live in tests/fixtures/ and are listed in ``pytest_plugins``."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import NoReturn

import pytest

REPO = Path(__file__).resolve().parent.parent
EXPERIMENTS = REPO / "experiments"
SHARED_LOGS = (REPO.parent / "shared" / "logs").resolve()
ENGINE_PYTHON = REPO / ".venv-engine" / "bin" / "python"
TINY_MODEL = REPO / ".models" / "tiny-llama"
SGLANG_PYTHON = REPO / ".venv-sglang" / "bin" / "python"

# One line per fixture module (tests/fixtures/<area>.py).
pytest_plugins: list[str] = [
    "tests.fixtures.sshd",
    "tests.fixtures.runlab",
    "tests.fixtures.tui",
    "tests.fixtures.tmux",
    "tests.fixtures.engine",
    "tests.fixtures.drafters",
    "tests.fixtures.story",
    "tests.fixtures.fake_sglang",
    "tests.fixtures.sglang_server",
    "tests.fixtures.multinode_lab",
    "tests.fixtures.state",
    "tests.fixtures.slurm",
    "tests.fixtures.scheduling",
]


@pytest.fixture
def repo() -> Path:
    return REPO


def under_ci() -> bool:
    """``CI`` set to a true value, as CI runners set it: a missing part of the suite is a failure."""
    return os.environ.get("CI", "").strip().lower() in {"1", "true", "yes", "on"}


def missing(what: str) -> NoReturn:
    """A part the test needs is absent: skipped on a developer's machine, a failure under CI (where
    ``make test`` has installed everything, so an absent part is a broken set-up, not a choice)."""
    if under_ci():
        pytest.fail(f"{what} (CI is set: a missing part fails the run instead of skipping)", pytrace=False)
    pytest.skip(what)


def need_engine() -> None:
    """The engine environment and the tiny model (make test always builds them)."""
    if not ENGINE_PYTHON.exists() or not (TINY_MODEL / "config.json").exists():
        missing("engine environment or tiny model missing: run `make engine tiny-model`")


def need_sglang() -> None:
    """The SGLang environment and the tiny model (make test always builds them)."""
    if not SGLANG_PYTHON.exists() or not (TINY_MODEL / "config.json").exists():
        missing("SGLang environment or tiny model missing: run `make sglang-engine tiny-model`")


# The suite never reads or writes the user's home: servelab's folders there (its config with a
# keymap.toml, its caches, its state, the default host workdir) are watched from the start of the
# session to its end, and every XDG folder the suite's processes see is the suite's own, so a
# user's keymap cannot change the keys a dashboard test presses. The preflight cache is the
# suite's own too (tests that check the cache itself point $SERVELAB_CACHE at their tmp_path).
# ~/.cache/servelab/envs, models and mypy-* are make's (the engine environments and trained models
# the suite runs, mypy's cache): read, never written by a test.
def _home_folders() -> list[Path]:
    home = Path.home()
    env = os.environ
    return [
        Path(env.get("XDG_CONFIG_HOME") or home / ".config") / "servelab",
        Path(env.get("XDG_DATA_HOME") or home / ".local" / "share") / "servelab",
        Path(env.get("XDG_STATE_HOME") or home / ".local" / "state") / "servelab",
        Path(env.get("XDG_CACHE_HOME") or home / ".cache") / "servelab",
    ]


MAKES_OWN = {"envs", "models"}


def home_snapshot(folders: list[Path]) -> dict[str, tuple[int, int]]:
    """Every file under servelab's home folders (make's environments and models left out): size, mtime."""
    seen: dict[str, tuple[int, int]] = {}
    for top in folders:
        if not top.is_dir():
            continue
        for dirpath, dirnames, filenames in os.walk(top):
            if Path(dirpath) == top:
                dirnames[:] = [d for d in dirnames if d not in MAKES_OWN and not d.startswith("mypy-")]
            for name in filenames:
                p = Path(dirpath) / name
                try:
                    st = p.lstat()
                except OSError:
                    continue
                seen[str(p)] = (st.st_size, st.st_mtime_ns)
    return seen


USER_FOLDERS = _home_folders()
_HOME_BEFORE = home_snapshot(USER_FOLDERS)
_SUITE_HOME = Path(tempfile.mkdtemp(prefix="servelab-test-home-"))
#: The XDG folders the suite gives its processes, each a folder of its own under the suite's home.
SUITE_XDG = {"XDG_CONFIG_HOME": "config", "XDG_CACHE_HOME": "cache", "XDG_DATA_HOME": "data", "XDG_STATE_HOME": "state"}
for _var, _sub in SUITE_XDG.items():
    os.environ[_var] = str(_SUITE_HOME / _sub)
os.environ.setdefault("SERVELAB_CACHE", tempfile.mkdtemp(prefix="servelab-test-cache-"))
#: One OpenMP thread per engine process the suite starts (local, under Slurm and Ray: they inherit this
#: environment; over SSH the suite's sshd sets it, tests/fixtures/sshd.py). The suite runs two to four
#: tiny-model engines at once on two cores; torch's default of one thread per core makes each engine's
#: threads spin against the others'. A tiny EAGLE-3 server beside two busy processes generated 14 tokens/s
#: and 208 with one thread in the first measurement; the effect varies from run to run (later runs of
#: bench/omp_threads.py: 137-200 against 189-200), and the suite's story setup took 242 s instead of 618.
ENGINE_THREADS = "1"
os.environ["OMP_NUM_THREADS"] = ENGINE_THREADS


def suite_home_env() -> dict[str, str]:
    """The suite's own XDG folders and cache, for a test that runs servelab with an environment of
    its own making (a bare PATH): without them servelab writes its state in the user's home."""
    return {k: os.environ[k] for k in (*SUITE_XDG, "SERVELAB_CACHE")}


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Under CI the run fails if anything under servelab's folders in the user's home changed; on a
    developer's machine (where their own dashboard may write there meanwhile) it says so."""
    if os.environ.get("PYTEST_XDIST_WORKER"):
        return  # a worker of `pytest -n`: its environment is the controller's, whose own check runs last
    after = home_snapshot(USER_FOLDERS)
    changed = sorted(k for k in _HOME_BEFORE.keys() | after.keys() if _HOME_BEFORE.get(k) != after.get(k))
    if changed:
        print(f"\nservelab's folders in the user's home changed during the run: {len(changed)} file(s), e.g. " + ", ".join(changed[:5]))
        if under_ci():
            session.exitstatus = pytest.ExitCode.TESTS_FAILED
