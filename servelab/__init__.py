"""servelab: one import name for the whole program.

The core lives in ``engines/`` and the face in ``tui/`` at the top of the repository; this package
names them ``servelab.engines`` and ``servelab.tui`` (the two folders are linked here), so installed,
servelab occupies the single top-level name ``servelab``.
"""
