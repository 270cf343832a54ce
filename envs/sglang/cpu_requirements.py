"""Write the CPU-importable part of sglang's runtime dependencies, pinned as its wheel pins them.

Run with the SGLang venv's python after `pip install --no-deps sglang`: it reads the installed wheel's
METADATA (Requires-Dist), keeps only the packages that import on a CPU-only machine, and prints one
requirement per line with SGLang's own specifier. The CUDA-only ones (flashinfer, sglang-kernel,
cuda-python, deep-ep, ...) are left out on purpose; servelab's fake sgl_kernel stands in for the one
module SGLang's CPU path imports.
"""

from __future__ import annotations

import re
import sys
from importlib.metadata import requires

# Names as they appear in sglang's Requires-Dist, normalised (PEP 503). datasets: sglang.bench_serving
# imports it at module load (for MMMU), and the probe is checked against bench_serving.
CPU_IMPORTABLE = {
    "aiohttp", "anthropic", "apache-tvm-ffi", "blobfile", "compressed-tensors", "datasets", "distro", "easydict",
    "einops", "fastapi", "gguf", "interegular", "ipython", "llguidance", "mistral-common", "msgspec",
    "numba", "numpy", "nvidia-ml-py", "openai", "openai-harmony", "orjson", "packaging",
    "partial-json-parser", "pillow", "prometheus-client", "psutil", "pybase64", "pydantic",
    "python-dateutil", "python-multipart", "pyzmq", "regex", "requests", "scipy", "sentencepiece",
    "setproctitle", "soundfile", "tiktoken", "tokenizers", "tqdm", "transformers", "uvicorn", "uvloop",
    "watchfiles", "xgrammar", "xxhash", "zstandard",
}
# Imported by sglang but not declared in its METADATA (triton: imported unconditionally; dill: by its
# multiprocessing helpers).
UNDECLARED = ["triton", "dill"]


def _normalise(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def main() -> int:
    lines: list[str] = []
    for req in requires("sglang") or []:
        if ";" in req:  # markers: platform-only or extras, none of them CPU runtime deps on x86_64
            continue
        name = re.split(r"[\s<>=!~\[]", req, maxsplit=1)[0]
        if _normalise(name) in CPU_IMPORTABLE:
            lines.append(req.strip())
    missing = CPU_IMPORTABLE - {_normalise(re.split(r"[\s<>=!~\[]", r, maxsplit=1)[0]) for r in lines}
    if missing:
        print(f"sglang METADATA no longer lists: {', '.join(sorted(missing))}", file=sys.stderr)
        return 1
    print("\n".join(lines + UNDECLARED))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
