"""Rehearsal without a server: each adapter's rehearsal argv, the inputs' hashes and the cached
result a launch reads ("rehearsed at HH:MM, same inputs" / "not rehearsed since ... changed"),
``[launch] rehearse`` and the checkpoint headers check."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path

import pytest

from servelab.engines.preflight import cache as preflight_cache
from servelab.engines.adapters.base import all_adapters, get_adapter
from servelab.engines.catalog.folder import load_catalog
from servelab.engines.preflight.checkpoint import CheckpointCheck, check_checkpoint
from servelab.engines.catalog.experiment import Experiment
from servelab.engines.hosts.local import LocalHost
from servelab.engines.hosts.hostsfile import HostConfig
from servelab.engines.hosts.registry import close_all
from servelab.engines.nodes.ray import is_ray_daemon
from servelab.engines.nodes.run import MultiNodeRuns
from servelab.engines.runs.rehearsal import PARTS, RehearsalResult, before_launch, last_good, rehearsal_inputs, rehearsal_note, save_good
from servelab.engines.runs.manager import Runs
from servelab.engines.weights.safetensors_header import encode
from tests.conftest import EXPERIMENTS, TINY_MODEL, need_engine
from tests.fixtures.rehearsal import make_folder


def _exp(**kw: object) -> Experiment:
    base: dict[str, object] = {"name": "x", "engine": "vllm", "model": "/m"}
    base.update(kw)
    return Experiment.model_validate(base)


def _without(argv: list[str], flags: set[str]) -> list[str]:
    out: list[str] = []
    skip = False
    for word in argv:
        if skip:
            skip = False
        elif word in flags:
            skip = True
        else:
            out.append(word)
    return out


def _spec_cases() -> list[Experiment]:
    bundled = [e.experiment for e in load_catalog(EXPERIMENTS).experiments]
    built = [
        _exp(engine_args={"load-format": "safetensors"}),
        _exp(speculative={"method": "draft_model", "draft_model": "/d", "num_tokens": 3, "extra": {"draft_load_config": {"load_format": "auto"}}}),
        _exp(engine="sglang", speculative={"method": "eagle3", "draft_model": "/d", "num_tokens": 3, "num_steps": 3, "eagle_topk": 1, "num_draft_tokens": 4}),
        _exp(engine="sglang", engine_args={"load-format": "auto", "skip-server-warmup": True}),
    ]
    return bundled + built


@pytest.mark.parametrize("e", _spec_cases(), ids=lambda e: f"{e.engine}-{e.name}")
def test_rehearsal_argv_is_the_launch_with_dummy_weights_and_nothing_else(e: Experiment) -> None:
    adapter = get_adapter(e.engine)
    draft = "/d" if e.speculative.draft_model else None
    launch = adapter.launch_spec(e, "/py", "/m", draft)
    spec = adapter.rehearsal_spec(e, launch)
    assert spec.env == launch.env
    assert spec.argv.count("--load-format") == 1 and spec.argv[spec.argv.index("--load-format") + 1] == "dummy"
    # every other word of the launch stays, in order (nothing skipped, nothing added but the load format)
    changed = {"--load-format", "--speculative-draft-load-format", "--speculative-config"}
    assert _without(spec.argv, changed) == _without(launch.argv, changed)
    if "--speculative-draft-model-path" in spec.argv:  # SGLang: the draft runner has its own load format
        assert spec.argv[spec.argv.index("--speculative-draft-load-format") + 1] == "dummy"
    if "--speculative-config" in spec.argv:  # vLLM: the draft's own load config, when the experiment sets one
        cfg = json.loads(spec.argv[spec.argv.index("--speculative-config") + 1])
        before = json.loads(launch.argv[launch.argv.index("--speculative-config") + 1])
        assert {k: v for k, v in cfg.items() if k != "draft_load_config"} == {k: v for k, v in before.items() if k != "draft_load_config"}
        if "draft_load_config" in before:
            assert cfg["draft_load_config"]["load_format"] == "dummy"


@pytest.mark.parametrize("engine,backend", [("vllm", "native"), ("vllm", "ray"), ("sglang", "native")])
def test_a_multinode_rehearsal_gives_every_engine_process_dummy_weights(tmp_path: Path, engine: str, backend: str) -> None:
    """Every node's engine process is the launch's through the adapter's ``rehearsal_spec``; a Ray
    daemon (no weights of its own) is the launch's as it is."""
    (tmp_path / "hosts.toml").write_text(
        '[hosts.a]\npython = "/venv/bin/python"\n\n[hosts.b]\nssh = "gpu-b"\naddress = "10.0.0.2"\npython = "/venv/bin/python"\n'
    )
    port = "ray_port = 6390" if backend == "ray" else "port = 29500"
    (tmp_path / "x.toml").write_text(
        f'engine = "{engine}"\nhosts = ["a", "b"]\nmodel = "/m"\n[multinode]\nbackend = "{backend}"\n{port}\n[parallel]\ntensor = 2\n'
    )
    catalog = load_catalog(tmp_path)
    sourced = catalog.get("x")
    nodes = MultiNodeRuns(Runs(catalog))
    launch, rehearsal = nodes.plans(sourced), nodes.plans(sourced, rehearsal=True)
    adapter = get_adapter(engine)
    engines = 0
    for lp, rp in zip(launch, rehearsal, strict=True):
        for lproc, rproc in zip(lp.processes, rp.processes, strict=True):
            if is_ray_daemon(lproc.role):
                assert rproc == lproc
                continue
            engines += 1
            assert rproc.spec == adapter.rehearsal_spec(sourced.experiment, lproc.spec) and rproc.spec != lproc.spec
            assert rproc.spec.argv[rproc.spec.argv.index("--load-format") + 1] == "dummy"
            assert rproc.serves == lproc.serves and rproc.port == lproc.port and rproc.check == lproc.check
    assert engines == (1 if backend == "ray" else 2)


def test_every_adapter_has_a_rehearsal() -> None:
    for adapter in all_adapters():
        assert callable(adapter.rehearsal_spec)


def _good(inputs: dict[str, str], name: str = "tiny-cpu-vllm-baseline") -> RehearsalResult:
    return RehearsalResult(
        experiment=name, host="local", engine="vllm", run_id="r", state="ready", ok=True, started_at="", seconds=1.0, preflight_s=0.1,
        ready_s=0.5, stages=(), generation=None, root_cause=None, hint=None, failed_stage=None, stopped=True, leftovers=(),
        inputs=inputs, checkpoint=CheckpointCheck(False, "x"),
    )


async def test_cached_rehearsal_is_reused_when_nothing_changed_and_a_changed_patch_invalidates_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    need_engine()
    monkeypatch.setenv(preflight_cache.ENV_CACHE, str(tmp_path / "cache"))
    folder = make_folder(tmp_path, ("tiny-cpu-vllm-baseline",))
    toml = folder / "tiny-cpu-vllm-baseline.toml"
    (folder / "note.diff").write_text("--- a/vllm/x.py\n+++ b/vllm/x.py\n@@ -1 +1 @@\n-a\n+b\n")
    toml.write_text(toml.read_text().replace("[engine_args]", '[launch]\nrehearse = "when-changed"\n\n[[patches]]\nfile = "note.diff"\n\n[engine_args]', 1))
    try:
        catalog = load_catalog(folder)
        sourced = catalog.get("tiny-cpu-vllm-baseline")
        cfg = catalog.host("local")
        first = await rehearsal_inputs(catalog, sourced, cfg)
        assert set(first.parts) == set(PARTS)
        note = await rehearsal_note(catalog, sourced)
        assert note.rehearsed_at is None and note.needed and note.message().startswith("not rehearsed yet")
        with pytest.raises(ValueError):
            save_good(RehearsalResult.from_json({**_good(first.parts).to_json(), "ok": False}), sourced, cfg)
        save_good(_good(first.parts), sourced, cfg)
        # the same inputs read again: the same hashes, and the note says so
        again = await rehearsal_inputs(catalog, sourced, cfg)
        assert again.key == first.key
        note = await rehearsal_note(catalog, sourced)
        assert note.same and not note.needed and note.message().startswith("rehearsed at ") and note.message().endswith(", same inputs")
        # the launch says it (and rehearses nothing: the inputs were rehearsed)
        said: list[str] = []
        await before_launch(Runs(catalog), "tiny-cpu-vllm-baseline", say=said.append)
        assert said == [f"rehearsal: {note.message()}"]
        # one byte of the patch file changes: only the patch set changed, and when-changed asks again
        (folder / "note.diff").write_text("--- a/vllm/x.py\n+++ b/vllm/x.py\n@@ -1 +1 @@\n-a\n+c\n")
        catalog = load_catalog(folder)
        changed = await rehearsal_note(catalog, "tiny-cpu-vllm-baseline")
        assert changed.changed == ("patch set",) and changed.needed
        assert changed.message().startswith("not rehearsed since the patch set changed")
        last = last_good(catalog.get("tiny-cpu-vllm-baseline"), cfg)
        assert last is not None and last[0].inputs == first.parts
        # policy never: the same message, no rehearsal asked for; always: asked even with the same inputs
        toml.write_text(toml.read_text().replace('rehearse = "when-changed"', 'rehearse = "never"'))
        assert not (await rehearsal_note(load_catalog(folder), "tiny-cpu-vllm-baseline")).needed
        (folder / "note.diff").write_text("--- a/vllm/x.py\n+++ b/vllm/x.py\n@@ -1 +1 @@\n-a\n+b\n")
        toml.write_text(toml.read_text().replace('rehearse = "never"', 'rehearse = "always"'))
        always = await rehearsal_note(load_catalog(folder), "tiny-cpu-vllm-baseline")
        assert always.same and always.needed
    finally:
        await close_all()


def test_rehearse_policy_is_checked_in_one_line(tmp_path: Path) -> None:
    folder = make_folder(tmp_path, ("tiny-cpu-vllm-baseline",))
    toml = folder / "tiny-cpu-vllm-baseline.toml"
    toml.write_text(toml.read_text() + '\n[launch]\nrehearse = "sometimes"\n')
    problems = [str(p) for e in load_catalog(folder).entries for p in e.problems]
    assert len(problems) == 1 and "launch.rehearse" in problems[0] and "'always', 'when-changed' or 'never'" in problems[0] and "\n" not in problems[0]


def _shard(path: Path, names: list[str], dtype: str = "F32") -> None:
    path.write_bytes(encode({n: (dtype, [2], b"\0" * 8) for n in names}))


async def test_checkpoint_headers_find_a_missing_shard_a_lost_name_a_missing_layer_and_a_dtype(tmp_path: Path) -> None:
    host = LocalHost(HostConfig(name="local"))
    layer = ["self_attn.q_proj.weight", "mlp.up_proj.weight"]
    names = lambda i: [f"model.layers.{i}.{n}" for n in layer]  # noqa: E731
    good = tmp_path / "good"
    good.mkdir()
    (good / "config.json").write_text(json.dumps({"num_hidden_layers": 3, "torch_dtype": "float32"}))
    _shard(good / "a.safetensors", ["model.embed_tokens.weight", *names(0), *names(1)])
    _shard(good / "b.safetensors", [*names(2), "lm_head.weight"])
    index = {n: "a.safetensors" for n in ["model.embed_tokens.weight", *names(0), *names(1)]} | {n: "b.safetensors" for n in [*names(2), "lm_head.weight"]}
    (good / "model.safetensors.index.json").write_text(json.dumps({"weight_map": index}))
    ok = await check_checkpoint(host, str(good))
    assert ok.done and ok.ok and ok.files == 2 and ok.tensors == 8, ok
    assert "not compared" in ok.line()

    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "config.json").write_text(json.dumps({"num_hidden_layers": 4, "torch_dtype": "float32"}))
    _shard(bad / "a.safetensors", ["model.embed_tokens.weight", *names(0), f"model.layers.1.{layer[0]}", *names(2)])
    index_bad = {n: "a.safetensors" for n in ["model.embed_tokens.weight", *names(0), *names(1), *names(2)]} | {"lm_head.weight": "c.safetensors"}
    (bad / "model.safetensors.index.json").write_text(json.dumps({"weight_map": index_bad}))
    _shard(bad / "d.safetensors", ["extra.weight"], dtype="BF16")
    found = await check_checkpoint(host, str(bad))
    text = " | ".join(found.problems)
    assert found.done and not found.ok
    assert "missing shard c.safetensors" in text
    assert f"index names model.layers.1.{layer[1]} in a.safetensors" in text
    assert "layer(s) 3 missing of 4" in text
    assert f"model.layers.1 lacks {layer[1]}" in text
    assert "extra.weight in d.safetensors is not in the index" in text
    assert "config says F32, headers also hold BF16 x1" in text

    # the tiny model as it is; a folder without safetensors says the check was not done
    assert (await check_checkpoint(host, str(TINY_MODEL))).ok
    empty = tmp_path / "empty"
    empty.mkdir()
    none = await check_checkpoint(host, str(empty))
    assert not none.done and none.line().startswith("not done: no safetensors files")


async def test_dashboard_l_offers_the_rehearsal_when_the_experiment_changed_since_its_last_good_one(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    need_engine()
    from servelab.tui.app import ServelabApp
    from servelab.tui.screens.confirm import ConfirmScreen
    from tests.fixtures.tui import pilot_wait, shown_text

    monkeypatch.setenv(preflight_cache.ENV_CACHE, str(tmp_path / "cache"))
    folder = make_folder(tmp_path, ("tiny-cpu-vllm-baseline",))
    catalog = load_catalog(folder)
    cfg = catalog.host("local")
    sourced = catalog.get("tiny-cpu-vllm-baseline")
    save_good(_good((await rehearsal_inputs(catalog, sourced, cfg)).parts), sourced, cfg)
    toml = folder / "tiny-cpu-vllm-baseline.toml"
    text = toml.read_text()  # a variable added to its [env] table (one the bundled experiment may already have)
    toml.write_text(text.replace("[env]\n", '[env]\nVLLM_CPU_KVCACHE_SPACE = "1"\n', 1) if "[env]\n" in text
                    else text.replace("[engine_args]", '[env]\nVLLM_CPU_KVCACHE_SPACE = "1"\n\n[engine_args]', 1))
    assert tomllib.loads(toml.read_text())["env"]["VLLM_CPU_KVCACHE_SPACE"] == "1"  # still one valid file
    await close_all()
    app = ServelabApp(folder)
    async with app.run_test(size=(120, 30)) as pilot:
        await pilot_wait(pilot, lambda: "tiny-cpu-vllm-baseline" in shown_text(app))
        await pilot.press("l")
        await pilot_wait(pilot, lambda: isinstance(app.screen, ConfirmScreen))
        # the screen, then the frame that draws it
        await pilot_wait(pilot, lambda: all(s in shown_text(app) for s in ("Rehearse tiny-cpu-vllm-baseline before launching?", "not rehearsed since the environment changed")))
    await close_all()
