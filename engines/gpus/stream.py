"""A host's GPUs, live: one long-lived ``helpers/gpusample.py --count 0`` on the host, itself reading one
long-lived ``nvidia-smi -lms`` (NVML initialised once), a JSON line a second read as a stream. This
is what an open run screen or host view costs the host; a one-shot sample (``sample.sample_host``,
for ``servelab gpus``) starts Python and nvidia-smi again each time.

:class:`GpuStream` is one such sampler (closing it ends it on the host, and what it started);
:func:`watch_host` gives its samples, and starts it again after a failure. A CPU host answers once,
``gpu=False``, and its sampler exits: nothing more is sampled.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator
from types import TracebackType

from servelab.engines.errors import ServelabError
from servelab.engines.gpus.parse import parse_line
from servelab.engines.gpus.sample import CAMPAIGNS_DIR, SAMPLER
from servelab.engines.gpus.inventory import HostGpus
from servelab.engines.gpus.watch import SAMPLE_S
from servelab.engines.helpers import HelperError, helper_script, last_line
from servelab.engines.hosts.base import Completed, Host, HostUnreachable, Streamed, host_workdir
from servelab.engines.hosts.scripts import SCRIPTS, ScriptUploadError

#: After a sampler failed (host unreachable, the sampler ended), seconds before starting another.
RETRY_S = 5.0


class GpuStream:
    """One long-lived sampler on ``host`` (``async with``: closed on the way out, however it is left)."""

    def __init__(self, host: Host, python: str | None = None, interval: float = SAMPLE_S) -> None:
        self.host = host
        self.python = python or host.config.python
        self.interval = interval
        self._stream: Streamed | None = None
        #: Samples read so far.
        self.samples = 0

    def _args(self) -> list[str]:
        locks = f"{host_workdir(self.host.config)}/{CAMPAIGNS_DIR}"
        return ["--count", "0", "--interval", f"{self.interval:g}", "--locks", locks]

    async def open(self) -> None:
        try:
            self._stream = await SCRIPTS.stream(self.host, self.python, helper_script(SAMPLER), *self._args())
        except ScriptUploadError as exc:
            raise HelperError(str(exc)) from None

    async def next(self) -> HostGpus:
        """The next sample (a CPU host: its one ``gpu=False`` answer). HelperError (one line) when the
        sampler ended; GpuSampleError when it printed something else than a sample."""
        if self._stream is None:
            await self.open()
        for attempt in (0, 1):
            assert self._stream is not None
            line = await self._stream.readline()
            while line and not line.strip():
                line = await self._stream.readline()
            if line:
                self.samples += 1
                return parse_line(self.host.name, line)
            code, err = await self._stream.finish()
            ended = Completed([SAMPLER], -1 if code is None else code, b"", err)
            await self.close()
            if attempt == 0 and self.samples == 0 and await SCRIPTS.recover(self.host, helper_script(SAMPLER), ended):
                await self.open()  # its upload had gone (workdir wiped): put back, started again once
                continue
            why = last_line(err) or f"exit code {code}"
            raise HelperError(f"{SAMPLER} ended on {self.host.name}: {why}")
        raise AssertionError("unreachable")

    async def close(self) -> None:
        stream, self._stream = self._stream, None
        if stream is not None:
            await stream.close()

    async def __aenter__(self) -> GpuStream:
        await self.open()
        return self

    async def __aexit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        await self.close()


async def watch_host(host: Host, python: str | None = None, interval: float = SAMPLE_S, retry_s: float = RETRY_S) -> AsyncGenerator[HostGpus | str, None]:
    """Samples of ``host`` as they come, from one sampler; a failure comes as its one-line reason
    (a str) and the sampler is started again ``retry_s`` later. Ends after a CPU host's ``gpu=False``
    answer. Use with ``contextlib.aclosing``: leaving it (or cancelling the task) ends the sampler."""
    while True:
        try:
            async with GpuStream(host, python, interval) as stream:
                while True:
                    sample = await stream.next()
                    yield sample
                    if not sample.gpu:
                        return
        except (ServelabError, HostUnreachable, OSError) as exc:
            yield f"GPUs: {exc}"
        await asyncio.sleep(retry_s)
