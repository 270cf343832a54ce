"""What both log recorders share: run an engine in its own process group, capture stdout+stderr,
stop only that group, and write the log with line 1 saying how it was made."""

from __future__ import annotations

import os
import shlex
import signal
import subprocess
from collections.abc import Callable, Mapping
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]

During = Callable[[subprocess.Popen[bytes], Path], None]


def record(
    path: Path,
    made_by: str,
    python: Path,
    args: list[str],
    *,
    env: Mapping[str, str],
    shown_env: Mapping[str, str],
    during: During | None = None,
    timeout: float = 300,
    cwd: Path | str = REPO,
) -> None:
    """Run ``python ARGS``; ``made_by`` starts line 1 (script, case, engine and what was wrong)."""
    tmp = path.with_suffix(".tmp")
    stopped = ""
    with tmp.open("wb") as out:
        proc = subprocess.Popen([str(python), *args], stdout=out, stderr=subprocess.STDOUT, env={**os.environ, **env}, start_new_session=True, cwd=cwd)
        try:
            if during is not None:
                during(proc, tmp)
            proc.wait(timeout=timeout)
        except (subprocess.TimeoutExpired, KeyboardInterrupt):
            pass
        finally:
            if proc.poll() is None:
                stopped = f"; still running after {timeout:.0f} s, stopped by the recorder (SIGTERM to its group"
                os.killpg(proc.pid, signal.SIGTERM)  # our own process group only
                try:
                    proc.wait(timeout=30)
                    stopped += ")"
                except subprocess.TimeoutExpired:
                    os.killpg(proc.pid, signal.SIGKILL)
                    proc.wait()
                    stopped += ", then SIGKILL after 30 s)"
            try:
                os.killpg(proc.pid, signal.SIGKILL)  # children the engine left behind, ours only
            except ProcessLookupError:
                pass
    shown = " ".join(shlex.quote(a) for a in ["python", *args]).replace(str(REPO), ".")
    extra = " ".join(f"{k}={v}" for k, v in shown_env.items())
    head = f"# made by: {made_by}; exit code {proc.returncode}{stopped}; command: {extra + ' ' if extra else ''}{shown}\n"
    path.write_bytes(head.encode() + tmp.read_bytes().replace(str(REPO).encode(), b"."))
    tmp.unlink()
    print(f"{path.name}: exit {proc.returncode}, {path.stat().st_size} bytes", flush=True)
