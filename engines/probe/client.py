"""One streamed chat completion, timed the way ``vllm bench serve`` times it.

- TTFT: first SSE message carrying ``choices``; E2E: the last such message (the trailing
  usage-only message does not count).
- Output tokens come from the server's ``usage`` (``stream_options.include_usage``), never from
  counting chunks: with speculative decoding one chunk can carry several accepted tokens.
- TPOT = (E2E - TTFT) / (n - 1) from those token counts; the per-chunk gaps are kept separately
  and named ``chunk_itl_ms`` so nobody reads them as per-token latency.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

import httpx

from engines.probe.prompts import Prompt


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


async def stream_chat(
    http: httpx.AsyncClient,
    model: str,
    prompt: Prompt,
    max_tokens: int,
    extra: Mapping[str, Any] | None = None,
) -> RequestResult:
    """Send one streamed chat completion and time it; errors are recorded, never raised."""
    res = RequestResult(prompt_id=prompt.id, category=prompt.category)
    body = chat_body(model, prompt, max_tokens, extra)
    res.start = start = time.perf_counter()
    last_choice_at: float | None = None
    pieces: list[str] = []
    try:
        async with http.stream("POST", "/v1/chat/completions", json=body) as resp:
            if resp.status_code != 200:
                detail = (await resp.aread()).decode(errors="replace")[:300]
                res.error = f"HTTP {resp.status_code}: {' '.join(detail.split())}"
                return res
            async for line in resp.aiter_lines():
                now = time.perf_counter()
                if not line.startswith("data:"):
                    continue  # blank separators and ':' keep-alive comments
                data = line[5:].strip()
                if data == "[DONE]":
                    break
                try:
                    payload = json.loads(data)
                except json.JSONDecodeError:
                    res.error = f"unparsable stream message: {data[:120]}"
                    return res
                if payload.get("error"):
                    res.error = f"server error: {payload['error']}"
                    return res
                choices = payload.get("choices") or []
                if choices:
                    if res.ttft_ms is None:
                        res.ttft_ms = (now - start) * 1000.0
                    elif last_choice_at is not None:
                        res.chunk_itl_ms.append((now - last_choice_at) * 1000.0)
                    last_choice_at = now
                    choice = choices[0]
                    delta = choice.get("delta") or {}
                    content = delta.get("content") or ""
                    if "role" not in delta or content:
                        # One message per engine step: a byte-level tokenizer can hold back
                        # partial characters (empty content), but the step still happened.
                        res.content_chunks += 1
                    pieces.append(content)
                    if choice.get("finish_reason"):
                        res.finish_reason = choice["finish_reason"]
                usage = payload.get("usage")
                if usage:
                    res.output_tokens = int(usage.get("completion_tokens") or 0)
                    res.prompt_tokens = usage.get("prompt_tokens")
                res.last_payload = payload
    except httpx.HTTPError as exc:
        res.error = f"{type(exc).__name__}: {exc}"
        return res
    res.text = "".join(pieces)
    if res.ttft_ms is None or last_choice_at is None:
        res.error = "stream ended without any choice"
        return res
    res.e2el_ms = (last_choice_at - start) * 1000.0
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
