"""The adapters' ``validation`` member and the host-side argument check's engine selection.

vLLM's branch runs for real in test_preflight.py. SGLang cannot run here (GPU-only), so its branch
is exercised against ``FakeSglang``: a stand-in ``sglang.srt.server_args`` written to a temporary
folder with SGLang's documented shape (``prepare_server_args(argv)`` = argparse parser from
``ServerArgs.add_cli_args`` + ``ServerArgs.from_cli_args``, checks in ``__post_init__``).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from engines.adapter import get_adapter
from engines.catalog import load_catalog
from engines.helpers import helper_argv
from tests.conftest import EXPERIMENTS

FAKE_SGLANG_SERVER_ARGS = '''
"""FakeSglang: stands in for SGLang's server_args (SGLang needs a GPU); same entry points, few flags."""
import argparse
import dataclasses


@dataclasses.dataclass
class ServerArgs:
    model_path: str
    port: int = 30000
    served_model_name: str = None
    tp_size: int = 1
    trust_remote_code: bool = False
    tool_call_parser: str = None
    reasoning_parser: str = None
    context_length: int = None
    mem_fraction_static: float = None
    speculative_algorithm: str = None
    speculative_draft_model_path: str = None
    speculative_num_steps: int = None
    speculative_eagle_topk: int = None
    speculative_num_draft_tokens: int = None
    speculative_draft_attention_backend: str = None

    def __post_init__(self):
        if self.speculative_algorithm and self.speculative_eagle_topk == 1:
            if self.speculative_num_draft_tokens != self.speculative_num_steps + 1:
                raise ValueError("speculative_num_draft_tokens must be speculative_num_steps + 1 when topk is 1")

    @staticmethod
    def add_cli_args(parser):
        parser.add_argument("--model-path", "--model", required=True)
        parser.add_argument("--port", type=int, default=30000)
        parser.add_argument("--served-model-name")
        parser.add_argument("--tp-size", "--tp", type=int, default=1)
        parser.add_argument("--trust-remote-code", action="store_true")
        parser.add_argument("--tool-call-parser")
        parser.add_argument("--reasoning-parser")
        parser.add_argument("--context-length", type=int)
        parser.add_argument("--mem-fraction-static", type=float)
        parser.add_argument("--speculative-algorithm", choices=["EAGLE", "EAGLE3", "NEXTN", "NGRAM", "STANDALONE"])
        parser.add_argument("--speculative-draft-model-path")
        parser.add_argument("--speculative-num-steps", type=int)
        parser.add_argument("--speculative-eagle-topk", type=int)
        parser.add_argument("--speculative-num-draft-tokens", type=int)
        parser.add_argument("--speculative-draft-attention-backend")

    @classmethod
    def from_cli_args(cls, args):
        return cls(**{f.name: getattr(args, f.name) for f in dataclasses.fields(cls)})
'''

PREPARE = '''

def prepare_server_args(argv):
    parser = argparse.ArgumentParser(prog="sglang serve")
    ServerArgs.add_cli_args(parser)
    return ServerArgs.from_cli_args(parser.parse_args(argv))
'''


def fake_sglang(tmp_path: Path, *, with_prepare: bool = True) -> Path:
    root = tmp_path / ("new" if with_prepare else "old")
    (root / "sglang" / "srt").mkdir(parents=True)
    (root / "sglang" / "__init__.py").write_text("")
    (root / "sglang" / "srt" / "__init__.py").write_text("")
    (root / "sglang" / "srt" / "server_args.py").write_text(FAKE_SGLANG_SERVER_ARGS + (PREPARE if with_prepare else ""))
    return root


def validate(parser: str, flags: list[str], pythonpath: Path | None = None) -> dict[str, object]:
    env = {**os.environ}
    if pythonpath is not None:
        env["PYTHONPATH"] = str(pythonpath)
    done = subprocess.run(helper_argv(sys.executable, "validate_args.py", parser, *flags), capture_output=True, env=env, timeout=60)
    answer: dict[str, object] = json.loads(done.stdout.decode().splitlines()[-1])
    assert done.returncode == (0 if answer["ok"] else 1)
    return answer


def sglang_flags() -> list[str]:
    cat = load_catalog(EXPERIMENTS)
    exp = cat.get("kimi-k25-sglang-eagle3").experiment
    v = get_adapter("sglang").validation(exp, exp.model, exp.speculative.draft_model)
    assert v.parser == "sglang" and v.helper == "validate_args.py"
    return v.flags


def test_each_adapter_validates_exactly_the_servers_flags() -> None:
    cat = load_catalog(EXPERIMENTS)
    for name in ("tiny-cpu-vllm-ngram", "kimi-k25-vllm-eagle3", "kimi-k25-sglang-eagle3"):
        exp = cat.get(name)
        e = exp.experiment
        adapter = get_adapter(e.engine)
        model = cat.host_path(exp, e.model)
        draft = cat.host_path(exp, e.speculative.draft_model) if e.speculative.draft_model else None
        v = adapter.validation(e, model, draft)
        assert v.parser == e.engine
        assert cat.launch_spec(exp).argv[3:] == v.flags  # python -m <server> + exactly the flags checked


@pytest.mark.parametrize("with_prepare", [True, False], ids=["prepare_server_args", "add_cli_args+from_cli_args"])
def test_sglang_branch_accepts_the_bundled_experiments_flags(tmp_path: Path, with_prepare: bool) -> None:
    answer = validate("sglang", sglang_flags(), fake_sglang(tmp_path, with_prepare=with_prepare))
    assert answer["ok"] and answer["stage"] == "done", answer


def test_sglang_branch_reports_a_typo_flag_in_the_parsers_words(tmp_path: Path) -> None:
    flags = [f.replace("--context-length", "--contxt-length") for f in sglang_flags()]
    answer = validate("sglang", flags, fake_sglang(tmp_path))
    assert not answer["ok"] and answer["stage"] == "parse"
    assert answer["message"] == "sglang serve: error: unrecognized arguments: --contxt-length 32768"


def test_sglang_branch_reports_a_bad_combination_from_server_args(tmp_path: Path) -> None:
    flags = sglang_flags()
    i = flags.index("--speculative-num-draft-tokens")
    flags[i + 1] = "7"
    answer = validate("sglang", flags, fake_sglang(tmp_path))
    assert not answer["ok"] and answer["stage"] == "config"
    assert answer["message"] == "ValueError: speculative_num_draft_tokens must be speculative_num_steps + 1 when topk is 1"


def test_missing_engine_and_unknown_parser_are_one_line(tmp_path: Path) -> None:
    answer = validate("sglang", ["--model-path", "/m"], tmp_path)  # nothing named sglang on the path
    assert not answer["ok"] and answer["stage"] == "import"
    assert str(answer["message"]).startswith("cannot import SGLang's server arguments: ModuleNotFoundError")
    answer = validate("tensorrt", [])
    assert not answer["ok"] and answer["stage"] == "select" and answer["message"] == "no argument parser for 'tensorrt' (known: sglang, vllm)"
