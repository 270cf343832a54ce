"""Line headers of both engines, rank filtering, and grammar rules that the shared logs do not exercise.

Every line here is copied from a real log in tests/data/logs (or ../shared/notes/engine-grammar.md
where it quotes one), sometimes with its numbers changed.
"""

from __future__ import annotations

import pytest

from servelab.engines.adapters.base import all_adapters, get_adapter
from servelab.engines.logs.files import analyze_bytes
from servelab.engines.adapters.vllm import parse_header
from servelab.engines.logs.grammar import STAGES, LogGrammar, is_primary_process


@pytest.mark.parametrize(
    ("line", "process", "level", "ts", "msg", "tag"),
    [
        ("(EngineCore_DP0 pid=441) INFO 11-24 11:43:54 [gpu_model_runner.py:3341] Model loading took 2.05 GiB", "EngineCore_DP0", "INFO", "11-24 11:43:54", "Model loading took 2.05 GiB", "gpu_model_runner.py:3341"),
        ("(Worker_TP1 pid=530) ERROR 10-06 18:54:30 [v1/executor/multiproc_executor.py:597]   File \"x.py\", line 1", "Worker_TP1", "ERROR", "10-06 18:54:30", '  File "x.py", line 1', "v1/executor/multiproc_executor.py:597"),
        ("(RayWorkerWrapper pid=1463574, ip=192.168.10.60) INFO 03-27 10:29:01 [worker.py:267] Memory profiling takes 4.26 seconds [repeated 30x across cluster]", "RayWorkerWrapper", "INFO", "03-27 10:29:01", "Memory profiling takes 4.26 seconds", "worker.py:267"),
        ("(VllmWorker rank=0 pid=12144) ERROR 04-30 16:21:27 [multiproc_executor.py:380]     self.cuda_graph.capture_end()", "VllmWorker rank=0", "ERROR", "04-30 16:21:27", "    self.cuda_graph.capture_end()", "multiproc_executor.py:380"),
        ("2026-07-08T22:40:03.166684016Z (EngineCore pid=542) INFO 07-08 22:40:03 [monitor.py:53] torch.compile took 16.27 s in total", "EngineCore", "INFO", "07-08 22:40:03", "torch.compile took 16.27 s in total", "monitor.py:53"),
        ("EngineCore_DP0 pid=2109652) INFO 09-18 12:03:11 [default_loader.py:268] Loading weights took 0.42 seconds", "EngineCore_DP0", "INFO", "09-18 12:03:11", "Loading weights took 0.42 seconds", "default_loader.py:268"),
        ("INFO 05-23 09:31:22 [loader.py:458] Loading weights took 38.52 seconds", "", "INFO", "05-23 09:31:22", "Loading weights took 38.52 seconds", "loader.py:458"),
        ("(APIServer pid=9082) INFO:     Application startup complete.", "APIServer", "", "", "INFO:     Application startup complete.", ""),
        ("[2025-04-16 14:22:53 TP3] Scheduler hit an exception: Traceback (most recent call last):", "TP3", "", "2025-04-16 14:22:53", "Scheduler hit an exception: Traceback (most recent call last):", ""),
        ("[2025-07-02 07:41:59 DP7 TP7] max_total_tokens=131072 is larger than the profiled value -561981.", "DP7 TP7", "", "2025-07-02 07:41:59", "max_total_tokens=131072 is larger than the profiled value -561981.", ""),
        ("[2025-11-30 11:18:05] INFO:     Application startup complete.", "", "", "2025-11-30 11:18:05", "INFO:     Application startup complete.", ""),
        ("[TP0] Scheduler hit an exception: Traceback (most recent call last):", "TP0", "", "", "Scheduler hit an exception: Traceback (most recent call last):", ""),
        ('  File "/opt/x.py", line 3, in f', "", "", "", '  File "/opt/x.py", line 3, in f', ""),
        ("(Worker_TP0 pid=505) ", "Worker_TP0", "", "", "", ""),
    ],
)
def test_parse_header(line: str, process: str, level: str, ts: str, msg: str, tag: str) -> None:
    assert tuple(parse_header(line)) == (process, level, ts, msg, tag)


@pytest.mark.parametrize(
    ("process", "primary"),
    [("", True), ("EngineCore_DP0", True), ("Worker_TP0", True), ("Worker_TP0_EP0", True), ("TP0", True), ("DP0 TP0", True),
     ("Worker_TP1", False), ("TP3", False), ("DP2 TP2", False), ("VllmWorker rank=1", False), ("VllmWorker rank=0", True), ("Worker_TP10", False)],
)
def test_primary_process(process: str, primary: bool) -> None:
    assert is_primary_process(process) is primary


def test_every_adapter_has_a_usable_grammar() -> None:
    for adapter in all_adapters():
        g = adapter.grammar
        assert isinstance(g, LogGrammar) and g.engine == adapter.name
        for rule in g.stage_rules:
            assert set(rule.stages) <= set(STAGES) and len(rule.needle) >= 6
        for bar in g.bars:
            assert "(?P<n>" in bar.regex and "(?P<total>" in bar.regex


def test_sglang_second_weight_load_is_the_drafter() -> None:
    """SGLang loads the draft model in the same rank, as a second Load weight begin/end pair."""
    log = b"\n".join(
        [
            b"[2025-10-16 09:06:10 TP0] Load weight begin. avail mem=137.34 GB",
            b"[2025-10-16 09:06:10 TP1] Load weight begin. avail mem=137.29 GB",
            b"[2025-10-16 09:10:30 TP0] Load weight end. type=DeepseekV3ForCausalLM, dtype=torch.bfloat16, avail mem=21.73 GB, mem usage=115.61 GB.",
            b"[2025-10-16 09:10:31 TP0] Load weight begin. avail mem=21.70 GB",
            b"[2025-10-16 09:10:31 TP1] Load weight end. type=DeepseekV3ForCausalLM, dtype=torch.bfloat16, avail mem=21.70 GB, mem usage=115.59 GB.",
            b"[2025-10-16 09:10:40 TP0] Load weight end. type=LlamaForCausalLMEagle3, dtype=torch.bfloat16, avail mem=20.90 GB, mem usage=0.80 GB.",
            b"[2025-10-16 09:10:41 TP0] KV Cache is allocated. #tokens: 834615, K size: 54.12 GB, V size: 54.12 GB",
        ]
    )
    a = analyze_bytes(log + b"\n", "sglang")
    w, d = a.stage("weights"), a.stage("drafter")
    assert (w.status, w.started_at, w.ended_at) == ("done", "2025-10-16 09:06:10", "2025-10-16 09:10:30")
    assert (d.status, d.started_at, d.ended_at) == ("done", "2025-10-16 09:10:31", "2025-10-16 09:10:40")
    assert "LlamaForCausalLMEagle3" in d.detail
    assert a.stage("kv_cache").status == "running" and a.state == "loading"


def test_sglang_acceptance_is_recomputed_from_accept_len_when_steps_are_known() -> None:
    """2026 'Decode batch,' line; accept rate printed as (accepted drafts)/(proposed drafts) = (2.94-1)/3."""
    log = (
        b"[2026-04-22 15:10:00] server_args=ServerArgs(model_path='moonshotai/Kimi-K2.6', speculative_algorithm='EAGLE3', speculative_num_steps=3, speculative_eagle_topk=1, speculative_num_draft_tokens=4)\n"
        b"[2026-04-22 15:20:00 TP0] Decode batch, #running-req: 1, #token: 412, token usage: 0.00, accept len: 2.94, accept rate: 0.65, cuda graph: True, gen throughput (token/s): 165.59, #queue-req: 0, \n"
    )
    a = analyze_bytes(log, "sglang")
    assert a.spec_decode is not None
    assert a.spec_decode.mean_acceptance_length == pytest.approx(2.94)
    assert a.spec_decode.acceptance_rate == pytest.approx((2.94 - 1) / 3)
    assert a.state == "ready" and a.throughput_series[-1].generation_tps == pytest.approx(165.59)


def test_capture_bar_progress_is_live_before_its_line_ends() -> None:
    """vLLM's CUDA-graph bar rewrites one line with \\r and ends it only when done: progress shows meanwhile."""
    from servelab.engines.logs.analyzer import LogAnalyzer

    an = LogAnalyzer(get_adapter("vllm").grammar)
    an.feed(b"(EngineCore_DP0 pid=188893) INFO 10-21 09:11:57 [kv_cache_utils.py:1087] GPU KV cache size: 425,424 tokens\n")
    an.feed(b"Capturing CUDA graphs (mixed prefill-decode, PIECEWISE):   0%|          | 0/51 [00:00<?, ?it/s]\r")
    an.feed(b"Capturing CUDA graphs (mixed prefill-decode, PIECEWISE):  47%|####      | 24/51 [00:00<00:00, 33.10it/s]\r")
    s = an.snapshot()
    p = s.stage("cuda_graphs").progress
    assert s.stage("cuda_graphs").status == "running" and p is not None and (p.done, p.total) == (0, 51)
    an.feed(b"Capturing")  # the \r before it is now known not to start a CRLF
    p = an.snapshot().stage("cuda_graphs").progress
    assert p is not None and (p.done, p.total) == (24, 51) and p.rate == pytest.approx(33.10)
    assert p.eta_s == pytest.approx(27 / 33.10)


def test_sglang_2026_capture_wording() -> None:
    """Lines as quoted in engine-grammar.md section 1.2 (after SGLang PR 28937)."""
    log = (
        b"[2026-07-01 10:00:00 TP0] Capture target decode CUDA graph begin. avail mem=16.09 GB\n"
        b"[2026-07-01 10:00:22 TP0] Capture target decode CUDA graph end. elapsed=22.18 s, mem usage=1.91 GB, avail mem=14.18 GB.\n"
    )
    a = analyze_bytes(log, "sglang")
    g = a.stage("cuda_graphs")
    assert (g.status, g.started_at, g.ended_at, g.detail) == ("done", "2026-07-01 10:00:00", "2026-07-01 10:00:22", "captured in 22.18 s")


def test_a_pasted_process_tag_without_its_paren_is_read_by_the_names_its_engine_gives() -> None:
    """The bare-tag form is an engine's own (its adapter's names), not the shared parser's: a third
    engine's grammar reads its names, vLLM's reads vLLM's, and neither reads the other's."""
    from servelab.engines.adapters.sglang import GRAMMAR as SGLANG
    from servelab.engines.adapters.vllm import BARE_PROCESSES
    from servelab.engines.logs.grammar import header_parser
    from servelab.engines.logs.grammar import parse_header as shared

    third = header_parser(("Trt",))
    line = "TrtWorker_7 pid=41) INFO 01-02 03:04:05 [runner.py:9] Loading weights took 1.5 seconds"
    assert third(line)[:4] == ("TrtWorker_7", "INFO", "01-02 03:04:05", "Loading weights took 1.5 seconds")
    for parse in (shared, SGLANG.parse, parse_header):
        assert parse(line).process == "" and parse(line).msg == line
    vllm_line = f"{BARE_PROCESSES[0]}_DP0 pid=9) INFO 01-02 03:04:05 [x.py:1] ready"
    assert parse_header(vllm_line).process == f"{BARE_PROCESSES[0]}_DP0"
    assert third(vllm_line).process == "" and SGLANG.parse(vllm_line).process == ""
