"""Campaign plans: one test per rule (load sharing, K translation, links, exclusions, checks)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from servelab.engines.campaign.check import check_campaign, load_checked
from servelab.engines.campaign.definition import load_campaign
from servelab.engines.campaign.plan import plan, serve_key
from servelab.engines.catalog.folder import load_catalog
from servelab.engines.errors import ServelabError
from tests.conftest import EXPERIMENTS, REPO, suite_home_env


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    """A copy of the bundled experiments with an empty campaigns folder."""
    dest = tmp_path / "experiments"
    shutil.copytree(EXPERIMENTS, dest, ignore=shutil.ignore_patterns("campaigns"))
    (dest / "campaigns").mkdir()
    return dest


def write(folder: Path, name: str, text: str) -> Path:
    path = folder / "campaigns" / f"{name}.toml"
    path.write_text(text)
    return path


def planned(folder: Path, text: str, name: str = "c"):
    campaign, problems = load_campaign(write(folder, name, text))
    assert campaign is not None, problems
    return plan(campaign, load_catalog(folder))


def test_bundled_sweep_is_six_points_in_three_loads() -> None:
    """The README's campaign: probe-only axes share a load; K does not multiply the baseline."""
    catalog = load_catalog(EXPERIMENTS)
    p = plan(load_checked(catalog, "tiny-cpu-ngram-sweep"), catalog)
    assert not p.problems
    assert (len(p.points), len(p.loads)) == (6, 3)
    assert [len(load.points) for load in p.loads] == [2, 2, 2]
    first = p.loads[0].experiment
    assert first.speculative.method == "none"  # the baseline loads first
    ks = sorted(load.experiment.speculative.num_tokens or 0 for load in p.loads[1:])
    assert ks == [2, 4]


def test_probe_axes_share_a_load_and_serve_axes_do_not(folder: Path) -> None:
    p = planned(folder, 'base = ["tiny-cpu-vllm-ngram"]\n[axes]\n"probe.concurrency" = [1, 4, 16]\n"probe.max_tokens" = [32, 64]\n')
    assert (len(p.points), len(p.loads)) == (6, 1)
    p = planned(folder, 'base = ["tiny-cpu-vllm-ngram"]\n[axes]\n"engine_args.max-num-seqs" = [2, 4]\n"probe.concurrency" = [1, 4]\n')
    assert (len(p.points), len(p.loads)) == (4, 2)
    seqs = sorted(load.experiment.engine_args["max-num-seqs"] for load in p.loads)
    assert seqs == [2, 4]


def test_serve_key_ignores_only_probe_and_naming() -> None:
    catalog = load_catalog(EXPERIMENTS)
    exp = catalog.get("tiny-cpu-vllm-ngram").experiment
    assert serve_key(exp) == serve_key(exp.model_copy(update={"name": "other", "description": "x"}))
    assert serve_key(exp) == serve_key(exp.model_copy(update={"probe": exp.probe.model_copy(update={"concurrency": 8})}))
    assert serve_key(exp) != serve_key(exp.model_copy(update={"port": exp.port + 1}))


def test_k_is_translated_by_each_engine(folder: Path) -> None:
    """K=3 on SGLang is steps 3, topk 1, draft tokens 4; on vLLM num_speculative_tokens 3."""
    text = 'base = ["kimi-k25-vllm-eagle3"]\n[axes]\nengine = ["vllm", "sglang"]\n"speculative.num_tokens" = [3]\n'
    p = planned(folder, text)
    flags = {load.experiment.engine: load.speculative_flags for load in p.loads}
    assert set(flags) == {"vllm", "sglang"}
    sg = flags["sglang"]
    assert sg[sg.index("--speculative-num-steps") + 1] == "3"
    assert sg[sg.index("--speculative-eagle-topk") + 1] == "1"
    assert sg[sg.index("--speculative-num-draft-tokens") + 1] == "4"
    vconf = json.loads(flags["vllm"][flags["vllm"].index("--speculative-config") + 1])
    assert vconf["num_speculative_tokens"] == 3


def test_each_load_gets_the_flags_its_records_are_replayed_from(folder: Path) -> None:
    """SGLang 0.5.23 serves /metrics (its acceptance counters) only with --enable-metrics; vLLM always does."""
    text = 'base = ["kimi-k25-vllm-eagle3"]\n[axes]\nengine = ["vllm", "sglang"]\n"speculative.num_tokens" = [3]\n'
    args = {load.experiment.engine: load.experiment.engine_args for load in planned(folder, text).loads}
    assert args["sglang"].get("enable-metrics") is True and "enable-metrics" not in args["vllm"]


def test_links_zip_instead_of_crossing(folder: Path) -> None:
    text = (
        'base = ["tiny-cpu-vllm-ngram"]\n[axes]\n"speculative.num_tokens" = [2, 3, 4]\n'
        '"engine_args.max-num-seqs" = [8, 4, 2]\n"probe.concurrency" = [1, 2]\n'
        '[[links]]\naxes = ["speculative.num_tokens", "engine_args.max-num-seqs"]\n'
    )
    p = planned(folder, text)
    pairs = sorted({(pt.values["speculative.num_tokens"], pt.values["engine_args.max-num-seqs"]) for pt in p.points})
    assert pairs == [(2, 8), (3, 4), (4, 2)]
    assert (len(p.points), len(p.loads)) == (6, 3)


def test_exclusions_drop_matching_points(folder: Path) -> None:
    text = (
        'base = ["tiny-cpu-vllm-ngram"]\n[axes]\n"speculative.num_tokens" = [2, 4]\n"probe.concurrency" = [1, 4]\n'
        '[[exclude]]\n"speculative.num_tokens" = 4\n"probe.concurrency" = 4\n'
    )
    p = planned(folder, text)
    combos = sorted((pt.values["speculative.num_tokens"], pt.values["probe.concurrency"]) for pt in p.points)
    assert combos == [(2, 1), (2, 4), (4, 1)]


def test_speculative_points_pair_with_the_baseline_point_of_the_same_probe() -> None:
    catalog = load_catalog(EXPERIMENTS)
    p = plan(load_checked(catalog, "tiny-cpu-ngram-sweep"), catalog)
    by_name = {pt.name: pt for pt in p.points}
    for pt in p.points:
        if pt.base == "tiny-cpu-vllm-baseline":
            assert pt.baseline_point is None
            continue
        ref = by_name[pt.baseline_point or ""]
        assert ref.base == "tiny-cpu-vllm-baseline"
        assert ref.experiment.probe.concurrency == pt.experiment.probe.concurrency


@pytest.mark.parametrize(
    ("text", "path", "words"),
    [
        ('base = ["tiny-cpu-vllm-ngram"]\n[axes]\n"speculative.num_tokenz" = [2]\n', "axes.speculative.num_tokenz", "no key"),
        ('base = ["tiny-cpu-vllm-ngram"]\n[axes]\nname = ["a"]\n', "axes.name", "cannot vary"),
        ('base = ["tiny-cpu-vllm-ngram"]\n[axes]\n"probe.concurrency" = [1, 2]\n"probe.repeats" = [1]\n[[links]]\naxes = ["probe.concurrency", "probe.repeats"]\n', "links[0].axes", "same number"),
        ('base = ["tiny-cpu-vllm-ngram"]\n[axes]\n"probe.concurrency" = [1]\n[[exclude]]\n"probe.repeats" = 1\n', "exclude[0].probe.repeats", "not an axis"),
        ('base = ["tiny-cpu-vllm-ngram"]\nbaseline = "tiny-cpu-vllm-baseline"\n', "<root>", "must be one of base"),
        ('base = ["tiny-cpu-vllm-ngram"]\nbogus = 1\n', "bogus", "unknown key"),
        ('base = ["no-such-exp"]\n', "base[0]", "no experiment named"),
        ('base = ["tiny-cpu-vllm-ngram"]\n[axes]\n"probe.concurrency" = [0]\n', "point", "greater than or equal to 1"),
        ('base = ["tiny-cpu-vllm-ngram"]\n[axes]\n"speculative.eagle_topk" = [4]\n', "point", "vllm"),
        ('base = [\n', "<toml>", ""),
    ],
)
def test_check_reports_one_line_per_problem(folder: Path, text: str, path: str, words: str) -> None:
    file = write(folder, "bad", text)
    problems = check_campaign(load_catalog(folder), file)
    assert problems, text
    assert any(p.path.startswith(path) and words in p.message for p in problems), [str(p) for p in problems]
    assert all("\n" not in str(p) and "bad.toml:" in str(p) for p in problems)


def test_unknown_campaign_is_one_line(folder: Path) -> None:
    with pytest.raises(ServelabError, match="no campaign 'nope'.*known: c"):
        write(folder, "c", 'base = ["tiny-cpu-vllm-ngram"]\n')
        load_checked(load_catalog(folder), "nope")


def _servelab(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "servelab", *args], cwd=cwd, capture_output=True, text=True, timeout=120, env={**suite_home_env(), "PATH": "/usr/bin:/bin", "PYTHONPATH": str(REPO)})


def test_cli_plan_json_and_check(folder: Path) -> None:
    write(folder, "sweep", 'base = ["tiny-cpu-vllm-baseline", "tiny-cpu-vllm-ngram"]\nbaseline = "tiny-cpu-vllm-baseline"\n[axes]\n"speculative.num_tokens" = [2, 4]\n"probe.concurrency" = [1, 4]\n')
    out = _servelab("--dir", str(folder), "campaign", "plan", "sweep", "--json", cwd=folder.parent)
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    assert len(doc["points"]) == 6 and len(doc["loads"]) == 3
    text = _servelab("--dir", str(folder), "campaign", "plan", "sweep", cwd=folder.parent)
    assert "6 points in 3 loads" in text.stdout
    assert "--speculative-config" in text.stdout
    write(folder, "broken", 'base = ["tiny-cpu-vllm-ngram"]\n[axes]\n"probe.concurrencyy" = [1]\n')
    chk = _servelab("--dir", str(folder), "check", cwd=folder.parent)
    assert chk.returncode == 1
    lines = chk.stdout.strip().splitlines()
    assert len(lines) == 1 and "broken.toml:3: axes.probe.concurrencyy:" in lines[0], chk.stdout
    assert "Traceback" not in chk.stderr


def test_show_prints_the_engines_translation_of_k(folder: Path) -> None:
    out = _servelab("--dir", str(folder), "show", "kimi-k25-sglang-eagle3", cwd=folder.parent)
    line = next(l for l in out.stdout.splitlines() if l.startswith("speculation"))
    assert "K=3" in line and "--speculative-num-steps 3 --speculative-eagle-topk 1 --speculative-num-draft-tokens 4" in line
