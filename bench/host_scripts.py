"""How long preflight-style helper calls take: the old ``python -c <source>`` against host scripts.

Prints figures; asserts nothing. Each round makes N calls (default 20) in turn of ``hostinfo.py
--quick``, ``validate_args.py`` (a trivial check file), ``patchtool.py check`` (no patches) and
``runctl.py holders``, once the old way (the whole source, and its bundle's modules, as the ``-c`` argument of every call,
the form servelab used before host scripts) and once through ``engines/hosts/scripts.py``
(uploaded once, then ``python <path>``), on the real OpenSSH server of the tests (127.0.0.1) and
on the local host. Rounds interleave old and new so load drifts hit both alike; the new form's
first round includes its one upload. The load average is printed beside every figure.

    .venv/bin/python bench/host_scripts.py [--calls 20] [--rounds 5]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from servelab.engines.helpers import helper_script, last_json  # noqa: E402
from servelab.engines.hosts.base import Completed, Host  # noqa: E402
from servelab.engines.hosts.local import LocalHost  # noqa: E402
from servelab.engines.hosts.scripts import HostScripts  # noqa: E402
from servelab.engines.hosts.ssh import SshHost  # noqa: E402
from servelab.engines.hosts.hostsfile import HostConfig  # noqa: E402
from tests.fixtures.sshd import start_sshd  # noqa: E402

PY = sys.executable


def _load() -> str:
    return "load {:.2f} {:.2f} {:.2f}".format(*os.getloadavg())


def _calls(work: str) -> list[tuple[str, list[str], bytes | None]]:
    """(helper, args, stdin) for one cycle of preflight-style calls."""
    check = {"engine": "bench", "check": "def check(flags):\n    return []\n", "flags": ["--port", "1"]}
    patch = {"root": work, "state": f"{work}/patch-state", "strip": 1, "imports": False, "import_timeout": 10, "patches": []}
    return [
        ("hostinfo.py", ["json", "--quick"], None),
        ("validate_args.py", [], json.dumps(check).encode()),
        ("patchtool.py", ["check"], json.dumps(patch).encode()),
        ("runctl.py", ["holders", "1"], None),
    ]


#: For a bundle's modules in the old form: served from the ``-c`` text itself (a meta path finder).
_MODULES = """import importlib.abc, importlib.util, sys
class _Bundle(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, name, path, target=None):
        return importlib.util.spec_from_loader(name, self) if name in _SRC else None
    def create_module(self, spec):
        return None
    def exec_module(self, module):
        exec(compile(_SRC[module.__name__], module.__name__ + ".py", "exec"), module.__dict__)
sys.meta_path.insert(0, _Bundle())
exec(compile(_MAIN, "<string>", "exec"), {"__name__": "__main__", "__builtins__": __builtins__})
"""


def _old_source(name: str) -> str:
    """The helper's whole text (and its bundle's modules', when it imports some) for ``python -c``."""
    script = helper_script(name)
    if not script.modules:
        return script.source.decode()
    sources = {file.removesuffix(".py"): data.decode() for file, data in script.modules}
    return f"_SRC = {sources!r}\n_MAIN = {script.source.decode()!r}\n{_MODULES}"


async def _old(host: Host, name: str, args: list[str], stdin: bytes | None) -> Completed:
    """The form before host scripts: the helper's whole text as ``python -c``, on every call."""
    return await host.run([PY, "-c", _old_source(name), *args], input=stdin, timeout=120)


async def _call(host: Host, form: str, name: str, args: list[str], stdin: bytes | None, scripts: HostScripts) -> float:
    t0 = time.perf_counter()
    if form == "old":
        done = await _old(host, name, args, stdin)
    else:
        done = await scripts.run(host, PY, helper_script(name), *args, input=stdin, timeout=120)
    seconds = time.perf_counter() - t0
    if last_json(done) is None:
        raise SystemExit(f"{form} {name} gave no answer on {host.name}: {done.stderr.decode(errors='replace')[-300:]}")
    return seconds


async def bench(host: Host, label: str, n: int, rounds: int, work: str) -> None:
    """Per round, N calls each made both ways back to back (the order alternating), so both see the same load."""
    scripts = HostScripts()
    cycle = _calls(work)
    await host.run(["true"])  # the SSH connection is opened before timing, for both forms
    totals: dict[str, list[float]] = {"old": [], "new": []}
    diffs: list[float] = []
    for r in range(rounds):
        before = _load()
        spent = {"old": 0.0, "new": 0.0}
        for i in range(n):
            name, args, stdin = cycle[i % len(cycle)]
            order = ("old", "new") if i % 2 == 0 else ("new", "old")
            took = {form: await _call(host, form, name, args, stdin, scripts) for form in order}
            for form in order:
                spent[form] += took[form]
            diffs.append(took["new"] - took["old"])
        for form in spent:
            totals[form].append(spent[form])
        print(f"  {label} round {r + 1}: {n} calls old {spent['old'] * 1000:7.0f} ms  new {spent['new'] * 1000:7.0f} ms  ({before} -> {_load()})")
    med = {form: statistics.median(v) for form, v in totals.items()}
    print(
        f"{label}: {n} calls, median of {rounds} rounds: old python -c {med['old'] * 1000:.0f} ms ({med['old'] / n * 1000:.1f} ms/call), "
        f"host scripts {med['new'] * 1000:.0f} ms ({med['new'] / n * 1000:.1f} ms/call); median paired difference new-old "
        f"{statistics.median(diffs) * 1000:+.1f} ms/call; first round (with the {scripts.uploads} uploads) new {totals['new'][0] * 1000:.0f} ms; "
        f"existence checks {scripts.checks}; {_load()}"
    )


async def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calls", type=int, default=20)
    ap.add_argument("--rounds", type=int, default=5)
    a = ap.parse_args()
    cycle = [name for name, _, _ in _calls("/")]
    sizes = ", ".join(f"{name} {len(_old_source(name).encode())} B" for name in cycle)
    print(f"bytes each call puts on the command line the old way: {sizes}; the new way: the path (~60 B)")
    print(f"machine: {os.cpu_count()} cores, {_load()}")
    with tempfile.TemporaryDirectory(prefix="servelab-bench-") as tmp:
        server = start_sshd(Path(tmp) / "sshd")
        os.environ["SERVELAB_SSH_CONFIG"] = str(server.ssh_config)
        os.environ.pop("SSH_AUTH_SOCK", None)
        try:
            for label, host in (
                ("ssh", SshHost(HostConfig(name="bench-ssh", ssh=server.alias, python=PY, workdir=f"{tmp}/ssh-work"))),
                ("local", LocalHost(HostConfig(name="bench-local", python=PY, workdir=f"{tmp}/local-work"))),
            ):
                try:
                    await bench(host, label, a.calls, a.rounds, tmp)
                finally:
                    await host.close()
        finally:
            server.process.terminate()
            server.process.wait(10)


if __name__ == "__main__":
    asyncio.run(main())
