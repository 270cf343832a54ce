"""Any bytes in a definition file give clean problem lines, never an exception."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from servelab.engines.catalog.folder import load_file
from tests.conftest import REPO

LINE = re.compile(r"^[^\n]+:\d+: [^\n]+: [^\n]+$")

toml_ish = st.lists(
    st.sampled_from(
        [
            'engine = "vllm"', 'engine = "sglang"', "engine = 3", 'model = "/m"', "port = 99999", "port = 8000",
            "[parallel]", "tensor = 0", "tensor = 8", "[speculative]", 'method = "eagle3"', 'method = "bogus"',
            "num_tokens = -1", 'draft_model = "/d"', "[[patches]]", 'file = "nope.diff"', "[probe]", "repeats = 999",
            "[engine_args]", "x = false", "[env]", "1BAD = 'x'", 'name = "a b"', "[[", "= =", '"unterminated',
            "tags = [1, 2]", 'baseline = "zzz"', "[speculative.extra]", "k = {a = 1}",
        ]
    ),
    max_size=14,
).map(lambda lines: "\n".join(lines).encode())


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.one_of(st.binary(max_size=300), toml_ish))
def test_any_bytes_give_clean_lines(tmp_path: Path, data: bytes) -> None:
    path = tmp_path / "fuzz.toml"
    path.write_bytes(data)
    entry = load_file(path, shown="fuzz.toml")
    if entry.experiment is None:
        assert entry.problems, "a file without an experiment must say why"
    for problem in entry.problems:
        assert LINE.match(str(problem)), str(problem)


def test_cli_check_never_prints_a_traceback(tmp_path: Path) -> None:
    folder = tmp_path / "ex"
    folder.mkdir()
    (folder / "a.toml").write_bytes(b"\x00\xff[[[\n")
    (folder / "b.toml").write_bytes(b'engine = "vllm"\nmodel = 1\n')
    (folder / "hosts.toml").write_bytes(b"[hosts.x]\nssh = 5\n")
    out = subprocess.run([sys.executable, "-m", "servelab", "--dir", str(folder), "check"], capture_output=True, text=True, cwd=REPO)
    assert out.returncode == 1
    assert "Traceback" not in out.stdout + out.stderr
    lines = out.stdout.strip().splitlines()
    assert len(lines) == 3 and all(LINE.match(line) for line in lines)
