"""A short mutation pass over the verdict's figures (issue #32): change one formula, run the tests
that should notice, and print whether they did (killed) or not (survived).

    .venv/bin/python bench/mutations.py

Each mutation is applied to the source file in place and always restored afterwards.
"""

from __future__ import annotations

import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
TESTS = [t for t in ("tests/test_verdict_arithmetic.py", "tests/test_compare.py", "tests/test_probe_stats.py") if t not in sys.argv[1:]]


@dataclass(frozen=True)
class Mutation:
    name: str
    file: str
    before: str
    after: str


MUTATIONS = (
    Mutation("band as a plain sum of relative MADs", "engines/probe/speedup.py",
             "rel = math.sqrt((rd / r) ** 2 + (bd / b) ** 2)", "rel = (rd / r) + (bd / b)"),
    Mutation("band without the MAD-to-sigma factor", "engines/probe/speedup.py",
             "MAD_TO_SIGMA * rel * value", "rel * value"),
    Mutation("'helps' without the band", "engines/probe/speedup.py",
             "if self.value - self.band > HELPS_ABOVE:", "if self.value > HELPS_ABOVE:"),
    Mutation("'hurts' without the band", "engines/probe/speedup.py",
             "if self.value + self.band < HURTS_BELOW:", "if self.value < HURTS_BELOW:"),
    Mutation("speedup inverted", "engines/probe/speedup.py", "value = r / b", "value = b / r"),
    Mutation("acceptance length without the bonus token", "engines/adapters/vllm.py",
             "length=1.0 + accepted / drafts,", "length=accepted / drafts,"),
    Mutation("acceptance rate over drafts, not draft tokens", "engines/adapters/vllm.py",
             "rate=accepted / draft_tokens if draft_tokens > 0 else None,", "rate=accepted / drafts if drafts > 0 else None,"),
    Mutation("per-position over draft tokens", "engines/adapters/vllm.py",
             "per_pos = [(p1[k] - p0.get(k, 0.0)) / drafts for k in positions]", "per_pos = [(p1[k] - p0.get(k, 0.0)) / draft_tokens for k in positions]"),
    Mutation("MAD as a mean deviation", "engines/probe/stats.py",
             "return median([abs(v - m) for v in values])", "return sum(abs(v - m) for v in values) / len(values)"),
)


def main() -> int:
    survived = 0
    for m in MUTATIONS:
        path = REPO / m.file
        original = path.read_text()
        if original.count(m.before) != 1:
            print(f"?        {m.name}: the line to change is not in {m.file} once")
            survived += 1
            continue
        try:
            path.write_text(original.replace(m.before, m.after))
            done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", *TESTS], cwd=REPO, capture_output=True, text=True)
        finally:
            path.write_text(original)
        killed = done.returncode != 0
        survived += not killed
        print(f"{'killed  ' if killed else 'SURVIVED'} {m.name}")
    print(f"{len(MUTATIONS) - survived}/{len(MUTATIONS)} mutations killed")
    return 1 if survived else 0


if __name__ == "__main__":
    sys.exit(main())
