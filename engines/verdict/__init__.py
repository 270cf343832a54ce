"""The verdict between runs: compare, the comparability of two servers' settings and the aligned twin."""
