"""Prompt sets for the probe: a built-in set written for servelab, and Spec-Bench / MT-Bench JSONL.

Acceptance depends heavily on what is asked (code and extraction repeat the prompt, translation
does not), so every set covers several categories and the results record a hash of the exact
prompts, so two runs are only compared when they asked the same things.
"""

from __future__ import annotations

import json
from pathlib import Path

from servelab.engines.errors import ServelabError
from servelab.engines.adapters.exchange import Prompt, PromptSet

#: Categories of the built-in set, in order.
CATEGORIES: tuple[str, ...] = ("conversation", "coding", "math", "extraction", "summarisation", "translation")

_BUILTIN: dict[str, list[str]] = {
    "conversation": [
        "I have a job interview tomorrow for a data engineer role. What should I prepare tonight?",
        "My neighbour's dog barks every night. How do I raise it with them politely?",
    ],
    "coding": [
        "Write a Python function that returns the n-th Fibonacci number iteratively, with a docstring.",
        "Write a Python function is_palindrome(s) that ignores case and punctuation, and two asserts that test it.",
    ],
    "math": [
        "A train travels 180 km in 2.5 hours. What is its average speed in km/h? Show each step.",
        "What is 17 multiplied by 23? Work it out by splitting 23 into 20 and 3.",
    ],
    "extraction": [
        "Extract every name, date and amount from this text as JSON with keys name, date, amount: "
        "'On 3 March 2026 Ada Lovelace paid 120 euros to Charles Babbage; on 5 March Alan Turing paid 80 euros.'",
        "List the programming languages mentioned, one per line: 'The service is written in Go, "
        "its scripts in Python and Bash, and the dashboard in TypeScript with a little Rust.'",
    ],
    "summarisation": [
        "Summarise in two sentences: Speculative decoding lets a small draft model propose several tokens "
        "that the large model then checks in a single forward pass. When the drafts are right, the server "
        "produces several tokens per step; when they are wrong, the extra work is wasted and decoding can "
        "become slower than without speculation.",
        "Summarise in one sentence: The team loaded a one-trillion-parameter model on eight GPUs, which took "
        "twenty-five minutes each time, and every crash during loading cost another attempt.",
    ],
    "translation": [
        "Translate into French: The cat sleeps on the warm windowsill every afternoon.",
        "Translate into German: Please restart the server after the patch has been applied.",
    ],
}


def _user(text: str) -> tuple[dict[str, str], ...]:
    return ({"role": "user", "content": text},)


def builtin(name: str = "mixed") -> PromptSet:
    """``mixed`` (every category) or one category name."""
    cats = CATEGORIES if name == "mixed" else (name,)
    if name != "mixed" and name not in _BUILTIN:
        raise ServelabError(f"unknown built-in prompt set {name!r} (known: mixed, {', '.join(CATEGORIES)})")
    prompts = [
        Prompt(id=f"{cat}-{i + 1}", category=cat, messages=_user(text))
        for cat in cats
        for i, text in enumerate(_BUILTIN[cat])
    ]
    return PromptSet(name=f"builtin:{name}", prompts=tuple(prompts))


def load_jsonl(path: Path, shape: str = "auto") -> PromptSet:
    """A Spec-Bench or MT-Bench ``question.jsonl``: ``{question_id, category, turns: [...]}`` per line.

    Only the first turn is sent: later turns need the model's own first answer in the history,
    which would make the prompts differ between runs. ``prompt`` (a string) is accepted too.
    """
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError as exc:
        raise ServelabError(f"cannot read prompt file {path}: {exc.strerror or exc}") from None
    prompts: list[Prompt] = []
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as exc:
            raise ServelabError(f"{path}:{n}: not JSON ({exc.msg})") from None
        if not isinstance(row, dict):
            raise ServelabError(f"{path}:{n}: expected an object with 'turns'")
        turns = row.get("turns", row.get("prompt"))
        if isinstance(turns, str):
            turns = [turns]
        if not isinstance(turns, list) or not turns or not isinstance(turns[0], str) or not turns[0].strip():
            raise ServelabError(f"{path}:{n}: expected 'turns' as a non-empty list of strings")
        qid = row.get("question_id", row.get("id", n))
        prompts.append(Prompt(id=str(qid), category=str(row.get("category", "unknown")), messages=_user(turns[0])))
    if not prompts:
        raise ServelabError(f"{path}: no prompts")
    label = "specbench" if shape == "auto" else shape
    return PromptSet(name=f"{label}:{path.name}", prompts=tuple(prompts))


def load(spec: str, base: Path | None = None) -> PromptSet:
    """Resolve a ``[probe] prompts`` value: ``builtin:NAME``, ``specbench:PATH``, ``mtbench:PATH`` or ``PATH.jsonl``.

    Relative paths are relative to ``base`` (the experiments folder).
    """
    kind, sep, rest = spec.partition(":")
    if sep and kind == "builtin":
        return builtin(rest or "mixed")
    if sep and kind in ("specbench", "mtbench"):
        path, shape = Path(rest), kind
    elif spec.endswith(".jsonl"):
        path, shape = Path(spec), "auto"
    else:
        raise ServelabError(f"prompt set {spec!r}: use builtin:NAME, specbench:PATH, mtbench:PATH or a .jsonl file")
    path = path.expanduser()
    if not path.is_absolute() and base is not None:
        path = base / path
    return load_jsonl(path, shape)
