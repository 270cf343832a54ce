"""Drafter checks before any load: does this drafter fit this target on this engine version?

Read only small files on the host (configs, safetensors headers, the ``d2t`` map) and the installed
engine's own source, and say in stable codes what would make acceptance collapse or the server die
on its first request. ``findings`` holds the codes, ``facts`` what the files say, ``rules`` what an
engine version accepts (filled by each engine's adapter), ``checks`` the rules themselves and
``run`` the one call preflight and ``servelab drafter`` make.
"""
