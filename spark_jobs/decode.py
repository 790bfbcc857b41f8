"""spark-submit entry point of the decode stage: bronze → silver (ticdc_lake.stages.decode).

    spark-submit spark_jobs/decode.py --config pipeline.yaml
    spark-submit spark_jobs/decode.py --config pipeline.yaml --redecode-batches 3 4
    spark-submit spark_jobs/decode.py --config pipeline.yaml --start-ts TSO --end-ts TSO

Prints the stage's result as one JSON object.
"""

from __future__ import annotations

import argparse
import json
import sys

from ticdc_lake.config import load_config
from ticdc_lake.spark import build_session
from ticdc_lake.stages.decode import decode, redecode


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", required=True, help="the pipeline config (YAML)")
    parser.add_argument(
        "--redecode-batches",
        nargs="+",
        type=int,
        metavar="BATCH",
        help="re-derive silver for these decoded bronze batches instead of decoding new ones",
    )
    parser.add_argument("--start-ts", type=int, help="re-derive the batches touching this TS...")
    parser.add_argument("--end-ts", type=int, help="...up to this TS (inclusive)")
    args = parser.parse_args(argv)
    if (args.start_ts is None) != (args.end_ts is None):
        parser.error("--start-ts and --end-ts go together")
    if args.redecode_batches and args.start_ts is not None:
        parser.error("give --redecode-batches or a TS range, not both")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    config = load_config(args.config)
    spark = build_session("ticdc-lake-decode")
    if args.redecode_batches:
        result = redecode(spark, config, batches=args.redecode_batches)
    elif args.start_ts is not None:
        result = redecode(spark, config, start_ts=args.start_ts, end_ts=args.end_ts)
    else:
        result = decode(spark, config)
    print(json.dumps(result.to_dict()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
