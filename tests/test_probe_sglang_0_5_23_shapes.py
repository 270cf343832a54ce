"""The probe's reading of SGLang's acceptance fields, checked against SGLang 0.5.23 itself (.venv-sglang).

Speculative decoding cannot run on this CPU (the verify step needs SGLang's AMX attention kernels),
so no real server here produces these fields. Instead each shape comes from 0.5.23's own code: the
OpenAI route's ``sglext.spec_tokens_details`` is built by its ``spec_tokens_details_from_meta_info``
and its pydantic ``ChatCompletionResponse``; ``meta_info``, ``/server_info`` and ``/metrics`` names
are read from its installed source. The test names say which.
"""

from __future__ import annotations

import json
import subprocess

import pytest

from servelab.engines.adapters.sglang import _spec_record, acceptance_from_records
from tests.conftest import SGLANG_PYTHON, need_sglang

# A chain of 3 draft steps (num_draft_tokens 4): 10 verify steps committed 28 tokens, 18 drafts accepted of 30.
META_INFO = {"completion_tokens": 28, "spec_verify_ct": 10, "spec_num_correct_drafts": 18, "spec_num_proposed_drafts": 30, "spec_accept_rate": 0.6, "spec_accept_length": 2.8}

BUILD_RESPONSE = """
import json, sys
from sglang.srt.entrypoints.openai.protocol import ChatCompletionResponse, ChatCompletionResponseChoice, ChatMessage, SglExt, UsageInfo
from sglang.srt.entrypoints.openai.utils import spec_tokens_details_from_meta_info
meta = json.loads(sys.argv[1])
details = spec_tokens_details_from_meta_info(meta)
response = ChatCompletionResponse(
    id="x", model="tiny-llama",
    choices=[ChatCompletionResponseChoice(index=0, message=ChatMessage(role="assistant", content="hi"), finish_reason="length")],
    usage=UsageInfo(prompt_tokens=5, completion_tokens=meta["completion_tokens"], total_tokens=5 + meta["completion_tokens"]),
    sglext=SglExt(spec_tokens_details=details),
)
print(response.model_dump_json())
"""


def sglang_source(relative: str) -> str:
    """A file of the installed SGLang package (found in the venv, not imported: importing takes seconds)."""
    need_sglang()
    (root,) = SGLANG_PYTHON.parent.parent.glob("lib/python3*/site-packages/sglang")
    return (root / relative).read_text()


@pytest.mark.engine
def test_openai_route_spec_details_built_by_sglang_0_5_23s_own_code_are_read_by_the_probe() -> None:
    need_sglang()
    done = subprocess.run([str(SGLANG_PYTHON), "-c", BUILD_RESPONSE, json.dumps(META_INFO)], capture_output=True, text=True, timeout=180, cwd="/")
    assert done.returncode == 0, done.stderr[-2000:]
    response = json.loads(done.stdout.strip().splitlines()[-1])
    record = _spec_record(response)
    assert record is not None and record["spec_verify_ct"] == 10
    record = {**record, "completion_tokens": response["usage"]["completion_tokens"]}  # as the probe adds it from usage
    acc = acceptance_from_records([record], 3, "openai")
    assert acc is not None
    assert (acc.length, acc.drafts, acc.accepted, acc.draft_tokens) == (2.8, 10, 18, 30)
    assert acc.rate == pytest.approx(META_INFO["spec_accept_rate"])  # the same rate SGLang reports


def test_native_generate_meta_info_keys_the_probe_reads_are_set_by_sglang_0_5_23s_tokenizer_manager() -> None:
    source = sglang_source("srt/managers/tokenizer_manager.py")
    for key in ("spec_verify_ct", "spec_num_correct_drafts", "spec_num_proposed_drafts", "completion_tokens"):
        assert f'meta_info["{key}"]' in source or f'"{key}":' in source, key
    # and the probe pools them from a /generate answer shaped like SGLang's
    acc = acceptance_from_records([_spec_record({"text": "x", "meta_info": META_INFO}) or {}], 3, "native")
    assert acc is not None and (acc.length, acc.accepted) == (2.8, 18)


def test_server_info_internal_states_avg_spec_accept_length_is_where_sglang_0_5_23_puts_it() -> None:
    assert '"internal_states": internal_states' in sglang_source("srt/entrypoints/http_server.py")
    assert 'state["avg_spec_accept_length"] = accept_length' in sglang_source("srt/managers/scheduler_components/internal_state.py")


def test_sglang_0_5_23_metrics_names_the_spec_gauges_only_with_enable_metrics() -> None:
    """/metrics is off by default in 0.5.23 (the tiny server answers 404); the probe's SGLang window does not need it."""
    source = sglang_source("srt/observability/metrics_collector.py")
    assert 'name="sglang:spec_accept_length"' in source and 'name="sglang:spec_verify_calls_total"' in source
    assert "if get_observability().enable_metrics:" in sglang_source("srt/entrypoints/http_server.py")
