"""What every GPU of a host holds: the sampler's answers typed, their holders classified, and the
run-level readings (release after a stop, flat memory during a load, peak memory, first allocation).

Textual-free; sits just above ``hosts`` in engines' layers. ``values.py`` holds the types,
``parse.py`` reads ``helpers/gpusample.py``'s JSON lines, ``holders.py`` says whose a process is,
``readings.py`` turns samples over time into figures and hints, ``sample.py`` runs the sampler on a host.
"""
