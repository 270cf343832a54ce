"""The tiny model is deterministic, the documented shape, and has a working tokenizer and chat template."""

from __future__ import annotations

import hashlib
import json
import subprocess
from pathlib import Path

import pytest

from tests.conftest import ENGINE_PYTHON, REPO, need_engine

pytestmark = pytest.mark.engine
SCRIPT = REPO / "envs" / "tiny" / "tinymodel.py"


def digests(folder: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.iterdir())}


@pytest.fixture(scope="module")
def two_builds(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    need_engine()
    base = tmp_path_factory.mktemp("tiny")
    outs = (base / "a" / "tiny-llama", base / "b" / "tiny-llama")
    procs = [subprocess.Popen([str(ENGINE_PYTHON), str(SCRIPT), str(o)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT) for o in outs]
    for p in procs:
        out, _ = p.communicate(timeout=300)
        assert p.returncode == 0, out.decode(errors="replace")[-2000:]
    return outs


def test_two_builds_are_byte_identical(two_builds: tuple[Path, Path]) -> None:
    a, b = two_builds
    assert digests(a) == digests(b)
    assert "model.safetensors" in digests(a)
    assert not list(a.parent.glob(".tiny-llama-*")), "staging folder left behind"


def test_config_has_the_documented_shape(two_builds: tuple[Path, Path]) -> None:
    cfg = json.loads((two_builds[0] / "config.json").read_text())
    assert cfg["architectures"] == ["LlamaForCausalLM"]
    assert (cfg["hidden_size"], cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["num_hidden_layers"], cfg["head_dim"]) == (128, 2, 1, 2, 64)


def test_tokenizer_round_trips_and_template_renders(two_builds: tuple[Path, Path]) -> None:
    check = (
        "import sys, json\n"
        "from transformers import AutoTokenizer\n"
        "t = AutoTokenizer.from_pretrained(sys.argv[1])\n"
        "text = 'Translate into French: the cat sleeps. def f(x): return x * 17'\n"
        "ids = t.encode(text, add_special_tokens=False)\n"
        "chat = t.apply_chat_template([{'role': 'user', 'content': 'Hi'}], tokenize=False, add_generation_prompt=True)\n"
        "print(json.dumps({'same': t.decode(ids) == text, 'n': len(ids), 'chars': len(text), 'chat': chat, 'eos': t.eos_token}))\n"
    )
    out = subprocess.run([str(ENGINE_PYTHON), "-c", check, str(two_builds[0])], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert got["same"]
    assert got["n"] < got["chars"], "BPE merges should make fewer tokens than characters"
    assert got["chat"] == "<s><|user|>\nHi</s>\n<|assistant|>\n"
    assert got["eos"] == "</s>"


def safetensors_header(path: Path) -> dict:  # type: ignore[type-arg]
    """The JSON header at the start of a safetensors file: tensor names, dtypes, shapes."""
    raw = path.read_bytes()
    n = int.from_bytes(raw[:8], "little")
    return json.loads(raw[8 : 8 + n])


def test_eagle3_drafter_has_the_tensors_vllm_loads(tmp_path: Path) -> None:
    need_engine()
    target = REPO / ".models" / "tiny-llama"
    out = tmp_path / "tiny-e3"
    done = subprocess.run([str(ENGINE_PYTHON), str(SCRIPT), str(out), "--eagle3", str(target)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    cfg = json.loads((out / "config.json").read_text())
    tcfg = json.loads((target / "config.json").read_text())
    assert cfg["architectures"] == ["LlamaForCausalLMEagle3"] and cfg["num_hidden_layers"] == 1
    assert cfg["target_hidden_size"] == tcfg["hidden_size"]
    aux = cfg["eagle_config"]["eagle_aux_hidden_state_layer_ids"]
    assert all(0 <= i <= tcfg["num_hidden_layers"] for i in aux) and len(set(aux)) == 3
    header = safetensors_header(out / "model.safetensors")
    h = tcfg["hidden_size"]
    assert header["fc.weight"]["shape"] == [h, 3 * h]
    assert header["midlayer.self_attn.q_proj.weight"]["shape"][1] == 2 * h
    assert header["lm_head.weight"]["shape"] == [tcfg["vocab_size"], h]
    assert {"midlayer.input_layernorm.weight", "midlayer.hidden_norm.weight", "midlayer.post_attention_layernorm.weight"} <= set(header)
    assert not any("embed_tokens" in name for name in header)  # shares the target's


def test_another_seed_is_another_model_with_the_same_tokenizer(two_builds: tuple[Path, Path], tmp_path: Path) -> None:
    out = tmp_path / "other"
    done = subprocess.run([str(ENGINE_PYTHON), str(SCRIPT), str(out), "--seed", "7"], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    a = digests(two_builds[0])
    b = digests(out)
    assert a["tokenizer.json"] == b["tokenizer.json"]
    assert a["model.safetensors"] != b["model.safetensors"]
