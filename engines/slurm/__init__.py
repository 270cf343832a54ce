"""Slurm as a host kind: a run is a batch job servelab submitted (``kind = "slurm"`` in hosts.toml).

One idea per module: ``values.py`` (Slurm's job states and a job as ``scontrol`` shows it),
``states.py`` (the one mapping from Slurm's view to servelab's words), ``script.py`` (the job
script servelab writes), ``control.py`` (sbatch / scancel / scontrol on the login node, argv only).
"""
