"""spark-submit entry point of a backfill by TS range (ticdc_lake.backfill).

    spark-submit spark_jobs/backfill.py --config pipeline.yaml --start-ts TS --end-ts TS
        [--tables '["schema.table", ...]'] [--dry-run]

TS: a TSO or an ISO-8601 time with a zone. Re-derives silver for the bronze batches touching
the range and rebuilds the touched changefeeds' gold to the watermark; a backfill that already
ran on an unchanged lake writes nothing. ``--tables`` is a JSON list (a table's name may hold a
comma); ``[]`` or left out: every table. Prints the result as one JSON object; a bad range or
table exits 2 with the reason.
"""

from __future__ import annotations

import sys

from ticdc_lake.app.pipeline import job_main, job_parser
from ticdc_lake.orchestration import BackfillParamError, parse_tables, parse_ts
from ticdc_lake.runtime.process_exit import exit_now


def parse_args(argv: list[str] | None):
    parser = job_parser(__doc__)
    parser.add_argument("--start-ts", required=True, help="TSO or ISO-8601 time with zone")
    parser.add_argument("--end-ts", required=True, help="TSO or ISO-8601 time (inclusive)")
    parser.add_argument(
        "--tables", default="[]", help="JSON list of schema.table names (default [], all)"
    )
    parser.add_argument("--dry-run", action="store_true", help="say what would be done, only")
    args = parser.parse_args(argv)
    try:
        args.start_ts = parse_ts(args.start_ts, "start_ts")
        args.end_ts = parse_ts(args.end_ts, "end_ts", end=True)
        args.tables = parse_tables(args.tables)
    except BackfillParamError as exc:
        parser.error(str(exc))
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    # pyspark is imported by the job's body only, after the arguments are known to be good.
    from ticdc_lake.backfill.run import run_backfill
    from ticdc_lake.runtime.spark import build_session

    def work(spark, config):
        return run_backfill(
            spark, config, args.start_ts, args.end_ts, args.tables, dry_run=args.dry_run
        )

    try:
        return job_main("backfill", args, build_session, work)
    except BackfillParamError as exc:
        print(f"backfill: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    exit_now(main())
