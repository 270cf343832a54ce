"""StubEngine's stand-in for vLLM's CLI, ``python -m vllm.entrypoints.cli.main``: ``--version`` (the
worker node's own check) and ``serve ... --headless`` (a multi-node worker: the same StubEngine,
serving no HTTP, as a headless vLLM serves none). A headless worker takes ``STUB_HEADLESS_<NAME>``
for ``STUB_<NAME>`` where set (one experiment's ``[env]``, a worker that behaves apart from its head)."""

from __future__ import annotations

import os
import sys

from vllm.entrypoints.openai import api_server


def main() -> int:
    argv = sys.argv[1:]
    if argv[:1] == ["--version"]:
        print("0.32.0+stub")
        return 0
    if "--headless" in argv:
        os.environ.pop("STUB_HTTP", None)
        for key, value in list(os.environ.items()):
            if key.startswith("STUB_HEADLESS_"):
                os.environ["STUB_" + key.removeprefix("STUB_HEADLESS_")] = value
    sys.argv = [sys.argv[0], *(argv[1:] if argv[:1] == ["serve"] else argv)]
    return api_server.main()


if __name__ == "__main__":
    sys.exit(main())
