"""spark-submit entry point of the compact stage: silver → gold (ticdc_lake.gold.compact).

    spark-submit spark_jobs/compact.py --config pipeline.yaml
    spark-submit spark_jobs/compact.py --config pipeline.yaml --changefeed feed --until-ts TSO
    spark-submit spark_jobs/compact.py --config pipeline.yaml --changefeed feed --rebuild

Prints the stage's result as one JSON object; exits 1 when some gold table failed (the result
names it and why; the other tables were compacted).
"""

from __future__ import annotations

from ticdc_lake.app.pipeline import job_main, job_parser
from ticdc_lake.gold.compact import compact
from ticdc_lake.runtime.process_exit import exit_now
from ticdc_lake.runtime.spark import build_session


def parse_args(argv: list[str] | None):
    parser = job_parser(__doc__)
    parser.add_argument(
        "--changefeed",
        action="append",
        dest="changefeeds",
        metavar="NAME",
        help="compact only this changefeed (repeatable; default: every changefeed)",
    )
    parser.add_argument("--until-ts", type=int, help="compact no further than this TSO")
    parser.add_argument(
        "--rebuild", action="store_true", help="empty the gold tables and apply silver again"
    )
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    options = {"changefeeds": args.changefeeds, "until_ts": args.until_ts, "rebuild": args.rebuild}
    return job_main(
        "compact", args, build_session, lambda spark, config: compact(spark, config, **options)
    )


if __name__ == "__main__":
    exit_now(main())
