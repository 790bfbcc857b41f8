"""Golden files for what a person reads about data quality: the HTML report's text,
`dq-report`'s summary and `dq-report --json`, all from the report tests' small lake of fixed
times (tests/golden_files.py says how to update them)."""

from __future__ import annotations

import json
import re
from html.parser import HTMLParser

from ticdc_lake.app.cli import main
from ticdc_lake.quality.lakeview import lake_view
from ticdc_lake.quality.report import render_report

from tests.golden_files import assert_golden, mask_keys, mask_paths
from tests.quality.report_lake import NOW, fill_lake, write_config

# dq-report measures lag against the clock of the moment it runs.
_LAG = re.compile(r"\blag \S+?(?=,|$)", re.MULTILINE)


class _VisibleText(HTMLParser):
    """The text a browser shows: one line per text node, scripts and styles left out."""

    def __init__(self) -> None:
        super().__init__()
        self.lines: list[str] = []
        self._hidden = 0

    def handle_starttag(self, tag, attrs) -> None:
        self._hidden += tag in ("script", "style")

    def handle_endtag(self, tag) -> None:
        self._hidden -= tag in ("script", "style")

    def handle_data(self, data) -> None:
        if not self._hidden and data.strip():
            self.lines.append(" ".join(data.split()))


def visible_text(html: str) -> str:
    parser = _VisibleText()
    parser.feed(html)
    return "\n".join(parser.lines) + "\n"


def test_the_report_reads_as_the_golden_text(tmp_path):
    config = write_config(tmp_path)
    fill_lake(config)
    html = render_report(lake_view(config, now=NOW.timestamp()))
    assert_golden("quality-report.txt", mask_paths(visible_text(html), {tmp_path: "tmp"}))


def test_dq_report_prints_the_golden_summary_and_json(tmp_path, capsys):
    config = write_config(tmp_path)
    fill_lake(config)
    assert main(["dq-report", "--config", str(config.source)]) == 1  # the lake has a failing stage
    text = _LAG.sub("lag <lag>", capsys.readouterr().out)
    assert_golden("dq-report.txt", mask_paths(text, {tmp_path: "tmp"}))
    assert main(["dq-report", "--config", str(config.source), "--json"]) == 1
    document = mask_keys(json.loads(capsys.readouterr().out), {"lag_seconds"})
    assert_golden("dq-report.json", mask_paths(json.dumps(document, indent=1), {tmp_path: "tmp"}))
