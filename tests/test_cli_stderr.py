"""Quiet stderr (issue #32): every ``servelab`` command, run as an operator runs it (a subprocess, the
real entry point, Python's default warning filters), prints on stderr nothing but servelab's own
lines: ``servelab: ...`` answers, and the progress lines a command documents. A third party's
warning (cryptography's DSA deprecation through asyncssh, a torch or pydantic notice) fails it.

The inputs are real: the bundled experiments (whose ``blackwell`` host is unreachable here: the SSH
client is loaded and its unreachable line is servelab's own), a real log, a live StubEngine run on
the local host and on the suite's sshd, the trained tiny drafter.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

from servelab.tui.cli import COMMAND_MODULE, quiet_third_party_warnings
from tests.conftest import EXPERIMENTS, REPO, SHARED_LOGS
from tests.fixtures.runlab import Lab, wait_for
from tests.fixtures.sshd import SshServer

pytestmark = pytest.mark.ssh

#: What a third party's noise looks like on stderr: a warning printed by Python's warnings module
#: (``file.py:12: SomeWarning: ...``), a warning class named on its own, a traceback.
FOREIGN = re.compile(r"\.py:\d+: \w*Warning\b|\b\w*(Deprecation|Future|User|Runtime|Resource|Syntax)Warning\b|Traceback \(most recent call last\)|^\s+File \"")


def servelab(folder: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONWARNINGS", "SERVELAB_DEBUG")}
    return subprocess.run(
        [sys.executable, "-m", "servelab", "--dir", str(folder), *args],
        capture_output=True, text=True, cwd=REPO, env=env, stdin=subprocess.DEVNULL, timeout=120,
    )


def foreign_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if FOREIGN.search(line)]


def test_the_entry_point_filters_cryptography_noise_by_category_and_module_only() -> None:
    from cryptography.utils import CryptographyDeprecationWarning

    with warnings.catch_warnings(record=True) as seen:
        warnings.resetwarnings()
        warnings.simplefilter("always")
        quiet_third_party_warnings()
        warnings.warn_explicit("DSA is deprecated", CryptographyDeprecationWarning, "misc.py", 1, module="asyncssh.crypto.misc")
        warnings.warn_explicit("DSA is deprecated", CryptographyDeprecationWarning, "x.py", 1, module="somebody.else")
        warnings.warn_explicit("other", UserWarning, "misc.py", 1, module="asyncssh.crypto.misc")
    assert [(w.category.__name__, str(w.message)) for w in seen] == [
        ("CryptographyDeprecationWarning", "DSA is deprecated"), ("UserWarning", "other"),
    ]


async def test_every_command_on_real_inputs_prints_only_servelabs_own_lines_on_stderr(lab: Lab, ssh_config: SshServer, tmp_path: Path) -> None:
    bundled = tmp_path / "bundled"
    shutil.copytree(EXPERIMENTS, bundled)
    for env in (".venv-engine", ".venv-sglang", ".models"):  # the bundled hosts.toml names them relative to the folder
        (tmp_path / env).symlink_to(REPO / env)
    lab.experiment("quiet", env={"STUB_INTERVAL": "0.05"})
    lab.experiment("quiet-box", host="box", env={"STUB_INTERVAL": "0.05"})
    log = next(p for p in sorted(SHARED_LOGS.glob("vllm-*.log")))
    drafter = REPO / ".models" / "tiny-trained" / "eagle3"
    target = REPO / ".models" / "tiny-trained" / "target"

    launched = servelab(lab.folder, "launch", "quiet", "--json", "--skip-preflight")
    assert launched.returncode == 0, launched.stderr
    run = json.loads(launched.stdout)["run"]
    boxed = servelab(lab.folder, "launch", "quiet-box", "--json", "--skip-preflight")
    assert boxed.returncode == 0, boxed.stderr
    box_run = json.loads(boxed.stdout)["run"]
    wait_for(lambda: b"line 00000002" in Path(json.loads(launched.stdout)["log_path"]).read_bytes())

    calls: list[tuple[Path, tuple[str, ...]]] = [
        (bundled, ("list",)), (bundled, ("show", "tiny-cpu-vllm-eagle3")),
        (bundled, ("check",)), (bundled, ("runs", "--json")),
        (bundled, ("status", "tiny-cpu-vllm-draft")), (bundled, ("campaign", "plan", "tiny-cpu-ngram-sweep")),
        (bundled, ("patches", "kimi-k25-vllm-eagle3")), (bundled, ("gpus", "local")),
        (bundled, ("analyze", str(log))), (bundled, ("drafter", "--target", str(target), str(drafter))),
        (lab.folder, ("runs",)),
        (lab.folder, ("status", run)), (lab.folder, ("status", "--json", box_run)), (lab.folder, ("nodes", run)),
        (lab.folder, ("logs", "--errors", box_run)),
        (bundled, ("probe", "tiny-cpu-vllm-ngram")), (bundled, ("history", "tiny-cpu-vllm-eagle3")),
        (bundled, ("ab", "tiny-cpu-vllm-trained", "tiny-cpu-vllm-eagle3", "--help")), (lab.folder, ("compare", run, box_run)), (bundled, ("diagnose", "tiny-cpu-vllm-eagle3")),
        (lab.folder, ("preflight", "quiet")), (lab.folder, ("patches", "quiet")),
        (lab.folder, ("stop", run, "--grace", "2")), (lab.folder, ("stop", box_run, "--grace", "2")),
        (lab.folder, ("cleanup",)), (lab.folder, ("rehearse", "no-such-experiment")),
        (lab.folder, ("list", "--no-such-flag")),
    ]
    commands_run = {"launch"} | {args[0] for _, args in calls}
    assert commands_run >= set(COMMAND_MODULE), f"commands never run here: {set(COMMAND_MODULE) - commands_run}"
    noisy = {}
    for folder, args in calls:
        done = servelab(folder, *args)
        assert done.returncode in (0, 1, 2), (args, done.returncode, done.stderr)  # answered, never crashed
        if foreign := foreign_lines(done.stderr):
            noisy[" ".join(args)] = foreign[:3]
    assert not noisy, json.dumps(noisy, indent=1)


def test_the_noise_pattern_catches_what_a_third_party_prints() -> None:
    """The pattern the test above uses, on the noise it exists for (as printed on 2026-12-06 with
    cryptography 51.0.1) and on servelab's own lines."""
    noise = (
        "/x/site-packages/asyncssh/crypto/misc.py:32: CryptographyDeprecationWarning: DSA is deprecated and support will be removed\n"
        "  PyCAPrivateKey = Union[dsa.DSAPrivateKey, rsa.RSAPrivateKey,\n"
    )
    assert foreign_lines(noise) == [noise.splitlines()[0]]
    own = "servelab: host blackwell unreachable, checked 03:11: cannot resolve blackwell\nno runs\nhosts.toml:5: hosts.local.python: warning: missing\n"
    assert foreign_lines(own) == []
