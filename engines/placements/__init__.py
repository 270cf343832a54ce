"""Where a run's processes live: one placement per host kind (a process a host's supervisor starts,
a batch job a scheduler starts), behind one protocol (``base.py``), picked once from the host's
``kind``. ``Runs`` asks the placement; it never tests the kind."""
