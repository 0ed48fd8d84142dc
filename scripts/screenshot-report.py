"""Screenshots of a calibration page (``runaway-sidecar calibrate --html``) in Debian's
Chromium, through Playwright (``pip install -e '.[browser]'``; it downloads no browser).

    .venv/bin/python scripts/screenshot-report.py PAGE OUT_DIR [N ...]

Writes OUT_DIR/top.png (the top of the page, 1050 x 1500) and, for each N, OUT_DIR/model-N.png
(the page from model N's section on, ``#model-N``), and prints any console error.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

from playwright.sync_api import sync_playwright

ARGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync"]


def main() -> int:
    if len(sys.argv) < 3:
        print(__doc__)
        return 2
    page_path, out = Path(sys.argv[1]).resolve(), Path(sys.argv[2])
    out.mkdir(parents=True, exist_ok=True)
    errors: list[str] = []
    with tempfile.TemporaryDirectory() as profile, sync_playwright() as pw:
        context = pw.chromium.launch_persistent_context(
            profile, executable_path="/usr/bin/chromium", headless=True, args=ARGS,
            viewport={"width": 1050, "height": 1500})
        page = context.new_page()
        page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
        page.route("http*://**", lambda route: route.abort())
        page.goto(page_path.as_uri())
        page.screenshot(path=str(out / "top.png"))
        for n in sys.argv[3:]:
            top = page.evaluate(f"document.getElementById('model-{int(n)}')"
                                ".getBoundingClientRect().top + window.scrollY")
            page.screenshot(path=str(out / f"model-{int(n)}.png"), full_page=True,
                            clip={"x": 0, "y": max(0, top - 10), "width": 1050, "height": 1500})
        context.close()
    print(f"console errors: {errors or 'none'}")
    return 1 if errors else 0


if __name__ == "__main__":
    raise SystemExit(main())
