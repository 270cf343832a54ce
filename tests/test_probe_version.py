"""The server's version is read from the paths its engine's adapter names (``version_paths``), over
real HTTP: a server that answers only on some paths shows which ones each engine's probe asks."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx
import pytest

from servelab.engines.adapters.base import all_adapters, any_version_paths, get_adapter
from servelab.engines.probe.runner import engine_version


class _Answers(BaseHTTPRequestHandler):
    answers: dict[str, str] = {}
    asked: list[str] = []

    def do_GET(self) -> None:  # noqa: N802 (http.server's name)
        self.asked.append(self.path)
        version = self.answers.get(self.path)
        body = json.dumps({"version": version}).encode() if version else b"{}"
        self.send_response(200 if version else 404)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *_args: object) -> None:
        pass


@pytest.fixture
def server() -> Iterator[tuple[str, type[_Answers]]]:
    handler = type("Answers", (_Answers,), {"answers": {}, "asked": []})
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}", handler
    finally:
        httpd.shutdown()
        httpd.server_close()


@pytest.mark.parametrize("engine", [a.name for a in all_adapters()])
async def test_each_engine_asks_its_own_paths_in_order_and_stops_at_the_first_answer(server: tuple[str, type[_Answers]], engine: str) -> None:
    url, handler = server
    paths = get_adapter(engine).version_paths
    assert paths
    handler.answers.update({paths[-1]: f"{engine}-last"})
    async with httpx.AsyncClient(base_url=url, trust_env=False) as http:
        assert await engine_version(http, get_adapter(engine)) == f"{engine}-last"
    assert handler.asked == list(paths)
    handler.asked.clear()
    handler.answers.update({paths[0]: f"{engine}-first"})
    async with httpx.AsyncClient(base_url=url, trust_env=False) as http:
        assert await engine_version(http, get_adapter(engine)) == f"{engine}-first"
    assert handler.asked == [paths[0]]


async def test_a_path_no_engine_of_the_run_names_is_not_asked_and_an_unknown_engine_asks_them_all(server: tuple[str, type[_Answers]]) -> None:
    url, handler = server
    only = next(p for p in any_version_paths() if p not in get_adapter("vllm").version_paths)
    handler.answers.update({only: "9.9"})
    async with httpx.AsyncClient(base_url=url, trust_env=False) as http:
        assert await engine_version(http, get_adapter("vllm")) is None
        assert only not in handler.asked
        assert await engine_version(http, None) == "9.9"
    assert set(handler.asked) <= set(any_version_paths()) and only in handler.asked
