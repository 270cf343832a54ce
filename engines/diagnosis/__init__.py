"""Why acceptance is what it is: a short probe suite after the load, ranked findings, next settings.

``measure`` talks to the running server (acceptance arms), ``curve`` reads the per-position
shape and the cost of a step, ``degenerate`` spots looping output, ``reference`` holds published
figures, ``rules`` turns measurements into ranked findings, ``artifacts`` runs it on a run and
keeps ``diagnosis.json`` beside ``probe.json``, ``verdict`` words it for compare.
"""
