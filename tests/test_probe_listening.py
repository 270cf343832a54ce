"""A log may say ready a moment before its server listens (vLLM logs its front end's start on a port it
bound before building the engine; uvicorn listens on it right after): what acts on "ready" with a
request of its own waits for the listener first (``probe.client.until_listening``). Real sockets."""

from __future__ import annotations

import asyncio
import socket

from servelab.engines.probe.client import until_listening


async def _answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    await reader.readuntil(b"\r\n\r\n")
    writer.write(b"HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\nconnection: close\r\n\r\n")
    await writer.drain()
    writer.close()


async def test_a_port_bound_but_not_listening_is_waited_for_and_any_answer_counts() -> None:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))  # bound, as vLLM binds its port before the engine: connections are refused
    url = f"http://127.0.0.1:{sock.getsockname()[1]}"
    try:
        assert await until_listening(url, timeout_s=0.6, poll_s=0.1) is False
        waiting = asyncio.create_task(until_listening(url, timeout_s=30.0, poll_s=0.05))
        server = await asyncio.start_server(_answer, sock=sock)  # uvicorn takes the socket and listens
        async with server:
            assert await asyncio.wait_for(waiting, 30.0) is True  # a 404 is an answer: it listens
    finally:
        sock.close()
