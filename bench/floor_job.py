"""spark-submit entry point of the floor (bench.submit): Spark reads the export files and writes
them as Parquet, decoding nothing, in a JVM of its own as every stage's job runs.

    spark-submit bench/floor_job.py EXPORTS TARGET
"""

from __future__ import annotations

import shutil
import sys

from ticdc_lake.runtime.spark import build_session


def main(argv: list[str]) -> None:
    exports, target = argv
    shutil.rmtree(target, ignore_errors=True)
    spark = build_session("bench-floor")
    spark.read.parquet(exports).write.parquet(target)
    spark.stop()


if __name__ == "__main__":
    main(sys.argv[1:])
