"""Run on a node of a Ray run before anything starts (``python raycheck.py ADDRESS PORT...``):
Ray must be importable by the engine's interpreter, and the head's ports must be free on its
address. A failure is one stderr line and exit code 1; standard library and Ray only.
"""

import socket, sys
try:
    import ray
except ImportError as exc:
    sys.exit(f"ray is not importable by {sys.executable}: {exc}")
addr = sys.argv[1]
for port in sys.argv[2:]:
    s = socket.socket()
    try:
        s.bind((addr, int(port)))
    except OSError as exc:
        sys.exit(f"port {port} on {addr} is taken ({exc.strerror}): another Ray cluster or server holds it, "
                 "and servelab never touches what it did not start; set another [multinode] ray_port")
    finally:
        s.close()
print("ray", ray.__version__)
