"""The suite's port helper (tests/fixtures/ports.py): what every server fixture relies on."""

from __future__ import annotations

import socket
import subprocess
import sys

from tests.conftest import REPO
from tests.fixtures.ports import STRIDE, _ephemeral_low, free_port, free_ports

TAKE = "from tests.fixtures.ports import free_port\nprint(' '.join(str(free_port()) for _ in range(40)))"


def test_ports_handed_to_two_processes_at_once_never_meet_and_avoid_the_ephemeral_range() -> None:
    procs = [subprocess.Popen([sys.executable, "-c", TAKE], cwd=REPO, stdout=subprocess.PIPE, text=True) for _ in range(2)]
    got = [set(map(int, p.communicate(timeout=60)[0].split())) for p in procs]
    assert all(p.returncode == 0 for p in procs)
    assert len(got[0]) == len(got[1]) == 40
    assert not got[0] & got[1]
    assert all(port < _ephemeral_low() for port in got[0] | got[1])


def test_a_port_something_listens_on_is_stepped_over() -> None:
    with socket.socket() as held:
        held.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        start = free_port() + 1
        held.bind(("127.0.0.1", start))
        held.listen()
        ports = free_ports(3)
        assert start not in ports
        assert ports == list(range(ports[0], ports[0] + 3))


def test_the_ports_right_above_each_handout_are_left_for_what_servelab_picks_beside_it() -> None:
    """A rehearsal takes the first free port above its experiment's, a Ray client server the one
    above the head's: no other test is handed those."""
    first = free_ports(2)
    after = [free_port() for _ in range(4)]
    assert after[0] - first[-1] >= STRIDE
    assert all(b - a >= STRIDE for a, b in zip(after, after[1:]))
