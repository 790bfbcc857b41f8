"""The HTML data-quality report, rendered from a real small lake, and shown by a real headless
Chromium (no network: every host maps to nothing)."""

from __future__ import annotations

import dataclasses
import re
import shutil
import subprocess
from html import escape

import numpy as np
import pytest
from ticdc_lake.quality.lakeview import lake_view, report_file
from ticdc_lake.quality.report import render_report, write_report

from tests.quality.png import png_pixels
from tests.quality.report_lake import (
    BAD_KEY,
    HOSTILE_FIELDS,
    NOW,
    WATERMARK,
    fill_hostile_lake,
    fill_lake,
    hostile,
    write_config,
)

_URL = re.compile(r"https?://|//[a-z0-9.-]+\.[a-z]{2,}/", re.IGNORECASE)
_FETCHING = re.compile(r"<(script|link|img|iframe|object|embed)\b|url\(|@import", re.IGNORECASE)


@pytest.fixture
def lake(tmp_path):
    config = write_config(tmp_path)
    fill_lake(config)
    return config


def assert_offline(html: str) -> None:
    assert not _URL.search(html), _URL.search(html)
    assert not _FETCHING.search(html), _FETCHING.search(html)


def test_report_shows_failures_first_with_samples_trends_and_gold(lake):
    html = render_report(lake_view(lake, now=NOW.timestamp()))
    assert_offline(html)
    assert "Failing stages: silver" in html
    silver = html[html.index("silver &middot; batch 4") : html.index("gold &middot; batch 13")]
    assert silver.index("handle_key_unique") < silver.index("commit_ts_plausible")
    assert BAD_KEY in silver and "a handle key appears twice" in silver
    assert str(WATERMARK) in html and "2026-11-20 11:30:00 UTC" in html  # gold TS and its time
    assert "30.0m" in html  # the changefeed's lag against the view's clock
    gold = html[html.index("<h2>Gold tables") :]
    assert "shop.orders" in gold and ">watermark<" in gold and ">inconsistent<" in gold
    assert "PARTITION BY HASH(id)" in gold
    charts = html[html.index("<h2>Trends") : html.index("<h2>Gold")]
    assert charts.count("<polyline") == 3 and charts.count("(4 runs)") == 3
    assert "last 97.00%" in charts and "last 40.0m" in charts and "last 3<" in charts


def test_report_escapes_what_the_lake_holds(tmp_path):
    config = write_config(tmp_path)
    fill_lake(config)
    view = lake_view(config, now=NOW.timestamp())
    view.gold[0] = dataclasses.replace(view.gold[0], reason="<script>x</script>")
    html = render_report(view)
    assert "<script>" not in html and "&lt;script&gt;x&lt;/script&gt;" in html


def assert_escaped(html: str) -> None:
    """Every hostile text of fill_hostile_lake is on the page, as text: no tag of it is."""
    assert "<script" not in html.lower() and "<b id=" not in html.lower()
    for field in HOSTILE_FIELDS:
        assert escape(hostile(field), quote=False) in html.replace("&quot;", '"'), field


def test_report_escapes_every_text_of_the_lake(tmp_path):
    """Table, column and value names, DDL and error text from the lake: all shown, as text."""
    config = write_config(tmp_path)
    fill_hostile_lake(config)
    html = render_report(lake_view(config, now=NOW.timestamp()))
    assert_escaped(html)
    assert_offline(html)


def test_report_renders_a_lake_with_no_results_yet(tmp_path):
    config = write_config(tmp_path)
    html = render_report(lake_view(config))
    assert_offline(html)
    assert "No data-quality results yet" in html and "No gold table yet" in html
    assert html.count("no runs yet") == 3


def test_write_report_goes_to_the_configured_reports_folder(lake):
    path = write_report(lake)
    assert path == report_file(lake) == lake.reports / "quality.html"
    assert "handle_key_unique" in path.read_text(encoding="utf-8")
    assert [p.name for p in path.parent.iterdir()] == ["quality.html"]  # no partial file left


@pytest.mark.browser
def test_chromium_renders_the_report_offline(lake, tmp_path):
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    if browser is None:
        pytest.skip("no chromium: `make test` installs it (apt-get install chromium)")
    page = write_report(lake)
    assert_offline(page.read_text(encoding="utf-8"))
    shot = tmp_path / "report.png"
    subprocess.run(
        [
            browser, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
            "--no-first-run", "--disable-background-networking", "--disable-component-update",
            "--disable-sync", f"--user-data-dir={tmp_path / 'profile'}",
            "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE localhost",
            "--window-size=1280,1600", f"--screenshot={shot}", page.as_uri(),
        ],
        check=True, capture_output=True, timeout=120,
    )  # fmt: skip
    pixels = png_pixels(shot)
    assert pixels.shape[:2] == (1600, 1280)
    colours = {tuple(c) for c in np.unique(pixels[..., :3].reshape(-1, 3), axis=0)}
    assert len(colours) > 50  # text, badges, charts: not a blank or single-colour page
    assert (253, 224, 224) in colours  # the failing banner's background (#fde0e0) was drawn
    assert (47, 111, 222) in colours  # the charts' line colour (#2f6fde)
