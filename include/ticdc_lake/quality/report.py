"""The data-quality report: one self-contained HTML page rendered from the lake (LakeView).

    html = render_report(lake_view(config))   # pure: the view in, the page out
    path = write_report(config)               # <reports>/quality.html

Offline by construction: inline CSS, charts as inline SVG, no script, no external URL, so the
page reads the same from a file, a mail attachment or the Airflow plugin. Every text from the
lake goes through ``html.escape``.
"""

from __future__ import annotations

import datetime as dt
import json
import os
from collections.abc import Callable, Sequence
from html import escape
from pathlib import Path
from typing import Any

from ticdc_lake.config import PipelineConfig
from ticdc_lake.quality.lakeview import (
    LakeView,
    duration_text,
    lake_view,
    report_file,
    tso_text,
)

_SAMPLE_ROWS = 5
_CSS = """
body{font:14px/1.4 system-ui,sans-serif;margin:24px;color:#1d2430;background:#fff}
h1{font-size:22px;margin:0 0 4px}
h2{font-size:17px;margin:28px 0 8px;border-bottom:1px solid #d5dae1}
.meta{color:#5b6675} table{border-collapse:collapse;margin:4px 0 12px;min-width:50%}
th,td{text-align:left;padding:4px 10px;border-bottom:1px solid #e3e7ec;vertical-align:top}
th{background:#f1f4f7;font-weight:600} td.num{text-align:right;font-variant-numeric:tabular-nums}
.badge{display:inline-block;padding:1px 8px;border-radius:10px;font-size:12px;font-weight:600}
.ok{background:#d8f3dc;color:#1b5e20} .fail{background:#fde0e0;color:#9b1c1c}
.warn{background:#fff1c2;color:#7a5200} .none{background:#e8ebef;color:#4a5563}
.banner{padding:10px 14px;border-radius:6px;margin:12px 0;font-weight:600}
pre{background:#f6f8fa;padding:6px 8px;margin:4px 0;font-size:12px;overflow-x:auto;max-width:1100px}
.charts{display:flex;gap:18px;flex-wrap:wrap} figure{margin:0}
figcaption{font-size:13px;color:#3b4552;margin-bottom:2px}
"""


def render_report(view: LakeView) -> str:
    """The report page for ``view``: status, changefeeds, latest run per stage (failures first
    with their samples), trends, gold tables and quarantine."""
    generated = dt.datetime.fromtimestamp(view.now, dt.UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
    body = [
        "<h1>TiCDC lake: data quality</h1>",
        f'<div class="meta">Lake <code>{escape(str(view.config.lake))}</code> '
        f"&middot; as of {generated}</div>",
        _status(view),
        "<h2>Changefeeds</h2>",
        _changefeeds(view),
        "<h2>Latest validation per stage</h2>",
        _latest(view),
        "<h2>Trends over the last runs</h2>",
        _trends(view),
        "<h2>Gold tables</h2>",
        _gold(view),
        "<h2>Quarantine</h2>",
        _quarantine(view),
    ]
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        "<title>TiCDC lake: data quality</title>"
        f"<style>{_CSS}</style></head><body>\n" + "\n".join(body) + "\n</body></html>\n"
    )


def write_report(config: PipelineConfig, view: LakeView | None = None) -> Path:
    """Render the lake's report to ``<reports>/quality.html``; a reader never sees half a page
    (written beside it, then renamed over)."""
    path = report_file(config)
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        partial.write_text(render_report(view or lake_view(config)), encoding="utf-8")
        os.replace(partial, path)
    finally:
        partial.unlink(missing_ok=True)
    return path


def _badge(text: str, kind: str) -> str:
    return f'<span class="badge {kind}">{escape(text)}</span>'


def _table(
    headers: Sequence[str], rows: Sequence[Sequence[str]], numeric: frozenset[int] = frozenset()
):
    head = "".join(f"<th>{escape(h)}</th>" for h in headers)
    lines = [
        "<tr>"
        + "".join(
            f'<td class="num">{c}</td>' if i in numeric else f"<td>{c}</td>"
            for i, c in enumerate(row)
        )
        + "</tr>"
        for row in rows
    ]
    return f"<table><tr>{head}</tr>{''.join(lines)}</table>"


def _ts_cell(ts: int | None) -> str:
    """A TSO and the time it stands for."""
    if ts is None:
        return "-"
    return f'{ts} <span class="meta">({escape(tso_text(ts))})</span>'


def _status(view: LakeView) -> str:
    if not view.latest:
        text, kind = (
            "No data-quality results yet: run the pipeline's checks to fill this page.",
            "none",
        )
    elif view.failed_stages:
        text, kind = f"Failing stages: {', '.join(view.failed_stages)}", "fail"
    elif any(not r["success"] for rows in view.latest.values() for r in rows):
        text, kind = "Every stage passes its fail checks; some warnings below.", "warn"
    else:
        text, kind = "Every check of the latest validations passed.", "ok"
    return f'<div class="banner {kind}">{escape(text)}</div>'


def _changefeeds(view: LakeView) -> str:
    if not view.changefeeds:
        return "<p>No changefeed configured.</p>"
    rows = []
    for feed in view.changefeeds:
        if not feed.watermarks:
            mark = (
                f"cut-off {feed.cutoff_ts} ({tso_text(feed.cutoff_ts)})"
                if feed.cutoff_ts
                else "none"
            )
            rows.append(
                [escape(feed.name), escape(mark), "-", "-", _badge("no watermarks", "none")]
            )
            continue
        stuck = ", ".join(f"{p.topic}/{p.partition}" for p in feed.stuck)
        rows.append(
            [
                escape(feed.name),
                _ts_cell(feed.watermark),
                escape(duration_text(feed.lag_seconds)),
                escape(stuck or "-"),
                _badge("stuck", "fail") if stuck else _badge("moving", "ok"),
            ]
        )
    return _table(["changefeed", "watermark", "lag", "stuck partitions", "state"], rows)


def _latest(view: LakeView) -> str:
    latest = view.latest
    if not latest:
        return "<p>No validation has run yet.</p>"
    parts = []
    for stage, rows in latest.items():
        first = rows[0]
        failed = sum(not r["success"] for r in rows)
        parts.append(
            f"<h3>{escape(stage)} &middot; batch {first['batch']} &middot; "
            f"{escape(str(first['finished_at'])[:19])} &middot; "
            f"{len(rows) - failed} of {len(rows)} passed</h3>"
        )
        parts.append(
            _table(
                ["status", "check", "policy", "where", "unexpected", "message / sample"],
                [_check_row(row) for row in rows],
                numeric={4},
            )
        )
    return "\n".join(parts)


def _check_row(row: dict[str, Any]) -> list[str]:
    if row["success"]:
        status = _badge("pass", "ok")
    else:
        status = _badge(row["policy"], "warn" if row["policy"] == "warn" else "fail")
    where = "/".join(part for part in (row["changefeed"], row["table"]) if part)
    detail = escape(row["message"] or "") if not row["success"] else ""
    sample = json.loads(row["sample"] or "[]") if not row["success"] else []
    if sample:
        shown = "\n".join(
            json.dumps(item, default=str, sort_keys=True) for item in sample[:_SAMPLE_ROWS]
        )
        more = f"\n… {len(sample) - _SAMPLE_ROWS} more" if len(sample) > _SAMPLE_ROWS else ""
        detail += f"<pre>{escape(shown + more)}</pre>"
    return [status, escape(row["check"]), escape(row["policy"]), escape(where or "-"),
            str(row["unexpected_count"] or 0), detail]  # fmt: skip


def _max_lag(observed: dict[str, Any]) -> float | None:
    lags = [v for v in (observed.get("lag_seconds") or {}).values() if v is not None]
    return max(lags) if lags else None


_TRENDS: tuple[tuple[str, str, Callable[[dict], Any], Callable[[float], str]], ...] = (
    (
        "Decode rate (lowest topic)",
        "decode_rate",
        lambda o: o.get("min_rate"),
        lambda v: f"{v:.2%}",
    ),
    (
        "Records quarantined by decode",
        "decode_rate",
        lambda o: o.get("quarantined"),
        lambda v: f"{v:.0f}",
    ),
    ("Watermark lag (worst changefeed)", "freshness_lag", _max_lag, duration_text),
)


def _trends(view: LakeView) -> str:
    charts = []
    for title, check, pick, label in _TRENDS:
        points = view.trend(check, pick)
        charts.append(
            f"<figure><figcaption>{escape(title)}</figcaption>{sparkline(points, label)}</figure>"
        )
    return f'<div class="charts">{"".join(charts)}</div>'


def sparkline(
    points: Sequence[tuple[str, float]],
    label: Callable[[float], str],
    width: int = 320,
    height: int = 110,
) -> str:
    """A small line chart as inline SVG: the points in run order, the last value and the range."""
    frame = f'<svg width="{width}" height="{height}" role="img">'
    frame += (
        f'<rect x="0.5" y="0.5" width="{width - 1}" height="{height - 1}" '
        'fill="#fafbfc" stroke="#d5dae1"/>'
    )
    if not points:
        return (
            frame
            + f'<text x="{width // 2}" y="{height // 2}" text-anchor="middle" fill="#7a8594" '
            + 'font-size="12">no runs yet</text></svg>'
        )
    values = [value for _, value in points]
    low, high = min(values), max(values)
    span = (high - low) or 1.0
    left, right, top, bottom = 8, width - 8, 22, height - 22
    step = (right - left) / max(len(values) - 1, 1)
    coords = [
        (left + i * step, bottom - (value - low) / span * (bottom - top))
        for i, value in enumerate(values)
    ]
    line = " ".join(f"{x:.1f},{y:.1f}" for x, y in coords)
    dots = "".join(f'<circle cx="{x:.1f}" cy="{y:.1f}" r="2.5" fill="#2f6fde"/>' for x, y in coords)
    return (
        frame
        + f'<polyline points="{line}" fill="none" stroke="#2f6fde" stroke-width="2"/>{dots}'
        + '<text x="8" y="15" font-size="12" fill="#1d2430">'
        + f"last {escape(label(values[-1]))}</text>"
        + f'<text x="{right}" y="15" font-size="11" fill="#5b6675" text-anchor="end">'
        + f"range {escape(label(low))} – {escape(label(high))}</text>"
        + f'<text x="8" y="{height - 6}" font-size="10" fill="#7a8594">'
        + f"{escape(points[0][0])}</text>"
        + f'<text x="{right}" y="{height - 6}" font-size="10" fill="#7a8594" text-anchor="end">'
        + f"{escape(points[-1][0])} ({len(points)} runs)</text></svg>"
    )


def _gold(view: LakeView) -> str:
    if not view.gold:
        return "<p>No gold table yet.</p>"
    kinds = {"watermark": "ok", "cutoff": "warn"}
    rows = [
        [
            escape(table.changefeed),
            escape(table.table) + (" " + _badge("dropped", "none") if table.dropped else ""),
            _badge(table.mode, kinds.get(table.mode, "fail")),
            _ts_cell(table.watermark),
            str(table.rows),
            escape(table.reason or ""),
        ]
        for table in view.gold
    ]
    return _table(
        ["changefeed", "table", "mode", "reflects TS", "rows", "reason"], rows, numeric={4}
    )


def _quarantine(view: LakeView) -> str:
    rows = [["decode", escape(topic), str(n)] for topic, n in sorted(view.quarantine.items())]
    rows += [
        ["check", escape(check), str(n)] for check, n in sorted(view.quality_quarantine.items())
    ]
    if not rows:
        return "<p>Nothing quarantined.</p>"
    return _table(["by", "topic / check", "records"], rows, numeric={2})
