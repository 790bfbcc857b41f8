"""The driver JVM's archive of Spark's classes, built once by ``make setup``.

    python -m ticdc_lake.runtime.class_archive  # writes orchestration.class_archive(sys.executable)

A driver JVM loads tens of thousands of classes from Spark's jars to start a SparkContext and
run a stage's first jobs, and under Airflow every stage is a new JVM. HotSpot (JDK 13 on) can
write the classes a JVM loaded to an archive as it exits (``-XX:ArchiveClassesAtExit``) and map
them into the next JVM (``-XX:SharedArchiveFile``, which ``orchestration.driver_java_options``
gives every driver). This runs the demo's sample through every stage and its data-quality
checks in a ``spark-submit`` whose JVM writes the archive.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from collections.abc import Mapping
from pathlib import Path

from ticdc_lake.orchestration import (
    DRIVER_JAVA_OPTIONS,
    class_archive,
    delta_conf,
    spark_submit_binary,
    spark_submit_env,
)

# The demo's smallest sample: every stage and check runs, in seconds.
SAMPLE_PROTOCOL = "open-protocol"
SAMPLE_TRANSACTIONS = 30
# Writing the archive warns of each class it cannot hold (generated accessors): not news.
QUIET_ARCHIVE = "-Xlog:cds=off -Xlog:cds+dynamic=off"
RUN_SAMPLE = "--run-sample"  # this module's argument when build()'s spark-submit runs it


class ClassArchiveError(Exception):
    """The archive could not be written, or a driver could not map it."""


def build(python: str = sys.executable, environ: Mapping[str, str] = os.environ) -> Path | None:
    """Write ``python``'s environment's class archive (replacing the one there) once a driver
    has mapped it; None when the JVM wrote none (not HotSpot, or older than JDK 13): the
    drivers then start without."""
    archive = class_archive(python)
    try:
        archive.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ClassArchiveError(f"cannot write {archive}: {exc}") from exc
    written = archive.with_name(f"{archive.name}.{os.getpid()}.tmp")  # replaced in one step
    options = f'{DRIVER_JAVA_OPTIONS} "-XX:ArchiveClassesAtExit={written}" {QUIET_ARCHIVE}'
    try:
        with tempfile.TemporaryDirectory(prefix="ticdc-lake-class-archive-") as scratch:
            sample = ["--master", "local[2]", "--driver-java-options", options]
            sample += [__file__, RUN_SAMPLE, scratch]
            _submit(python, environ, sample, Path(scratch), "the sample run")
            if not written.is_file():
                return None
            verify(written, python, environ)
        os.replace(written, archive)
        return archive
    finally:
        written.unlink(missing_ok=True)


def verify(
    archive: Path, python: str = sys.executable, environ: Mapping[str, str] = os.environ
) -> None:
    """Raise ClassArchiveError unless a driver maps ``archive``: a JVM that finds it cut
    short crashes (SIGBUS) where one that finds it from another JDK or other jars starts
    without it, so one cut short is never installed."""
    options = f'-Xshare:on "-XX:SharedArchiveFile={archive}"'
    with tempfile.TemporaryDirectory(prefix="ticdc-lake-class-archive-") as scratch:
        # In a folder of its own: a JVM that crashes leaves its hs_err file there.
        arguments = ["--driver-java-options", options, "--version"]
        _submit(python, environ, arguments, Path(scratch), "a driver mapping the archive")


def _submit(
    python: str, environ: Mapping[str, str], arguments: list[str], folder: Path, what: str
) -> None:
    submit = spark_submit_binary(environ, python)
    # The jars on the classpath are the archive's: Delta's, as every job's spark-submit has.
    conf = {"spark.pyspark.python": python, "spark.pyspark.driver.python": python}
    conf |= delta_conf(python)
    command = [submit, *(part for k, v in conf.items() for part in ("--conf", f"{k}={v}"))]
    command += arguments
    env = {**environ, **spark_submit_env(python)}
    try:
        done = subprocess.run(command, env=env, cwd=folder, capture_output=True, text=True)
    except OSError as exc:
        raise ClassArchiveError(f"cannot run {submit}: {exc}") from exc
    if done.returncode != 0:
        raise ClassArchiveError(f"{what} exited {done.returncode}:\n{done.stderr[-3000:]}")


def run_every_stage(scratch: Path) -> None:
    """The sample, through every stage and check, in this spark-submit's session."""
    from ticdc_lake.app.demo import prepare_sample, run_sample
    from ticdc_lake.runtime.spark import build_session

    spark = build_session("ticdc-lake-class-archive")
    sample = prepare_sample(
        scratch, SAMPLE_PROTOCOL, seed=0, transactions=SAMPLE_TRANSACTIONS, partitions=2
    )
    report = run_sample(spark, sample)
    if not report.matched:
        raise ClassArchiveError(f"the sample's gold did not match: {report.problems}")
    spark.stop()


def main() -> int:
    try:
        archive = build()
    except ClassArchiveError as exc:
        print(f"class archive: {exc}", file=sys.stderr)
        return 1
    if archive is None:
        print("class archive: this JVM writes none; Spark's drivers start without one")
    else:
        print(f"class archive: {archive} ({archive.stat().st_size >> 20} MB)")
    return 0


if __name__ == "__main__":
    if sys.argv[1:2] == [RUN_SAMPLE]:
        run_every_stage(Path(sys.argv[2]))
    else:
        sys.exit(main())
