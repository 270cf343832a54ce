"""Installed, servelab takes one top-level import name: ``servelab`` (``servelab.engines``, ``servelab.tui``)."""

from __future__ import annotations

import subprocess
import sys
import sysconfig
import venv
import zipfile
from pathlib import Path

from tests.conftest import REPO


def test_the_wheel_installs_as_one_package_named_servelab(tmp_path: Path) -> None:
    wheels = tmp_path / "wheels"
    built = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--disable-pip-version-check", "-w", str(wheels), str(REPO)],
        capture_output=True, text=True, timeout=300,
    )
    assert built.returncode == 0, built.stderr
    (wheel,) = wheels.glob("servelab-*.whl")
    with zipfile.ZipFile(wheel) as zf:
        names = zf.namelist()
        (top_level,) = [n for n in names if n.endswith(".dist-info/top_level.txt")]
        assert zf.read(top_level).decode().split() == ["servelab"]
    assert {n.split("/")[0] for n in names if not n.split("/")[0].endswith(".dist-info")} == {"servelab"}
    assert "servelab/engines/helpers/runctl.py" in names and "servelab/tui/app.tcss" in names

    env_dir = tmp_path / "fresh"
    venv.EnvBuilder(with_pip=True).create(env_dir)
    python = env_dir / "bin" / "python"
    installed = subprocess.run([python, "-m", "pip", "install", "-q", "--no-deps", "--disable-pip-version-check", str(wheel)],
                               capture_output=True, text=True, timeout=300)
    assert installed.returncode == 0, installed.stderr
    # The dependencies come from this environment's site-packages (on PYTHONPATH, so its .pth files,
    # the editable install among them, are not read): servelab itself is the wheel's copy.
    deps = sysconfig.get_paths()["purelib"]
    env = {"PATH": f"{env_dir / 'bin'}:/usr/bin:/bin", "PYTHONPATH": deps}
    where = subprocess.run([python, "-c", "import servelab.engines, servelab.tui; print(servelab.__file__)"],
                           capture_output=True, text=True, cwd=tmp_path, env=env, timeout=60)
    assert where.returncode == 0, where.stderr
    assert Path(where.stdout.strip()).is_relative_to(env_dir), where.stdout
    helped = subprocess.run([env_dir / "bin" / "servelab", "--help"], capture_output=True, text=True, cwd=tmp_path, env=env, timeout=60)
    assert helped.returncode == 0, helped.stderr
    assert helped.stdout.startswith("usage: servelab"), helped.stdout
    for name in ("engines", "tui"):
        gone = subprocess.run([python, "-c", f"import {name}"], capture_output=True, text=True, cwd=tmp_path, env=env, timeout=60)
        assert gone.returncode != 0, f"{name} is importable: it is not servelab's to take"
