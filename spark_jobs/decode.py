"""spark-submit entry point of the decode stage: bronze → silver (ticdc_lake.silver.decode).

    spark-submit spark_jobs/decode.py --config pipeline.yaml
    spark-submit spark_jobs/decode.py --config pipeline.yaml --redecode-batches 3 4
    spark-submit spark_jobs/decode.py --config pipeline.yaml --start-ts TSO --end-ts TSO

Prints the stage's result as one JSON object.
"""

from __future__ import annotations

from ticdc_lake.app.pipeline import job_main, job_parser
from ticdc_lake.runtime.process_exit import exit_now
from ticdc_lake.runtime.spark import build_session
from ticdc_lake.silver.decode import decode, redecode


def parse_args(argv: list[str] | None):
    parser = job_parser(__doc__)
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

    def work(spark, config):
        if args.redecode_batches:
            return redecode(spark, config, batches=args.redecode_batches)
        if args.start_ts is not None:
            return redecode(spark, config, start_ts=args.start_ts, end_ts=args.end_ts)
        return decode(spark, config)

    return job_main("decode", args, build_session, work)


if __name__ == "__main__":
    exit_now(main())
