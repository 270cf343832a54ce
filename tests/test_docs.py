"""The user documentation (README.md, DEVELOPERS.md, docs/*.md) says only what exists.

- every relative link points at a file of the repository, and its anchor (if any) at a heading there;
- every ``servelab WORD`` written as code (a code span or a code-block line) names a real command of
  the CLI's parser (``tui/cli.py:build_parser``), and ``servelab campaign WORD`` a real verb;
- every key of a TOML code block in docs/experiments.md is a key the experiment model
  (``engines/catalog/experiment.py``) accepts, and a block that is a whole experiment validates;
- every drafter-check code and every diagnosis finding code is on its page.
No server, no host: it reads files and builds the parser.
"""

from __future__ import annotations

import argparse
import re
import tomllib
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from servelab.engines.diagnosis.verdict import CAUSES
from servelab.engines.drafter.findings import CODES
from servelab.engines.catalog.experiment import Experiment
from servelab.tui.cli import build_parser

REPO = Path(__file__).resolve().parents[1]
DOCS = REPO / "docs"
PAGES = [REPO / "README.md", REPO / "DEVELOPERS.md", *sorted(DOCS.glob("*.md"))]

LINK = re.compile(r"(?<!\\)\[[^\]]*\]\(([^)\s]+)\)")
FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.S | re.M)
SPAN = re.compile(r"`([^`\n]+)`")
COMMAND = re.compile(r"(?:^|\s)servelab\s+([a-z][a-z-]*)(?:\s+([a-z][a-z-]*))?")


def _ids(path: Path) -> str:
    return str(path.relative_to(REPO))


def slug(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped, spaces to dashes."""
    text = re.sub(r"[`*_]", "", heading.strip().lower())
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    text = FENCE.sub("", path.read_text(encoding="utf-8"))
    return {slug(m.group(1)) for m in re.finditer(r"^#{1,6}\s+(.*)$", text, re.M)}


def code_parts(text: str) -> list[str]:
    """The lines of every code block and every code span outside them."""
    blocks = [m.group(2) for m in FENCE.finditer(text)]
    rest = FENCE.sub("", text)
    return [line for block in blocks for line in block.splitlines()] + SPAN.findall(rest)


def test_the_pages_exist() -> None:
    for name in ("experiments", "campaigns", "hosts", "multinode", "drafters", "diagnosis", "probe", "logs", "cli", "dashboard"):
        assert (DOCS / f"{name}.md").is_file(), name
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    for page in sorted(DOCS.glob("*.md")):
        assert f"(docs/{page.name})" in readme, f"README.md does not link {page.name}"


@pytest.mark.parametrize("page", PAGES, ids=_ids)
def test_relative_links_point_at_files_and_anchors(page: Path) -> None:
    text = page.read_text(encoding="utf-8")
    bad: list[str] = []
    for target in LINK.findall(FENCE.sub("", text)):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto:
            continue
        file, _, anchor = target.partition("#")
        dest = (page.parent / file).resolve() if file else page
        if not dest.exists() or REPO not in dest.parents and dest != REPO:
            bad.append(f"{target}: no such file")
        elif anchor and (dest.suffix != ".md" or anchor not in anchors(dest)):
            bad.append(f"{target}: no heading #{anchor} in {dest.name}")
    assert not bad, f"{_ids(page)}: {bad}"


def _subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def test_every_servelab_command_named_is_real() -> None:
    commands = _subcommands(build_parser())
    assert {"launch", "campaign", "dashboard"} <= set(commands)  # the parser is read the way it is built
    verbs = {name: set(_subcommands(sub)) for name, sub in commands.items()}
    named: set[str] = set()
    bad: list[str] = []
    for page in PAGES:
        for part in code_parts(page.read_text(encoding="utf-8")):
            for m in COMMAND.finditer(part):
                word, second = m.group(1), m.group(2)
                named.add(word)
                if word not in commands:
                    bad.append(f"{_ids(page)}: servelab {word}")
                elif verbs.get(word) and second is not None and second not in verbs[word]:
                    bad.append(f"{_ids(page)}: servelab {word} {second}")
    assert not bad, bad
    assert set(commands) <= named, f"commands no page names: {sorted(set(commands) - named)}"


def _keys_accepted(model: type[BaseModel], data: dict[str, Any], at: str) -> list[str]:
    """Keys of ``data`` the model has no field for (tables of free keys, such as engine_args, take any)."""
    bad: list[str] = []
    for key, value in data.items():
        field = model.model_fields.get(key)
        if field is None:
            bad.append(f"{at}{key}")
            continue
        sub = field.annotation
        if isinstance(sub, type) and issubclass(sub, BaseModel):
            rows = value if isinstance(value, list) else [value]
            for row in rows:
                if isinstance(row, dict):
                    bad += _keys_accepted(sub, row, f"{at}{key}.")
        else:
            args = getattr(sub, "__args__", ())
            inner = next((a for a in args if isinstance(a, type) and issubclass(a, BaseModel)), None)
            if inner is not None:
                for row in value if isinstance(value, list) else [value]:
                    if isinstance(row, dict):
                        bad += _keys_accepted(inner, row, f"{at}{key}.")
    return bad


def toml_blocks(page: Path) -> list[dict[str, Any]]:
    return [tomllib.loads(m.group(2)) for m in FENCE.finditer(page.read_text(encoding="utf-8")) if m.group(1) == "toml"]


@pytest.mark.parametrize("page", [DOCS / "experiments.md", DOCS / "multinode.md", DOCS / "probe.md"], ids=_ids)
def test_experiment_keys_in_toml_blocks_are_accepted(page: Path) -> None:
    blocks = toml_blocks(page)
    assert blocks, f"{_ids(page)} has no TOML block"
    for data in blocks:
        assert not _keys_accepted(Experiment, data, ""), _keys_accepted(Experiment, data, "")
        if "engine" in data and "model" in data:  # a whole experiment: the model takes it as written
            Experiment.model_validate({"name": "example", **data})


def test_the_key_checker_refuses_a_typo() -> None:
    assert _keys_accepted(Experiment, {"parallel": {"tensr": 8}, "probe": {"max_tokens": 1}}, "") == ["parallel.tensr"]
    assert _keys_accepted(Experiment, {"engine_args": {"anything-goes": 1}}, "") == []


def test_every_experiment_key_is_documented() -> None:
    """Each field of the experiment model is named as code on its page (a key added to the model
    without a line in the reference fails here)."""
    from servelab.engines.catalog.experiment import MultiNode, Parallel, ProbeSettings, Speculative

    pages = {
        "experiments.md": (Experiment, Parallel, Speculative),
        "probe.md": (ProbeSettings,),
        "multinode.md": (MultiNode,),
    }
    missing: list[str] = []
    for name, models in pages.items():
        spans = set(SPAN.findall((DOCS / name).read_text(encoding="utf-8")))
        for model in models:
            missing += [f"{name}: {model.__name__}.{key}" for key in model.model_fields if not spans & {key, f"[{key}]", f"[[{key}]]", f"[{model.__name__.lower()}.{key}]"}]
    assert not missing, missing


def test_every_drafter_code_and_finding_code_is_documented() -> None:
    drafters = (DOCS / "drafters.md").read_text(encoding="utf-8")
    assert [c for c in CODES if f"`{c}`" not in drafters] == []
    diagnosis = (DOCS / "diagnosis.md").read_text(encoding="utf-8")
    findings = set(CAUSES) - {"slower-than-baseline"}  # a verdict's cause, not a finding of the rules
    rules = (REPO / "engines" / "diagnosis" / "rules.py").read_text(encoding="utf-8")
    findings |= set(re.findall(r'Finding\(\s*"([a-z0-9-]+)"', rules))
    assert findings and [c for c in sorted(findings) if f"`{c}`" not in diagnosis] == []


def test_the_screen_captures_in_docs_are_the_snapshots_the_suite_checks() -> None:
    """docs/img/screens/: the experiments, run, compare and diagnosis screens at 80x24 and 120x36,
    copies of tests/test_tui_snapshots.py's snapshots (``docs/capture.py --screens``): a copy that
    differs from its snapshot is a stale picture."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("capture", REPO / "docs" / "capture.py")
    assert spec is not None and spec.loader is not None
    capture = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(capture)
    pairs = capture.screen_captures()
    assert len(pairs) == 8
    stale = [str(out.relative_to(REPO)) for out, snapshot in pairs.items() if not out.exists() or out.read_bytes() != snapshot.read_bytes()]
    assert not stale, f"run docs/capture.py --screens: {stale}"
