"""The calibration page as text: self-contained, and each marker where its offset says.
(``test_report_browser.py`` renders it in Chromium.)"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from detectors import DetectorConfig
from sidecar.traces.calibrate import ModelReport, calibrate
from sidecar.traces.report import LEFT, PLOT_W, page
from sidecar.traces.store import load

TRACES = Path(__file__).resolve().parents[1] / "data" / "traces"


def sample(directory: Path) -> Path:
    """A small recorded-looking directory: short loops (one with an onset) and healthy
    traces of two models."""
    lines = []
    for name, count in (("loops", 43), ("healthy", 12)):
        for line in (TRACES / f"{name}.jsonl").read_text(encoding="utf-8").splitlines()[:count]:
            record = json.loads(line)
            if len(record["text"]) < 20_000:
                record["model"] = "qwen3" if "Qwen3" in record["model"] else "other"
                lines.append(json.dumps(record))
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "traces.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return directory


@pytest.fixture(scope="module")
def reports(tmp_path_factory: pytest.TempPathFactory) -> list[ModelReport]:
    directory = sample(tmp_path_factory.mktemp("report"))
    return calibrate(load(directory), lambda m: (DetectorConfig(), None), min_healthy=5)


def test_the_page_needs_nothing_from_outside(reports: list[ModelReport]) -> None:
    """No script, no stylesheet or image to fetch, no URL but the SVG namespace."""
    html = page(reports, margin=1.5)
    assert "<script" not in html
    assert "<link" not in html
    assert "src=" not in html
    assert "url(" not in html
    assert "@import" not in html
    urls = set(re.findall(r"https?://[^'\" >]+", html))
    assert urls == {"http://www.w3.org/2000/svg"}


def test_markers_sit_at_their_offsets(reports: list[ModelReport]) -> None:
    """Each chart's fired line and onset line are at ``offset / text length`` of the
    plot's width, and every trace that fires has its fired line."""
    html = page(reports, margin=1.5)
    charts = re.findall(r"<svg class='chart' data-id='([^']*)' data-chars='(\d+)'(.*?)</svg>",
                        html, re.S)
    fired = {s.trace.id: r.current.fired[s.trace.id][0] for r in reports for s in r.items}
    assert len(charts) == len(fired)
    marked = 0
    for cid, chars, body in charts:
        for cls, at, x in re.findall(
                r"<line class='(fired|onset)' data-at='(\d+)' x1='([\d.]+)'", body):
            assert float(x) == pytest.approx(LEFT + PLOT_W * int(at) / int(chars), abs=0.01)
            if cls == "fired":
                assert int(at) == fired[cid]
                marked += 1
    assert marked == sum(at is not None for at in fired.values()) >= 3


def test_past_the_limit_traces_are_listed_without_a_chart(reports: list[ModelReport]) -> None:
    """``limit`` bounds the charts; the other traces are still named."""
    html = page(reports, margin=1.5, limit=2)
    assert html.count("<svg class='chart'") == 2
    assert "past the page's limit" in html
