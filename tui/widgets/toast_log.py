"""The notifications a dashboard has shown (the palette's "Notifications": read them again): each toast's time, title, words
and severity, the newest :data:`KEEP` of them, kept by the app as it shows them."""

from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass

#: Toasts kept to read again.
KEEP = 200


@dataclass(frozen=True)
class Toast:
    at: str  # the local time it was shown (HH:MM:SS)
    title: str
    message: str
    severity: str


class ToastLog:
    """The app's record of its toasts, oldest first."""

    def __init__(self, keep: int = KEEP) -> None:
        self.items: deque[Toast] = deque(maxlen=keep)

    def add(self, message: str, title: str, severity: str) -> None:
        self.items.append(Toast(time.strftime("%H:%M:%S"), title, message, severity))

    def newest_first(self) -> list[Toast]:
        return list(reversed(self.items))
