"""A campaign on a host reached over the real sshd: the link is cut mid-campaign and nothing is lost."""

from __future__ import annotations

import asyncio
import json
import time

import pytest

from servelab.engines.campaign import control
from servelab.engines.catalog.folder import load_catalog
from servelab.engines.errors import ServelabError
from servelab.engines.hosts.registry import close_all
from tests.fixtures.campaignlab import marked, two_load_campaign
from tests.fixtures.runlab import Lab
from tests.fixtures.sshd import SshServer

pytestmark = pytest.mark.ssh


async def test_cut_link_does_not_pause_the_queue(downable_sshd: SshServer, lab: Lab) -> None:
    two_load_campaign(lab, tokens="0.01", host="box")
    st = await control.start(load_catalog(lab.folder), "sweep", skip_preflight=True)
    state_path = lab.remote_workdir / "campaigns" / st.id / "state.json"
    assert st.host == "box" and state_path.is_file()
    t0 = time.monotonic()
    while not any(p["status"] == "running" for p in json.loads(state_path.read_text())["points"].values()):
        assert time.monotonic() - t0 < 60
        await asyncio.sleep(0.05)
    downable_sshd.go_down()  # every SSH session is cut, the listener is gone
    try:
        await close_all()
        with pytest.raises(ServelabError, match="box"):
            await control.status(load_catalog(lab.folder), st.id)
        t0 = time.monotonic()
        while json.loads(state_path.read_text())["status"] != "done":  # the host's own file: the queue goes on
            assert time.monotonic() - t0 < 120, state_path.read_text()
            await asyncio.sleep(0.2)
    finally:
        downable_sshd.come_back()
    final = await control.status(load_catalog(lab.folder), st.id)
    assert final.status == "done" and [p.status for p in final.points] == ["done"] * 4
    assert marked({ld.run_id for ld in final.loads if ld.run_id}) == []
