"""Training text in the two forms the served model sees: raw text, and chat turns rendered through
the tiny model's chat template.

A chat answer is written the way chat models write: paragraphs unwrapped into single lines and
quoted names in Markdown backticks. Raw text keeps the documentation's hard wrap and quotes. So a
drafter that never saw chat turns meets a layout it was not trained on, as a real one does.
"""

from __future__ import annotations

import random
import re
from collections.abc import Iterator

_QUOTED = re.compile(r'"([A-Za-z_][\w.()]*)"')
_PARA = re.compile(r"\n\s*\n")


def paragraphs(text: str) -> list[str]:
    return [p.strip("\n") for p in _PARA.split(text) if len(p.strip()) > 40]


def chat_style(paragraph: str) -> str:
    """The paragraph as a chat answer: unwrapped, `names` in backticks (code blocks kept as they are)."""
    lines = paragraph.splitlines()
    if any(ln.startswith(("   ", ">>>", "\t")) for ln in lines[1:]):
        return paragraph  # an indented block or example: code stays code
    flat = " ".join(ln.strip() for ln in lines)
    return _QUOTED.sub(r"`\1`", flat)


def chat_turn(user: str, answer: str) -> list[dict[str, str]]:
    return [{"role": "user", "content": user}, {"role": "assistant", "content": answer}]


def chat_examples(texts: tuple[str, ...], seed: int) -> Iterator[list[dict[str, str]]]:
    """From each text: a few (first paragraph -> next paragraphs, chat-styled) conversations."""
    rng = random.Random(seed)
    for text in texts:
        paras = paragraphs(text)
        for i in range(0, max(0, len(paras) - 1), 3):
            ask = paras[i].splitlines()[0].strip()
            answer = "\n\n".join(chat_style(p) for p in paras[i + 1 : i + 3])
            lead = rng.choice(("Explain: ", "Tell me about this: ", "Continue the documentation: ", ""))
            yield chat_turn(lead + ask, answer)
