"""Who launched a run, and which runs a dashboard acts on by itself.

Every run records its owner in ``run.json`` (``RunRecord.launched_by``, ``launched_from``,
``servelab_instance``): the user and the machine servelab ran as and on when it launched the run, and
the id of that servelab process (a dashboard or a CLI call; ``this_instance``). On a shared host
every screen and command shows it; a dashboard's automatic actions (the probe on ready, the bell, the
ready and crash toasts, the rehearsal prompt) apply only to its own user's runs that are not
rehearsals (:func:`acts_on`), so a colleague's benchmark gets no extra load from each dashboard
watching it.
"""

from __future__ import annotations

import getpass
import os
import secrets
import socket
from dataclasses import dataclass
from typing import Protocol

_INSTANCE = secrets.token_hex(4)


@dataclass(frozen=True)
class Owner:
    """Who a servelab process runs as: user, machine, and this process's instance id."""

    user: str
    machine: str
    instance: str = ""

    @property
    def label(self) -> str:
        """``alice@laptop`` ("" when unknown: a run recorded before owners were)."""
        if not self.user:
            return ""
        return f"{self.user}@{self.machine}" if self.machine else self.user


def this_instance() -> str:
    """This servelab process's id (random, made once per process)."""
    return _INSTANCE


def me() -> Owner:
    """The user and machine this servelab runs as, with its instance id."""
    try:
        user = getpass.getuser()
    except (KeyError, OSError):  # no passwd entry and no LOGNAME/USER: the uid is still a name
        user = str(os.getuid())
    return Owner(user, socket.gethostname(), _INSTANCE)


class Owned(Protocol):
    """What :func:`acts_on` reads of a run (``RunRecord`` has these)."""

    launched_by: str
    rehearsal: bool


def is_mine(run: Owned, who: Owner) -> bool:
    """The run is ``who``'s user's; a run recorded before owners were (no user) counts as everyone's."""
    return not run.launched_by or run.launched_by == who.user


def acts_on(run: Owned, who: Owner) -> bool:
    """A dashboard of ``who`` acts on this run by itself (probe on ready, bell, toast): it is its own
    user's and not a rehearsal (a rehearsal's ready is the rehearsal's own business)."""
    return is_mine(run, who) and not run.rehearsal
