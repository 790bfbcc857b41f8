"""spark-submit entry point of `ticdc-lake run`: the chosen stages in pipeline order.

    spark-submit spark_jobs/pipeline.py --config pipeline.yaml [--stages land,decode,...]
        [--changefeed NAME ...] [--until-ts TSO] [--json]

Prints the summary (or with --json one JSON object); exits 1 when a stage reports failures,
2 on a configuration error. The settings spark-submit was given win over the local defaults.
"""

from __future__ import annotations

import sys

from ticdc_lake.app.cli import main as cli_main
from ticdc_lake.runtime.process_exit import exit_now


def main(argv: list[str] | None = None) -> int:
    return cli_main(["run", *(sys.argv[1:] if argv is None else argv)])


if __name__ == "__main__":
    exit_now(main())
