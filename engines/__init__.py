"""servelab's core: experiments, engine adapters, hosts, runs, log analysis, probe, comparison.

Nothing in this package imports Textual (an import-linter contract and a test enforce it), so every
feature is usable from the command line and from scripts.
"""
