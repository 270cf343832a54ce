"""The run lifecycle: the Runs manager (the one place a run id is resolved), a run's record and state, its watch, history, load time and rehearsal."""
