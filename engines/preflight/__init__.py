"""Preflight: what can fail before a model load, checked in seconds on the host, and its cache."""
