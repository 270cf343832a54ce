"""Incremental engine-log analysis: lines, stages, state, root cause, hints, noise, spec-decode figures.

``lines`` splits raw bytes into lines; ``analyzer`` builds an :class:`~engines.logs.analyzer.Analysis`
from them using the grammar that each engine adapter carries (``ADAPTER.grammar``).
"""
