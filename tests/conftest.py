"""Shared test settings. Fixture modules live in tests/fixtures/ and are listed in ``pytest_plugins``."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

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
]


@pytest.fixture
def repo() -> Path:
    return REPO


def need_engine() -> None:
    """Skip only when the engine environment is absent (make test always builds it)."""
    if not ENGINE_PYTHON.exists() or not (TINY_MODEL / "config.json").exists():
        pytest.skip("engine environment or tiny model missing: run `make engine tiny-model`")


def need_sglang() -> None:
    """Skip only when the SGLang environment is absent (make test always builds it)."""
    if not SGLANG_PYTHON.exists() or not (TINY_MODEL / "config.json").exists():
        pytest.skip("SGLang environment or tiny model missing: run `make sglang-engine tiny-model`")


# The preflight cache of the suite lives in its own folder, never in the user's (tests that check
# the cache itself point $SERVELAB_CACHE at their tmp_path).
os.environ.setdefault("SERVELAB_CACHE", tempfile.mkdtemp(prefix="servelab-test-cache-"))
