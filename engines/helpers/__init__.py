"""Small scripts servelab runs on a host with the host's own Python, and the one way to run them.

Each helper (``runctl.py``, ``hostinfo.py``, ``validate_args.py``, ``patchtool.py``, ``timed_client.py``,
``raycheck.py``) uses the standard library only (``raycheck.py`` also imports Ray, which is what it
checks) and never imports servelab, because the host has only the engine's environment; what they
share is in modules of this folder (``hostlib.py``: JSON files, /proc, the detached start), which a
helper imports as ``import hostlib`` (``from . import hostlib`` when servelab imports it). It reaches
the host as a host script (``engines/hosts/scripts.py``: the script and the modules it imports,
uploaded once per content hash, run as ``python <path> ARGS``), takes a JSON request on stdin and prints one JSON answer as the last line
of stdout; whatever the engine prints while imported goes to stderr.
"""

from __future__ import annotations

import asyncio
import json
from functools import cache
from pathlib import Path
from typing import Any

from servelab.engines.errors import ServelabError
from servelab.engines.helpers import hostlib
from servelab.engines.hosts.base import Completed, Host
from servelab.engines.hosts.scripts import SCRIPTS, HostScript, ScriptUploadError

FOLDER = Path(__file__).resolve().parent


class HelperError(ServelabError):
    """A helper that could not run or gave no answer. The message is one line."""


@cache
def helper_script(name: str) -> HostScript:
    """``engines/helpers/<name>`` as a host script, with the modules of this folder it imports (read once per process)."""
    return HostScript.from_folder(FOLDER, name)


async def run_script(
    host: Host,
    python: str,
    name: str,
    *args: str,
    input: bytes | None = None,
    env: dict[str, str] | None = None,
    timeout: float | None = 120.0,
) -> Completed:
    """Run helper ``name`` on ``host`` as ``python <uploaded path> ARGS``; the finished command."""
    return await SCRIPTS.run(host, python, helper_script(name), *args, input=input, env=env, timeout=timeout)


def last_json(done: Completed) -> dict[str, Any] | None:
    """The helper's answer: the last stdout line that is a JSON object (the host scripts' own rule)."""
    return hostlib.last_json(done.stdout)


def last_line(data: bytes) -> str:
    """The last non-empty line of some output, for a one-line message."""
    lines = [ln.strip() for ln in data.decode("utf-8", "replace").splitlines() if ln.strip()]
    return lines[-1] if lines else ""


async def run_helper(
    host: Host,
    python: str,
    name: str,
    *args: str,
    request: dict[str, Any] | None = None,
    env: dict[str, str] | None = None,
    timeout: float = 120.0,
) -> dict[str, Any]:
    """Run a helper on ``host`` and return its JSON answer; HelperError when there is none."""
    data = json.dumps(request).encode() if request is not None else None
    try:
        done = await run_script(host, python, name, *args, input=data, env=env, timeout=timeout)
    except ScriptUploadError as exc:
        raise HelperError(str(exc)) from None
    except (TimeoutError, asyncio.TimeoutError):
        raise HelperError(f"{name} did not answer on {host.name} within {timeout:g} s") from None
    answer = last_json(done)
    if answer is None:
        why = last_line(done.stderr) or last_line(done.stdout) or f"exit code {done.exit_code}"
        if done.exit_code == 127:
            why = f"cannot run {python}: {why}"
        raise HelperError(f"{name} gave no answer on {host.name}: {why}")
    return answer
