"""spark-submit entry point of the compact stage: silver → gold (ticdc_lake.stages.compact).

    spark-submit spark_jobs/compact.py --config pipeline.yaml
    spark-submit spark_jobs/compact.py --config pipeline.yaml --changefeed feed --until-ts TSO
    spark-submit spark_jobs/compact.py --config pipeline.yaml --changefeed feed --rebuild

Prints the stage's result as one JSON object; exits 1 when some gold table failed (the result
names it and why; the other tables were compacted).
"""

from __future__ import annotations

import argparse
import json
import sys

from ticdc_lake.config import load_config
from ticdc_lake.gold.exceptions import CompactError
from ticdc_lake.spark import build_session
from ticdc_lake.stages.compact import compact


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", required=True, help="the pipeline config (YAML)")
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
    config = load_config(args.config)
    spark = build_session("ticdc-lake-compact")
    try:
        result = compact(
            spark, config, changefeeds=args.changefeeds, until_ts=args.until_ts,
            rebuild=args.rebuild,
        )  # fmt: skip
    except CompactError as exc:
        print(json.dumps(exc.result.to_dict()))
        print(f"compact: {exc}", file=sys.stderr)
        return 1
    print(json.dumps(result.to_dict()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
