"""TorchStandIn: stands in for ``python -m vllm.entrypoints.openai.api_server`` on a GPU host where vLLM
is not installed (the `device` tool's H200), for ``bench/gpu_run_device.py``.

A real torch process: it allocates GPU memory in STANDIN_STEPS steps of STANDIN_STEP_GIB GiB,
STANDIN_STEP_S seconds apart, printing vLLM's shard bar after each (``Loading safetensors checkpoint
shards: ...% Completed | n/N``) and appending ``{"step", "t", "allocated"}`` to STANDIN_TRACE, then
serves ``GET /health`` on ``--port`` until SIGTERM.
"""

from __future__ import annotations

import http.server
import json
import os
import sys
import threading
import time


def main(argv: list[str]) -> int:
    import torch

    port = int(argv[argv.index("--port") + 1]) if "--port" in argv else 8000
    steps = int(os.environ.get("STANDIN_STEPS", "4"))
    step = int(float(os.environ.get("STANDIN_STEP_GIB", "2")) * (1 << 30))
    pause = float(os.environ.get("STANDIN_STEP_S", "2"))
    trace = os.environ.get("STANDIN_TRACE")
    print(f"INFO torch stand-in pid {os.getpid()} on {torch.cuda.get_device_name(0)}", flush=True)
    torch.zeros(1, device="cuda")
    torch.cuda.synchronize()
    held = []
    for i in range(steps):
        time.sleep(pause)
        held.append(torch.empty(step, dtype=torch.uint8, device="cuda"))
        torch.cuda.synchronize()
        now = time.time()
        pct = 100 * (i + 1) // steps
        print(f"Loading safetensors checkpoint shards: {pct}% Completed | {i + 1}/{steps} [00:0{i}<00:00,  1.00it/s]", flush=True)
        if trace:
            with open(trace, "a") as f:
                f.write(json.dumps({"step": i + 1, "t": now, "allocated": torch.cuda.memory_allocated()}) + "\n")

    class Health(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200 if self.path == "/health" else 404)
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", port), Health)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    print(f"INFO:     Uvicorn running on http://127.0.0.1:{port} (Press CTRL+C to quit)", flush=True)
    while True:
        time.sleep(3600)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
