"""One streamed chat completion, timed the way ``vllm bench serve`` times it.

- TTFT: the first SSE message carrying ``choices``; E2E: the last such message (the trailing
  usage-only message does not count). vLLM and SGLang write the role-only opening message in the
  same engine step as the first token (the kernel receives both in one read), so stopping the
  clock there is the first token's time and keeps the figure comparable with ``vllm bench serve``.
  An empty delta without the role (a byte-level token that is not yet a whole UTF-8 character)
  still counts as a step.
- Times are the kernel's receive times where the timer has them (``engines/helpers/timed_client.py``),
  else when the line was read.
- Output tokens come from the server's ``usage`` (``stream_options.include_usage``), never from
  counting chunks: with speculative decoding one chunk can carry several accepted tokens.
- TPOT = (E2E - TTFT) / (n - 1) from those token counts; the per-chunk gaps are kept separately
  and named ``chunk_itl_ms`` so nobody reads them as per-token latency.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

import httpx

from servelab.engines.adapters.exchange import Prompt


@dataclass
class RequestResult:
    """What one timed request measured."""

    prompt_id: str
    category: str
    ok: bool = False
    error: str | None = None
    start: float = 0.0
    ttft_ms: float | None = None
    e2el_ms: float | None = None
    tpot_ms: float | None = None
    prompt_tokens: int | None = None
    output_tokens: int = 0
    #: Stream messages after the role message: one per engine step (several tokens with speculation).
    content_chunks: int = 0
    tokens_per_chunk: float | None = None
    chunk_itl_ms: list[float] = field(default_factory=list)
    finish_reason: str | None = None
    eos: bool = False
    #: How long the timed client waited for a CPU during this request (its figures are late by up to this).
    client_cpu_wait_ms: float | None = None
    text: str = ""
    #: The last payload seen (usage and engine extras), for acceptance windows.
    last_payload: dict[str, Any] = field(default_factory=dict, repr=False)

    def record(self) -> dict[str, Any]:
        """The JSONL row (without the raw payload)."""
        row = asdict(self)
        row.pop("last_payload", None)
        return row


def chat_body(model: str, prompt: Prompt, max_tokens: int, extra: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """Greedy, fixed length, streamed with usage: the same request on every engine."""
    body: dict[str, Any] = {
        "model": model,
        "messages": [dict(m) for m in prompt.messages],
        "max_tokens": max_tokens,
        "temperature": 0.0,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    body.update(extra or {})
    return body


#: One SSE ``data:`` line as the timer saw it: (ms since the request was sent, ms by the kernel's
#: receive time or None, the line). The kernel time, where there is one, is what the figures use.
Event = tuple[float, float | None, str]


def _event_ms(event: Event) -> float:
    return event[1] if event[1] is not None else event[0]


def _is_step(choice: Mapping[str, Any]) -> bool:
    """Whether a choice message is an engine step's output, not only the role-only opening message.

    A message without the role but with empty content is a step: a byte-level token that is not
    yet a whole UTF-8 character is held back, yet the step happened.
    """
    delta = choice.get("delta") or {}
    return "role" not in delta or bool(delta.get("content")) or bool(choice.get("finish_reason"))


def result_from_events(prompt: Prompt, events: list[Event], *, start: float = 0.0, error: str | None = None) -> RequestResult:
    """The figures of one streamed request from its timed ``data:`` lines (both timers share this).

    TTFT stops at the first message with choices, E2E at the last one; content chunks count engine
    steps (see :func:`_is_step`). Errors are recorded, never raised.
    """
    res = RequestResult(prompt_id=prompt.id, category=prompt.category, start=start)
    if error is not None:
        res.error = error
        return res
    last_choice_at: float | None = None
    pieces: list[str] = []
    for event in events:
        now = _event_ms(event)
        data = event[2][5:].strip()
        if data == "[DONE]":
            break
        try:
            payload = json.loads(data)
        except json.JSONDecodeError:
            res.error = f"unparsable stream message: {data[:120]}"
            return res
        if not isinstance(payload, dict):
            res.error = f"unexpected stream message: {data[:120]}"
            return res
        if payload.get("error"):
            res.error = f"server error: {payload['error']}"
            return res
        choices = payload.get("choices") or []
        if choices:
            choice = choices[0]
            if res.ttft_ms is None:
                res.ttft_ms = now
            elif last_choice_at is not None:
                res.chunk_itl_ms.append(now - last_choice_at)
            last_choice_at = now
            if _is_step(choice):
                res.content_chunks += 1
            delta = choice.get("delta") or {}
            pieces.append(delta.get("content") or "")
            if choice.get("finish_reason"):
                res.finish_reason = choice["finish_reason"]
        usage = payload.get("usage")
        if usage:
            res.output_tokens = int(usage.get("completion_tokens") or 0)
            res.prompt_tokens = usage.get("prompt_tokens")
        res.last_payload = payload
    res.text = "".join(pieces)
    if res.ttft_ms is None or last_choice_at is None:
        res.error = "stream ended without any choice"
        return res
    res.e2el_ms = last_choice_at
    if res.output_tokens <= 0:
        res.error = "server reported no usage.completion_tokens (stream_options.include_usage unsupported?)"
        return res
    if res.output_tokens > 1:
        res.tpot_ms = (res.e2el_ms - res.ttft_ms) / (res.output_tokens - 1)
    if res.content_chunks:
        res.tokens_per_chunk = res.output_tokens / res.content_chunks
    res.eos = res.finish_reason == "stop"
    res.ok = True
    return res


async def stream_chat(
    http: httpx.AsyncClient,
    model: str,
    prompt: Prompt,
    max_tokens: int,
    extra: Mapping[str, Any] | None = None,
) -> RequestResult:
    """One streamed chat completion from servelab's own loop (readiness, warm-up); errors are recorded.

    Timed repeats go through :mod:`engines.probe.timer` instead, off this loop.
    """
    body = chat_body(model, prompt, max_tokens, extra)
    events: list[Event] = []
    start = time.perf_counter()
    try:
        async with http.stream("POST", "/v1/chat/completions", json=body) as resp:
            if resp.status_code != 200:
                detail = (await resp.aread()).decode(errors="replace")[:300]
                return result_from_events(prompt, [], start=start, error=f"HTTP {resp.status_code}: {' '.join(detail.split())}")
            async for line in resp.aiter_lines():
                if line.startswith("data:"):  # blank separators and ':' keep-alive comments are skipped
                    events.append(((time.perf_counter() - start) * 1000.0, None, line))
    except httpx.HTTPError as exc:
        return result_from_events(prompt, [], start=start, error=f"{type(exc).__name__}: {exc}")
    return result_from_events(prompt, events, start=start)


async def until_listening(base_url: str, timeout_s: float = 30.0, poll_s: float = 0.2) -> bool:
    """Wait until the server at ``base_url`` accepts a connection (any HTTP answer counts); False when
    it did not within ``timeout_s`` (the caller's own request then says what is wrong).

    A log may say ready a moment before its server listens: vLLM logs its front end's start and route
    list once the engine is up, on a port it bound before building the engine, and uvicorn starts
    listening on it right after. Whatever acts on "ready" with a request of its own waits here first.
    """
    deadline = time.monotonic() + timeout_s
    async with httpx.AsyncClient(base_url=base_url, timeout=httpx.Timeout(5.0), trust_env=False) as http:
        while True:
            try:
                await http.get("/health")
                return True
            except httpx.TransportError:  # refused or reset while the listener starts
                if time.monotonic() >= deadline:
                    return False
                await asyncio.sleep(poll_s)
