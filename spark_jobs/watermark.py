"""spark-submit entry point of the watermark stage: resolved events → watermarks
(ticdc_lake.silver.watermark).

    spark-submit spark_jobs/watermark.py --config pipeline.yaml

Prints the stage's result as one JSON object.
"""

from __future__ import annotations

from ticdc_lake.app.pipeline import job_main, job_parser
from ticdc_lake.runtime.process_exit import exit_now
from ticdc_lake.runtime.spark import build_session
from ticdc_lake.silver.watermark import watermark


def parse_args(argv: list[str] | None):
    return job_parser(__doc__).parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    return job_main("watermark", parse_args(argv), build_session, watermark)


if __name__ == "__main__":
    exit_now(main())
