"""spark-submit entry point of a stage's data-quality checks (ticdc_lake.quality.run).

    spark-submit spark_jobs/quality.py --config pipeline.yaml --stage bronze|silver|gold

Validates what the stage added since its last validation, appends the results to
quality/results, quarantines failing rows where the policy says so, refreshes the HTML report,
prints the validation as one JSON object, and exits 1 naming the checks when a check with
policy `fail` failed.
"""

from __future__ import annotations

from functools import partial

from ticdc_lake.app.pipeline import job_main, job_parser
from ticdc_lake.quality.run import STAGES, check_stage
from ticdc_lake.runtime.process_exit import exit_now
from ticdc_lake.runtime.spark import build_session


def parse_args(argv: list[str] | None):
    parser = job_parser(__doc__)
    parser.add_argument("--stage", required=True, choices=STAGES)
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    check = partial(check_stage, stage=args.stage, echo=True)
    return job_main(f"quality-{args.stage}", args, build_session, check)


if __name__ == "__main__":
    exit_now(main())
