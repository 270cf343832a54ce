"""Prompt sets: the built-in categories, JSONL loaders, and a hash that changes with the prompts."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from servelab.engines.errors import ServelabError
from servelab.engines.probe import prompts


def test_builtin_mixed_covers_every_category() -> None:
    ps = prompts.builtin("mixed")
    assert {p.category for p in ps.prompts} == set(prompts.CATEGORIES)
    assert len({p.id for p in ps.prompts}) == len(ps)
    assert all(p.messages[0]["role"] == "user" and p.text for p in ps.prompts)


def test_hash_is_stable_and_tracks_content() -> None:
    assert prompts.builtin("mixed").hash == prompts.builtin("mixed").hash
    assert prompts.builtin("mixed").hash != prompts.builtin("coding").hash


def test_specbench_jsonl_first_turn_only(tmp_path: Path) -> None:
    f = tmp_path / "question.jsonl"
    rows = [
        {"question_id": 81, "category": "writing", "turns": ["Write a haiku.", "Now rewrite it."]},
        {"question_id": 161, "category": "translation", "turns": ["Translate German to English: Hallo Welt"]},
    ]
    f.write_text("\n".join(json.dumps(r) for r in rows) + "\n\n")
    ps = prompts.load(f"specbench:{f.name}", base=tmp_path)
    assert [p.id for p in ps.prompts] == ["81", "161"]
    assert ps.prompts[0].text == "Write a haiku."
    assert ps.prompts[1].category == "translation"
    f2 = tmp_path / "other.jsonl"
    rows[0]["turns"] = ["Write a limerick."]
    f2.write_text("\n".join(json.dumps(r) for r in rows))
    assert prompts.load(str(f2)).hash != ps.hash


@pytest.mark.parametrize(
    "content, message",
    [
        ("not json\n", "not JSON"),
        ('{"question_id": 1, "turns": []}\n', "non-empty list"),
        ("[1, 2]\n", "expected an object"),
        ("\n", "no prompts"),
    ],
)
def test_bad_jsonl_is_one_clean_line(tmp_path: Path, content: str, message: str) -> None:
    f = tmp_path / "q.jsonl"
    f.write_text(content)
    with pytest.raises(ServelabError, match=message) as info:
        prompts.load(str(f))
    assert "\n" not in str(info.value)


def test_unknown_spec_and_missing_file() -> None:
    with pytest.raises(ServelabError, match="builtin:NAME"):
        prompts.load("whatever")
    with pytest.raises(ServelabError, match="unknown built-in"):
        prompts.load("builtin:poetry")
    with pytest.raises(ServelabError, match="cannot read"):
        prompts.load("mtbench:/nonexistent/q.jsonl")
