"""Headless Chromium (Debian's chromium package) for the report's layout: widths at a viewport, images loaded,
a screenshot. Nothing is downloaded; the page is a local file and the browser's network features are off.

`python -m tests.unit.report.browser REPORT.html OUT.png` writes a 1280 px screenshot (docs/report-headline.png).
"""

from __future__ import annotations

import html
import json
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync", "--hide-scrollbars")
# Run once the page has loaded: the document's and every table's widths, every image's natural width.
PROBE = """<script>
window.addEventListener('load', function () {
  var wide = [];
  document.querySelectorAll('table').forEach(function (t, i) {
    if (t.scrollWidth > t.clientWidth) wide.push({table: i, scrollWidth: t.scrollWidth, clientWidth: t.clientWidth,
                                                  caption: t.caption ? t.caption.textContent : ''});
  });
  var out = document.createElement('pre');
  out.id = 'layout-probe';
  out.textContent = JSON.stringify({scrollWidth: document.documentElement.scrollWidth, viewport: window.innerWidth,
    tables: document.querySelectorAll('table').length, wide: wide,
    images: Array.prototype.map.call(document.images, function (im) { return im.naturalWidth; })});
  document.body.appendChild(out);
});
</script>"""
_RESULT = re.compile(r'<pre id="layout-probe">(.*?)</pre>', re.S)


def chromium() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser")


@dataclass(frozen=True)
class Layout:
    scroll_width: int  # document.documentElement.scrollWidth
    viewport: int  # window.innerWidth
    tables: int
    wide: list[dict[str, Any]]  # tables wider than their box (they would scroll sideways)
    images: list[int]  # naturalWidth of every <img>, 0 = not loaded


def _run(args: list[str], profile: Path) -> subprocess.CompletedProcess[str]:
    browser = chromium()
    if browser is None:
        raise RuntimeError("chromium is not installed (scripts/ensure-system.sh test installs it)")
    cmd = [browser, *FLAGS, f"--user-data-dir={profile}", *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=180, check=False)


def layout(page: Path, width: int, height: int = 2000) -> Layout:
    """Render ``page`` at ``width`` x ``height`` and measure it (a copy of the page gets the probe script)."""
    with tempfile.TemporaryDirectory() as tmp:
        probed = Path(tmp) / page.name
        probed.write_text(page.read_text(encoding="utf-8").replace("</body>", PROBE + "</body>"), encoding="utf-8")
        done = _run([f"--window-size={width},{height}", "--virtual-time-budget=10000", "--dump-dom",
                     probed.as_uri()], Path(tmp) / "profile")
        found = _RESULT.search(done.stdout)
        if found is None:
            raise RuntimeError(f"chromium gave no measurement (exit {done.returncode}): {done.stderr[-2000:]}")
        data = json.loads(html.unescape(found.group(1)))
    return Layout(data["scrollWidth"], data["viewport"], data["tables"], data["wide"], data["images"])


def screenshot(page: Path, png: Path, width: int = 1280, height: int = 2000) -> Path:
    with tempfile.TemporaryDirectory() as tmp:
        done = _run([f"--window-size={width},{height}", f"--screenshot={png.resolve()}", page.resolve().as_uri()],
                    Path(tmp) / "profile")
    if not png.is_file():
        raise RuntimeError(f"chromium wrote no screenshot (exit {done.returncode}): {done.stderr[-2000:]}")
    return png


if __name__ == "__main__":  # pragma: no cover - the docs' screenshot
    print(screenshot(Path(sys.argv[1]), Path(sys.argv[2])))
