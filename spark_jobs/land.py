"""spark-submit entry point of the land stage: export files → bronze (ticdc_lake.bronze.land).

    spark-submit spark_jobs/land.py --config pipeline.yaml

Lands the new and changed files of the config's `inputs` as one bronze batch (or finishes the
batch a killed run left) and prints the stage's result as one JSON object.
"""

from __future__ import annotations

from ticdc_lake.app.pipeline import job_main, job_parser
from ticdc_lake.bronze.land import land
from ticdc_lake.runtime.process_exit import exit_now
from ticdc_lake.runtime.spark import build_session


def parse_args(argv: list[str] | None):
    return job_parser(__doc__).parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    return job_main("land", parse_args(argv), build_session, land)


if __name__ == "__main__":
    exit_now(main())
