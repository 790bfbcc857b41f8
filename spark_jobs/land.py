"""spark-submit entry point of the land stage: export files → bronze (ticdc_lake.stages.land).

    spark-submit spark_jobs/land.py --config pipeline.yaml

Lands the new and changed files of the config's `inputs` as one bronze batch (or finishes the
batch a killed run left) and prints the stage's result as one JSON object.
"""

from __future__ import annotations

import argparse
import json
import sys

from ticdc_lake.config import load_config
from ticdc_lake.spark import build_session
from ticdc_lake.stages.land import land


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", required=True, help="the pipeline config (YAML)")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    config = load_config(args.config)
    spark = build_session("ticdc-lake-land")
    result = land(spark, config)
    print(json.dumps(result.to_dict()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
