"""The driver JVM's class archive: which drivers are given it, what setup's build leaves."""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from ticdc_lake.app.cli import main as cli_main
from ticdc_lake.orchestration import DRIVER_JAVA_OPTIONS, class_archive, driver_java_options
from ticdc_lake.runtime.class_archive import ClassArchiveError, build, verify


def test_drivers_are_given_the_class_archive_of_their_environment():
    options = driver_java_options({}, "/srv/lake env/bin/python")
    assert options == (
        f'{DRIVER_JAVA_OPTIONS} "-XX:SharedArchiveFile=/srv/lake env/share/ticdc-lake/'
        'spark-classes.jsa"'
    )
    assert shlex.split(options)[-1].endswith("/srv/lake env/share/ticdc-lake/spark-classes.jsa")
    replaced = {"TICDC_LAKE_DRIVER_JAVA_OPTIONS": " -Xss4m "}
    assert driver_java_options(replaced, "/srv/lake/bin/python") == "-Xss4m"
    assert driver_java_options({"TICDC_LAKE_DRIVER_JAVA_OPTIONS": ""}, "/x/bin/python") == ""
    # A quote in the path would split the option where Spark parses them: left out.
    assert driver_java_options({}, '/srv/a"b/bin/python') == DRIVER_JAVA_OPTIONS


def test_the_session_driver_is_started_with_this_environments_archive(spark):
    runtime = spark._jvm.java.lang.management.ManagementFactory.getRuntimeMXBean()
    arguments = list(runtime.getInputArguments())
    assert f"-XX:SharedArchiveFile={class_archive(sys.executable)}" in arguments


@pytest.mark.spark
def test_the_archive_setup_built_maps_into_a_spark_submit_driver():
    archive = class_archive(sys.executable)
    assert archive.is_file(), f"{archive} missing: `make setup` builds it"
    verify(archive)  # -Xshare:on: a driver that cannot map it does not start


@pytest.mark.spark
def test_a_spark_submit_of_ones_own_maps_the_archive_with_the_printed_options(capsys):
    assert cli_main(["java-options"]) == 0
    printed = capsys.readouterr().out.strip()
    assert printed == driver_java_options(os.environ, sys.executable)
    assert f'"-XX:SharedArchiveFile={class_archive(sys.executable)}"' in printed
    # As docs/operations.md gives it:
    # --conf spark.driver.extraJavaOptions="$(ticdc-lake java-options)";
    # -Xshare:on fails the driver's start unless the archive maps.
    submit = Path(sys.executable).parent / "spark-submit"
    options = f"spark.driver.extraJavaOptions=-Xshare:on {printed}"
    done = subprocess.run(
        [str(submit), "--conf", options, "--version"],
        capture_output=True,
        text=True,
        env=os.environ | {"PYSPARK_PYTHON": sys.executable},
    )
    assert done.returncode == 0, done.stderr[-2000:]


def test_an_archive_cut_short_is_refused_not_mapped(tmp_path):
    whole = class_archive(sys.executable)
    cut = tmp_path / "cut.jsa"
    with whole.open("rb") as source, cut.open("wb") as target:
        target.write(source.read(whole.stat().st_size // 2))
    with pytest.raises(ClassArchiveError, match="a driver mapping the archive exited"):
        verify(cut)


def _fake_submit(tmp_path: Path, body: str) -> dict[str, str]:
    script = tmp_path / "spark-submit"
    script.write_text(f"#!/bin/sh\n{body}\n")
    script.chmod(0o755)
    return {"TICDC_LAKE_SPARK_SUBMIT": str(script), "PATH": os.environ["PATH"]}


# The archive path given after -XX:ArchiveClassesAtExit= in the --driver-java-options argument.
WRITE_ARCHIVE = (
    'for a in "$@"; do case "$a" in *ArchiveClassesAtExit*) '
    'p=${a#*ArchiveClassesAtExit=}; p=${p%%\\"*}; echo classes > "$p";; esac; done'
)


def test_the_archive_replaces_the_last_one_in_one_step(tmp_path):
    python = str(tmp_path / "env" / "bin" / "python")
    archive = class_archive(python)
    archive.parent.mkdir(parents=True)
    archive.write_text("the last one")
    assert build(python, _fake_submit(tmp_path, WRITE_ARCHIVE)) == archive
    assert archive.read_text() == "classes\n"
    assert os.listdir(archive.parent) == [archive.name]  # no temporary file left


def test_an_archive_no_driver_maps_leaves_the_last_one(tmp_path):
    python = str(tmp_path / "env" / "bin" / "python")
    archive = class_archive(python)
    archive.parent.mkdir(parents=True)
    archive.write_text("the last one")
    unmapped = f'{WRITE_ARCHIVE}\ncase "$*" in *Xshare:on*) echo "SIGBUS" >&2; exit 134;; esac'
    with pytest.raises(ClassArchiveError, match="a driver mapping the archive exited 134"):
        build(python, _fake_submit(tmp_path, unmapped))
    assert archive.read_text() == "the last one"
    assert os.listdir(archive.parent) == [archive.name]


def test_a_jvm_that_writes_no_archive_leaves_the_drivers_without(tmp_path):
    python = str(tmp_path / "env" / "bin" / "python")
    assert build(python, _fake_submit(tmp_path, "exit 0")) is None
    assert os.listdir(class_archive(python).parent) == []


def test_a_failed_sample_run_says_why_and_writes_nothing(tmp_path):
    python = str(tmp_path / "env" / "bin" / "python")
    failing = _fake_submit(tmp_path, f"{WRITE_ARCHIVE}\necho 'no Java here' >&2; exit 3")
    with pytest.raises(ClassArchiveError, match="exited 3:\nno Java here"):
        build(python, failing)
    assert os.listdir(class_archive(python).parent) == []
    missing = {"TICDC_LAKE_SPARK_SUBMIT": str(tmp_path / "nowhere" / "spark-submit")}
    with pytest.raises(ClassArchiveError, match=r"cannot run .*nowhere/spark-submit"):
        build(python, missing)
