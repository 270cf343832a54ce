"""Errors that reach a user as one clean line, never as a traceback."""

from __future__ import annotations

from dataclasses import dataclass


class ServelabError(Exception):
    """An error whose message is fit to show a user as it is, on one line."""


@dataclass(frozen=True, order=True)
class Problem:
    """One problem found in a definition, printed as ``FILE:LINE: key.path: message``."""

    file: str
    line: int
    path: str
    message: str

    def __str__(self) -> str:
        message = " ".join(self.message.split())
        return f"{self.file}:{self.line}: {self.path}: {message}"
