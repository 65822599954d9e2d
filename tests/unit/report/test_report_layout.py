"""report.html in headless Chromium at 1280 px: nothing scrolls sideways (neither the page nor any table in its
box) and every image loaded; for the demo's bundle (plain and tls x 65 and 100 B), with a fleet cell, for
`testbed compare`'s report and for the reference captures' bundle. The headline comes first in both report files."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest

from orchestrator.report import build_report
from orchestrator.report.compare import compare_bundles
from tests.golden import regenerate
from tests.skips import skip_or_fail
from tests.unit.report import browser
from tests.unit.report.conftest import make_bundle
from tests.unit.report.test_fleet_report import add_fleet_cell

WIDTH = 1280
RESAMPLES = 1000


@pytest.fixture(scope="module", autouse=True)
def _needs_chromium() -> None:
    if browser.chromium() is None:
        skip_or_fail("chromium is not installed: `bash scripts/ensure-system.sh test` installs it")


def _demo(root: Path) -> Path:
    make_bundle(root)  # what `make demo` sweeps: plain and tls, 65 and 100 B, 200 samples
    build_report(root, resamples=RESAMPLES)
    return root


def _with_fleet(root: Path) -> Path:
    make_bundle(root, payloads=(65,))
    rng = np.random.default_rng(3)
    add_fleet_cell(root, 1, 1.0 + rng.gamma(2.0, 0.1, 200), lost=1)
    build_report(root, resamples=RESAMPLES)
    return root


def _compared(root: Path) -> Path:
    make_bundle(root / "A", seed=1)
    shutil.copytree(root / "A", root / "B")
    compare_bundles(root / "A", root / "B", root, resamples=RESAMPLES)
    return root


def _reference(root: Path) -> Path:
    """Every reference capture and the fixture capture in one bundle (tests/golden): five scenarios, real numbers."""
    return regenerate.build(root)


@pytest.mark.parametrize("make", [_demo, _with_fleet, _compared, _reference],
                         ids=["demo", "fleet", "compare", "reference-captures"])
def test_nothing_scrolls_sideways_at_1280_px_and_every_image_loads(make, tmp_path: Path) -> None:  # noqa: ANN001
    page = make(tmp_path / "bundle") / "report.html"
    measured = browser.layout(page, WIDTH)
    assert measured.viewport == WIDTH
    assert measured.scroll_width <= measured.viewport, f"page {measured.scroll_width} px wide"
    assert measured.tables > 0 and measured.wide == [], f"tables wider than their box: {measured.wide}"
    assert len(measured.images) == page.read_text(encoding="utf-8").count("<img ")
    assert all(width > 0 for width in measured.images), f"images not loaded: {measured.images}"


def test_the_headline_comes_first(tmp_path: Path) -> None:
    root = _demo(tmp_path / "bundle")
    md = (root / "report.md").read_text(encoding="utf-8").splitlines()
    assert md[2] == "## Headline: what TLS costs over the baseline"
    html = (root / "report.html").read_text(encoding="utf-8")
    body = html.split("<body>", 1)[1]
    assert body.index("Headline: what TLS costs") < body.index("<table>") < body.index("This bundle")
