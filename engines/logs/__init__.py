"""Incremental engine-log analysis: lines, stages, state, root cause, hints, noise, spec-decode figures.

Modules:
- ``lines``: :class:`~engines.logs.lines.LineSplitter` (bytes -> numbered, ANSI-free lines and ``\\r``
  updates) and :func:`~engines.logs.lines.classify` (a line's kind, noise kinds a viewer can fold).
- ``grammar``: the shape of an engine's log grammar; the data lives in each adapter
  (``ADAPTER.grammar`` in ``engines/adapters/vllm.py``, ``engines/adapters/sglang.py``).
- ``values``: the typed answers: :class:`~engines.logs.analysis.Analysis` (``to_json()`` is
  ``servelab analyze --json``), ``Stage``, ``Progress``, ``RootCause``, the figures.
- ``analyzer``: :class:`~engines.logs.analyzer.LogAnalyzer` (``feed``/``finish``/``mark_exited``/
  ``snapshot``), built from:
  ``rules`` (the grammar compiled into rules), ``stages`` (the stage timeline), ``series`` (the
  bounded figures series), ``frames`` (a traceback's frame lines read in one regex call).
- ``files``: a whole log at once: ``analyze_bytes``, ``analyze_file``, ``guess_engine``.
- ``prefilter``: which lines reach Python at all (C-speed scans over each chunk).
- ``classify``: what a line is for a viewer (kind codes, progress-bar collapsing, the text it shows),
  block by block, for the dashboard's log view.
- ``ingest``: the dashboard's per-log worker process (classifies, then analyses; its pipe protocol).
- ``rootcause``: per-process traceback segmentation, chains, wrappers, the pick.
- ``hints``: the table of known failures and their one-line next steps.
"""
