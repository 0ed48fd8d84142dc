"""The calibration page in a real browser: Debian's Chromium, driven by Playwright (never
a browser of Playwright's own). Marker ``browser``: the README's test command leaves it
out; ``.ci/run`` installs Chromium and Playwright and runs it.

It writes the page with ``runaway-sidecar calibrate --html``, opens it headless with no
network, and checks that it renders with no console error, that every trace that fires
has its fired marker at ``offset / text length`` of its chart's plot, and keeps a
screenshot (its path is printed; ``RUNAWAY_SIDECAR_ARTIFACTS`` names another directory).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.traces.test_report import sample

CHROMIUM = os.environ.get("RUNAWAY_SIDECAR_CHROMIUM", "/usr/bin/chromium")
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync"]


@pytest.mark.browser
def test_the_page_renders_with_each_marker_in_place(tmp_path: Path) -> None:
    """No console error; each fired marker's rendered x, relative to its plot, is its
    offset over the text's length; the screenshot is kept."""
    from playwright.sync_api import sync_playwright

    directory = sample(tmp_path / "traces")
    html = tmp_path / "report.html"
    proc = subprocess.run(
        [sys.executable, "-m", "sidecar", "calibrate", str(directory), "--json", "--html",
         str(html), "--min-healthy", "5"], capture_output=True, text=True, timeout=300,
        check=True)
    expected = {t["id"]: t for t in json.loads(proc.stdout)["traces"]}
    artifacts = Path(os.environ.get("RUNAWAY_SIDECAR_ARTIFACTS", tmp_path))
    artifacts.mkdir(parents=True, exist_ok=True)
    shot = artifacts / "calibration-report.png"
    errors: list[str] = []
    with sync_playwright() as pw:
        # A fresh profile of its own (Playwright passes it as --user-data-dir).
        context = pw.chromium.launch_persistent_context(
            tmp_path / "profile", executable_path=CHROMIUM, headless=True, args=ARGS,
            viewport={"width": 1050, "height": 1400})
        try:
            page = context.new_page()
            page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
            page.on("pageerror", lambda e: errors.append(str(e)))
            page.route("http*://**", lambda route: route.abort())  # no network at all
            page.goto(html.as_uri())
            page.wait_for_load_state("load")
            found: list[dict[str, Any]] = page.evaluate("""() =>
                [...document.querySelectorAll('svg.chart')].map(svg => {
                    const plot = svg.querySelector('rect.plot').getBoundingClientRect();
                    const fired = svg.querySelector('line.fired');
                    const box = fired && fired.getBoundingClientRect();
                    return {id: svg.dataset.id, chars: +svg.dataset.chars,
                            plotX: plot.x, plotW: plot.width,
                            firedX: box ? box.x + box.width / 2 : null};
                })""")
            page.screenshot(path=str(shot))
        finally:
            context.close()
    assert errors == []
    assert len(found) == len(expected)
    checked = 0
    for chart in found:
        want = expected[chart["id"]]
        assert chart["chars"] == want["chars"]
        if want["fired"] is None:
            assert chart["firedX"] is None, chart["id"]
            continue
        share = (chart["firedX"] - chart["plotX"]) / chart["plotW"]
        assert share == pytest.approx(want["fired"] / want["chars"], abs=0.003), chart["id"]
        checked += 1
    assert checked >= 3
    assert shot.stat().st_size > 10_000
    print(f"\nscreenshot of the calibration page: {shot}")
