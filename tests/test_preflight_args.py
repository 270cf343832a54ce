"""The adapters' ``validation`` member, each engine's check file beside its adapter, and the frame that runs it.

SGLang's checks run for real here, in .venv-sglang (sglang 0.5.23 on CPU): its parser,
``resolve_once()`` and ``check_server_args()``, then servelab's checks for what those let through.
vLLM's run for real in test_preflight.py. ``FakeSglangOldRelease`` stands in only for a release that is
not installed: before ``prepare_server_args`` and ``resolve_once``, when ``ServerArgs.__post_init__``
checked.
"""

from __future__ import annotations

import asyncio
import importlib
import json
import sys
from pathlib import Path

import pytest

from servelab.engines.adapters.base import ENGINE_MODULES, ArgValidation, all_adapters, get_adapter
from servelab.engines.catalog.folder import load_catalog
from servelab.engines.adapters.sglang import ARGCHECK as SGLANG_ARGCHECK
from servelab.engines.helpers import run_script
from servelab.engines.hosts.local import LocalHost
from servelab.engines.hosts.hostsfile import HostConfig
from tests.conftest import EXPERIMENTS, SGLANG_PYTHON, TINY_MODEL, need_sglang
from tests.fixtures.sglang import validate_many

FAKE_SGLANG_OLD_RELEASE = '''
"""FakeSglangOldRelease: SGLang's server_args as releases before prepare_server_args had it (not installed here)."""
import dataclasses


@dataclasses.dataclass
class ServerArgs:
    model_path: str
    port: int = 30000
    tp_size: int = 1
    speculative_algorithm: str = None
    speculative_num_steps: int = None
    speculative_eagle_topk: int = None
    speculative_num_draft_tokens: int = None
    device: str = None

    def __post_init__(self):
        if self.speculative_algorithm and self.speculative_eagle_topk == 1:
            if self.speculative_num_draft_tokens != self.speculative_num_steps + 1:
                raise ValueError("speculative_num_draft_tokens must be speculative_num_steps + 1 when topk is 1")

    @staticmethod
    def add_cli_args(parser):
        parser.add_argument("--model-path", "--model", required=True)
        parser.add_argument("--port", type=int, default=30000)
        parser.add_argument("--tp-size", "--tp", type=int, default=1)
        parser.add_argument("--speculative-algorithm")
        parser.add_argument("--speculative-num-steps", type=int)
        parser.add_argument("--speculative-eagle-topk", type=int)
        parser.add_argument("--speculative-num-draft-tokens", type=int)
        parser.add_argument("--device")

    @classmethod
    def from_cli_args(cls, args):
        return cls(**{f.name: getattr(args, f.name) for f in dataclasses.fields(cls)})
'''


def fake_sglang_old_release(tmp_path: Path) -> Path:
    root = tmp_path / "old-sglang"
    (root / "sglang" / "srt").mkdir(parents=True)
    (root / "sglang" / "__init__.py").write_text("")
    (root / "sglang" / "srt" / "__init__.py").write_text("")
    (root / "sglang" / "srt" / "server_args.py").write_text(FAKE_SGLANG_OLD_RELEASE)
    return root


def run_frame(request: dict[str, object], workdir: Path, python: str = sys.executable, pythonpath: Path | None = None) -> dict[str, object]:
    """The frame exactly as preflight runs it: the host script ``validate_args.py``, the request on stdin."""
    env = {"PYTHONPATH": str(pythonpath)} if pythonpath is not None else None
    host = LocalHost(HostConfig(python=python, workdir=str(workdir / "host")))
    done = asyncio.run(run_script(host, python, "validate_args.py", input=json.dumps(request).encode(), env=env, timeout=120))
    answer: dict[str, object] = json.loads(done.stdout.decode().splitlines()[-1])
    assert done.exit_code == (0 if answer["ok"] else 1)
    return answer


def sglang_request(flags: list[str]) -> dict[str, object]:
    return ArgValidation(check=SGLANG_ARGCHECK, flags=flags, label="SGLang").request("sglang")


def _kimi():  # type: ignore[no-untyped-def]
    exp = load_catalog(EXPERIMENTS).get("kimi-k25-sglang-eagle3").experiment
    return exp, exp.model, exp.speculative.draft_model


def test_each_adapter_validates_exactly_the_servers_flags() -> None:
    cat = load_catalog(EXPERIMENTS)
    for name in ("tiny-cpu-vllm-ngram", "kimi-k25-vllm-eagle3", "kimi-k25-sglang-eagle3", "tiny-cpu-sglang-baseline"):
        exp = cat.get(name)
        e = exp.experiment
        adapter = get_adapter(e.engine)
        model = cat.host_path(exp, e.model)
        draft = cat.host_path(exp, e.speculative.draft_model) if e.speculative.draft_model else None
        v = adapter.validation(e, model, draft)
        assert v.check.name == f"{e.engine}_argcheck.py"
        assert cat.launch_spec(exp).argv[3:] == v.flags  # python -m <server> + exactly the flags checked


def test_each_engines_check_is_one_file_beside_its_adapter_that_defines_check() -> None:
    """A third engine is its adapter plus one ``<engine>_argcheck.py``: nothing in the frame names an engine."""
    frame = (Path(importlib.import_module("servelab.engines.helpers").__file__ or "").parent / "validate_args.py").read_text()
    for adapter in all_adapters():
        exp, model, draft = _kimi()
        check = adapter.validation(exp, model, draft).check
        assert check.parent == Path(importlib.import_module(ENGINE_MODULES[adapter.name]).__file__ or "").parent
        namespace: dict[str, object] = {}
        exec(compile(check.read_text(), str(check), "exec"), namespace)
        assert callable(namespace["check"])
        assert f'"{adapter.name}"' not in frame and f"'{adapter.name}'" not in frame


def test_the_frame_reports_a_check_file_it_cannot_use_in_one_line(tmp_path: Path) -> None:
    answer = run_frame({"engine": "tensorrt", "check": "x = 1\n", "flags": []}, tmp_path)
    assert (answer["ok"], answer["stage"], answer["by"]) == (False, "select", "servelab")
    assert answer["message"] == "the argument check for 'tensorrt' defines no check(flags)"
    answer = run_frame({"engine": "tensorrt", "check": "def check(flags):\n    return [1 / 0]\n", "flags": []}, tmp_path)
    assert answer["message"] == "the argument check for 'tensorrt' crashed: ZeroDivisionError: division by zero"


def test_without_sglang_installed_the_import_fails_in_one_line(tmp_path: Path) -> None:
    answer = run_frame(sglang_request(["--model-path", "/m"]), tmp_path, pythonpath=tmp_path)  # the app venv has no sglang
    assert not answer["ok"] and answer["stage"] == "import"
    assert str(answer["message"]).startswith("cannot import SGLang's server arguments: ModuleNotFoundError")


def test_a_release_without_resolve_once_is_judged_by_its_post_init(tmp_path: Path) -> None:
    old = fake_sglang_old_release(tmp_path)
    good = ["--model-path", str(TINY_MODEL), "--speculative-algorithm", "NGRAM"]
    answer = run_frame(sglang_request(good), tmp_path, pythonpath=old)
    assert answer["ok"] and answer["stage"] == "done", answer
    bad = ["--model-path", "/m", "--speculative-algorithm", "EAGLE", "--speculative-num-steps", "3", "--speculative-eagle-topk", "1", "--speculative-num-draft-tokens", "7"]
    answer = run_frame(sglang_request(bad), tmp_path, pythonpath=old)
    assert (answer["stage"], answer["by"]) == ("config", "engine")
    assert answer["message"] == "ValueError: speculative_num_draft_tokens must be speculative_num_steps + 1 when topk is 1"
    answer = run_frame(sglang_request(["--model-path", "/m", "--contxt-length", "4"]), tmp_path, pythonpath=old)
    assert answer["stage"] == "parse" and answer["message"] == "sglang.launch_server: error: unrecognized arguments: --contxt-length 4"


M = str(TINY_MODEL)
EAGLE3_CHAIN = ["--speculative-num-steps", "3", "--speculative-eagle-topk", "1"]
#: name -> (flags, stage, by, the exact message or warning). The tiny model has 2 attention heads, context 2048.
REAL_CASES: dict[str, tuple[list[str], str, str | None, str]] = {
    # SGLang's own checks, in SGLang's words
    "good": (["--model-path", M, "--port", "8200"], "done", None, "accepted"),
    "good on cpu": (["--model-path", M, "--device", "cpu", "--max-total-tokens", "2048"], "done", None, "accepted"),
    "typo flag": (["--model-path", M, "--no-such-flag", "1"], "parse", "engine", "sglang serve: error: unrecognized arguments: --no-such-flag 1"),
    "bad int": (["--model-path", M, "--tp-size", "eight"], "parse", "engine", "sglang serve: error: argument --tp-size/--tensor-parallel-size: invalid int value: 'eight'"),
    "bad algorithm": (["--model-path", M, "--speculative-algorithm", "EAGLE9"], "config", "engine", "ValueError: Unknown speculative algorithm name: EAGLE9"),
    "missing model": (["--model-path", "/nonexistent/tiny"], "config", "engine", "OSError: Repo id must be in the form 'repo_name' or 'namespace/repo_name': '/nonexistent/tiny'. Use `repo_type` argument if needed."),
    "context above the model's": (
        ["--model-path", M, "--context-length", "4096"], "config", "engine",
        "ValueError: Warning: User-specified context_length (4096) is greater than the derived context_length (2048). This may lead to "
        "incorrect model outputs or CUDA errors. Note that the derived context_length may differ from max_position_embeddings in the "
        "model's config. To allow overriding this maximum, set the env var SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN=1",
    ),
    # servelab's checks for what SGLang 0.5.23 lets through
    "tp 3 on 2 heads": (["--model-path", M, "--tp-size", "3"], "servelab", "servelab", "--tp-size 3 does not divide the model's 2 attention heads"),
    "memory fraction 1.5": (["--model-path", M, "--mem-fraction-static", "1.5"], "servelab", "servelab", "--mem-fraction-static 1.5 is outside (0, 1): it is the share of GPU memory for weights and KV cache"),
    "eagle3 without drafter": (
        ["--model-path", M, "--speculative-algorithm", "EAGLE3", *EAGLE3_CHAIN, "--speculative-num-draft-tokens", "4"], "servelab", "servelab",
        "--speculative-algorithm EAGLE3 drafts with a separate model: set --speculative-draft-model-path (the drafter)",
    ),
    "draft tokens lowered": (
        ["--model-path", M, "--speculative-algorithm", "EAGLE3", "--speculative-draft-model-path", M, *EAGLE3_CHAIN, "--speculative-num-draft-tokens", "9"], "done", None,
        "SGLang lowers --speculative-num-draft-tokens 9 to 4 (with --speculative-eagle-topk 1 it verifies --speculative-num-steps 3 + 1)",
    ),
}


@pytest.fixture(scope="module")
def real_answers() -> dict[str, dict[str, object]]:
    """Every case through the real frame and check file with SGLang 0.5.23, in one interpreter (one import)."""
    need_sglang()
    answers = validate_many(str(SGLANG_PYTHON), [sglang_request(flags) for flags, *_ in REAL_CASES.values()])
    return dict(zip(REAL_CASES, answers, strict=True))


@pytest.mark.engine
@pytest.mark.parametrize("case", list(REAL_CASES))
def test_real_sglang_0_5_23_checks_then_servelabs(real_answers: dict[str, dict[str, object]], case: str) -> None:
    _flags, stage, by, words = REAL_CASES[case]
    answer = real_answers[case]
    assert (answer["stage"], answer["by"]) == (stage, by), answer
    assert answer["ok"] is (stage == "done")
    if case == "draft tokens lowered":
        assert answer["warnings"] == [words]
    else:
        assert answer["message"] == words and answer["warnings"] == []
