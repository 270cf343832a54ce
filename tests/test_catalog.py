"""The experiments folder: bundled definitions load, and every kind of broken file gives FILE:LINE problems."""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path

import pytest

from servelab.engines.catalog.folder import check, load_catalog, load_file
from servelab.engines.errors import ServelabError
from tests.conftest import EXPERIMENTS

LINE = re.compile(r"^[^:]+:\d+: [^:]+: .+$")


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    """A writable copy of the bundled experiments."""
    dst = tmp_path / "experiments"
    shutil.copytree(EXPERIMENTS, dst)
    return dst


def write(folder: Path, name: str, text: str) -> Path:
    path = folder / name
    path.write_text(text)
    return path


def problems_for(folder: Path, name: str) -> list[str]:
    _, problems = check(folder, [name])
    return [str(p) for p in problems]


def test_bundled_experiments_are_valid() -> None:
    cat, problems = check(EXPERIMENTS)
    assert problems == []
    names = {e.name for e in cat.experiments}
    assert names == {
        "kimi-k25-vllm-baseline",
        "kimi-k25-vllm-eagle3",
        "kimi-k25-sglang-eagle3",
        "tiny-cpu-sglang-baseline",
        "tiny-cpu-sglang-2node",
        "tiny-cpu-vllm-baseline",
        "tiny-cpu-vllm-ngram",
        "tiny-cpu-vllm-trained",
        "tiny-cpu-vllm-eagle3",
        "tiny-cpu-vllm-draft",
    }


def test_name_defaults_to_stem(folder: Path) -> None:
    write(folder, "plain.toml", 'engine = "vllm"\nmodel = "/m"\n')
    assert load_catalog(folder).get("plain").name == "plain"


def test_unknown_key_has_its_line(folder: Path) -> None:
    write(folder, "typo.toml", 'engine = "vllm"\nmodel = "/m"\n\n[parallel]\ntensr = 8\n')
    (line,) = problems_for(folder, "typo")
    assert line == "experiments/typo.toml:5: parallel.tensr: unknown key" or line.endswith(":5: parallel.tensr: unknown key")


def test_toml_syntax_error_points_at_line(folder: Path) -> None:
    write(folder, "broken.toml", 'engine = "vllm"\nmodel = "/m"\nport = 80 80\n')
    (line,) = problems_for(folder, "broken")
    assert ":3: <toml>:" in line


def test_missing_patch_file(folder: Path) -> None:
    write(folder, "p.toml", 'engine = "vllm"\nmodel = "/m"\n\n[[patches]]\nfile = "patches/nope.diff"\n')
    (line,) = problems_for(folder, "p")
    assert ":5: patches[0].file: patch file not found" in line


def test_speculative_method_without_drafter(folder: Path) -> None:
    write(folder, "s.toml", 'engine = "vllm"\nmodel = "/m"\n[speculative]\nmethod = "eagle3"\nnum_tokens = 3\n')
    (line,) = problems_for(folder, "s")
    assert "speculative" in line and "needs draft_model" in line and ":3:" in line


def test_baseline_missing_and_other_model(folder: Path) -> None:
    write(folder, "a.toml", 'engine = "vllm"\nmodel = "/m"\nbaseline = "ghost"\n')
    write(folder, "b.toml", 'engine = "vllm"\nmodel = "/other"\nbaseline = "tiny-cpu-vllm-baseline"\n')
    assert any("baseline 'ghost' is not an experiment" in p for p in problems_for(folder, "a"))
    assert any(":3: baseline:" in p and "runs another model" in p for p in problems_for(folder, "b"))


def test_duplicate_names(folder: Path) -> None:
    write(folder, "dup.toml", 'name = "tiny-cpu-vllm-ngram"\nengine = "vllm"\nmodel = "/m"\n')
    _, problems = check(folder)
    assert any(p.path == "name" and "duplicate name" in p.message for p in problems)


def test_unknown_engine_and_host(folder: Path) -> None:
    write(folder, "e.toml", 'engine = "tgi"\nmodel = "/m"\n')
    write(folder, "h.toml", 'engine = "vllm"\nmodel = "/m"\nhost = "nowhere"\n')
    assert any(":1: engine: unknown engine 'tgi'" in p for p in problems_for(folder, "e"))
    assert any(":3: host: unknown host 'nowhere'" in p for p in problems_for(folder, "h"))


def test_inexpressible_setting_is_an_error(folder: Path) -> None:
    # SGLang has no prompt-lookup window; vLLM cannot size expert parallelism independently.
    write(folder, "g.toml", 'engine = "sglang"\nmodel = "/m"\n[speculative]\nmethod = "ngram"\nnum_tokens = 4\nprompt_lookup_max = 3\n')
    write(folder, "v.toml", 'engine = "vllm"\nmodel = "/m"\n[parallel]\ntensor = 4\nexpert = 3\n')
    assert any("sglang:" in p and "prompt-lookup" in p for p in problems_for(folder, "g"))
    assert any(":5: parallel.expert: vllm:" in p for p in problems_for(folder, "v"))


def test_managed_flag_in_engine_args(folder: Path) -> None:
    write(folder, "m.toml", 'engine = "vllm"\nmodel = "/m"\n[engine_args]\ntensor-parallel-size = 8\n')
    assert any("engine_args.tensor-parallel-size" in p and "parallel.tensor" in p for p in problems_for(folder, "m"))


def test_non_utf8_file(folder: Path) -> None:
    (folder / "bin.toml").write_bytes(b'engine = "vllm"\nmodel = "\xff\xfe"\n')
    (line,) = problems_for(folder, "bin")
    assert ":2: <file>: not UTF-8" in line


def test_every_problem_line_has_the_format(folder: Path) -> None:
    write(folder, "x.toml", "[[patches]]\nfile = 3\n[probe]\nrepeats = 0\n")
    lines = problems_for(folder, "x")
    assert len(lines) >= 3
    assert all(LINE.match(line) and "\n" not in line for line in lines)


def test_get_unknown_is_one_line_error() -> None:
    with pytest.raises(ServelabError, match="no experiment named 'nope'"):
        load_catalog(EXPERIMENTS).get("nope")


def test_missing_folder_is_one_line_error(tmp_path: Path) -> None:
    with pytest.raises(ServelabError, match="experiments folder not found"):
        load_catalog(tmp_path / "absent")


def test_local_relative_paths_resolve_against_the_folder() -> None:
    cat = load_catalog(EXPERIMENTS)
    exp = cat.get("tiny-cpu-vllm-ngram")
    spec = cat.launch_spec(exp)
    # the venv's own python (a symlink), not the base interpreter it points to
    assert spec.argv[0] == os.path.normpath(EXPERIMENTS.parent.absolute() / ".venv-engine/bin/python")
    assert spec.argv[spec.argv.index("--model") + 1] == str((EXPERIMENTS.parent / ".models/tiny-llama").resolve())


def test_remote_host_paths_are_kept_verbatim() -> None:
    cat = load_catalog(EXPERIMENTS)
    spec = cat.launch_spec(cat.get("kimi-k25-vllm-eagle3"))
    assert spec.argv[0] == "/root/ml-env/bin/python3"
    assert spec.env["CUDA_VISIBLE_DEVICES"] == "0,1,2,3,4,5,6,7"


def test_load_file_unreadable(tmp_path: Path) -> None:
    entry = load_file(tmp_path / "gone.toml")
    assert entry.experiment is None and "cannot read" in str(entry.problems[0])
