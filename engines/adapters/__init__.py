"""The engine adapters: one module per engine (its command line, log grammar and metrics reading),
with its host-side argument check (``<engine>_argcheck.py``) and its drafter rules
(``<engine>_drafter.py``) beside it; ``server_flags.py`` is the part of a server command line
every adapter writes the same way. The protocol and the registry are ``engines/adapters/base.py``."""
