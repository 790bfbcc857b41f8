"""The data-quality summary in the terminal (`ticdc-lake dq-report`), from the lake read API."""

from __future__ import annotations

from ticdc_lake.quality.lakeview import LakeView, duration_text, tso_text


def render_summary(view: LakeView) -> str:
    lines = [f"Lake: {view.config.lake}"]
    for feed in view.changefeeds:
        mark = f"watermark {tso_text(feed.watermark)}" if feed.watermarks else "no watermarks"
        lag = f", lag {duration_text(feed.lag_seconds)}" if feed.lag_seconds is not None else ""
        lines.append(f"  changefeed {feed.name}: {mark}{lag}")
        for partition in feed.stuck:
            lines.append(
                f"    stuck: {partition.topic}[{partition.partition}] at "
                f"{tso_text(partition.resolved_ts)}, "
                f"{duration_text(partition.behind_seconds)} behind"
            )
    for table in view.gold:
        at = tso_text(table.watermark)
        lines.append(f"  gold {table.table}: {table.rows:,} rows, {table.mode} at {at}")
    for topic, count in sorted(view.quarantine.items()):
        lines.append(f"  quarantined by decode: {count:,} records of {topic}")
    for check, count in sorted(view.quality_quarantine.items()):
        lines.append(f"  quarantined by check {check}: {count:,} rows")
    latest = view.latest
    if not latest:
        lines.append("Data quality: no validation recorded yet")
    for stage, rows in latest.items():
        failed = [row for row in rows if not row["success"]]
        lines.append(
            f"Data quality, {stage} (batch {rows[0]['batch']}): "
            f"{len(rows) - len(failed)} of {len(rows)} checks passed"
        )
        for row in failed:
            table = f" {row['table']}" if row.get("table") else ""
            why = f"; {row['message']}" if row.get("message") else ""
            lines.append(
                f"  {row['policy'].upper()} {row['check']}{table}: "
                f"{row['unexpected_count']} unexpected{why}"
            )
    if view.failed_stages:
        lines.append(f"Failed `fail` checks in: {', '.join(view.failed_stages)}")
    return "\n".join(lines)
