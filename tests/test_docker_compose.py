"""docker-compose.yml, checked without a Docker engine (none runs here): the services and their
commands, the image's versions against requirements.txt, volumes, ports, healthchecks, and that
every command and project path the file names exists. What runs for real is tested elsewhere:
the Airflow processes by tests/airflow/test_local_airflow.py, the Spark master and worker started
the same way (pyspark's spark-class) by tests/test_spark_cluster.py.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import zipfile
from pathlib import Path

import pyspark
import pytest
import yaml
from ticdc_lake.airflow_local import LocalAirflowSettings

REPO = Path(__file__).resolve().parent.parent
PROJECT_MOUNT = "/opt/ticdc-lake"
DATA_MOUNT = "/data"
AIRFLOW_SERVICES = {
    "airflow-apiserver": "api-server",
    "airflow-scheduler": "scheduler",
    "airflow-dag-processor": "dag-processor",
    "airflow-triggerer": "triggerer",
}


@pytest.fixture(scope="module")
def compose() -> dict:
    return yaml.safe_load((REPO / "docker-compose.yml").read_text())


@pytest.fixture(scope="module")
def services(compose) -> dict:
    return compose["services"]


def pinned(package: str) -> str:
    for line in (REPO / "requirements.txt").read_text().splitlines():
        name, _, version = line.partition("==")
        if name.strip().split("[")[0] == package:
            return version.strip()
    raise AssertionError(f"{package} is not pinned in requirements.txt")


def mounts(service: dict) -> dict[str, str]:
    """Container path -> host path or volume name."""
    found = {}
    for volume in service.get("volumes", []):
        source, target = re.fullmatch(r"(\$\{[^}]*\}|[^:]+):([^:]+)(?::\w+)?", volume).groups()
        found[target] = source
    return found


def test_the_services(services):
    assert set(services) == {
        "postgres", "airflow-init", *AIRFLOW_SERVICES, "spark-master", "spark-worker",
    }  # fmt: skip
    # The same Airflow processes the launcher starts (and the Airflow test runs for real), but
    # its loopback log server: here the scheduler and triggerer serve their logs themselves, to
    # the api-server's container over the compose network (no port of theirs is published).
    assert set(AIRFLOW_SERVICES.values()) == set(
        LocalAirflowSettings(home=Path("h"), project=REPO).processes
    ) - {"serve-logs"}
    for name, command in AIRFLOW_SERVICES.items():
        assert services[name]["command"] == [command]
        env = services[name]["environment"]
        assert env["AIRFLOW__CORE__EXECUTOR"] == "LocalExecutor"
        assert env["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"].endswith("@postgres/airflow")
        assert services[name]["depends_on"]["airflow-init"] == {
            "condition": "service_completed_successfully"
        }
    for name, service in services.items():
        if name != "airflow-init":
            assert service.get("healthcheck", {}).get("test"), f"{name} has no healthcheck"


def test_the_image_versions_match_requirements(services):
    dockerfile = (REPO / "docker" / "Dockerfile").read_text()
    (base,) = re.findall(r"^FROM (\S+)", dockerfile, re.MULTILINE)
    assert base == f"apache/airflow:{pinned('apache-airflow')}-python3.11"
    # Spark 4 on the cluster is the pyspark wheel the image installs from requirements.txt.
    assert pinned("pyspark").split(".")[0] == "4" == pyspark.__version__.split(".")[0]
    assert pinned("pyspark") == pinned("pyspark-client")
    assert "-r /tmp/ticdc-lake/requirements.txt -c /tmp/ticdc-lake/constraints.txt" in dockerfile
    images = {name: service.get("image") for name, service in services.items()}
    assert images.pop("postgres") == "postgres:16"
    # Executors run the driver's Python with the project installed: one image for all.
    assert set(images.values()) == {"ticdc-lake:dev"}
    for name in images:
        assert services[name]["build"]["dockerfile"] == "docker/Dockerfile"


def test_the_spark_cluster_and_the_dags_point_at_it(services):
    master, worker = services["spark-master"], services["spark-worker"]
    assert master["entrypoint"] == worker["entrypoint"] == ["spark-class"]
    assert master["command"][0] == "org.apache.spark.deploy.master.Master"
    assert worker["command"][0] == "org.apache.spark.deploy.worker.Worker"
    jars = Path(pyspark.__file__).parent / "jars"
    (core,) = jars.glob("spark-core_*.jar")
    classes = set(zipfile.ZipFile(core).namelist())
    for command in (master["command"], worker["command"]):
        assert command[0].replace(".", "/") + ".class" in classes
    host = master["command"][master["command"].index("--host") + 1]
    port = master["command"][master["command"].index("--port") + 1]
    url = f"spark://{host}:{port}"
    assert worker["command"][-1] == url
    scheduler = services["airflow-scheduler"]
    assert json.loads(scheduler["environment"]["AIRFLOW_CONN_SPARK_DEFAULT"]) == {
        "conn_type": "spark",
        "host": url,
    }
    assert scheduler["depends_on"]["spark-master"] == {"condition": "service_healthy"}
    # Executors write the lake's files where the driver (in the scheduler) commits them.
    assert mounts(worker)[DATA_MOUNT] == mounts(scheduler)[DATA_MOUNT]
    execution_url = scheduler["environment"]["AIRFLOW__CORE__EXECUTION_API_SERVER_URL"]
    assert execution_url == "http://airflow-apiserver:8080/execution/"


def test_ports_are_bound_to_loopback(services):
    ports = [port for service in services.values() for port in service.get("ports", [])]
    assert ports and all(port.startswith("127.0.0.1:") for port in ports)
    assert "127.0.0.1:8080:8080" in services["airflow-apiserver"]["ports"]


def test_volumes_and_every_named_path_exist(compose, services):
    declared = set(compose["volumes"])
    for name, service in services.items():
        for target, source in mounts(service).items():
            if source.startswith("${TICDC_LAKE_DATA"):
                assert target == DATA_MOUNT
            elif source.startswith("./"):
                assert (REPO / source).exists(), f"{name} mounts missing {source}"
                if target.startswith(PROJECT_MOUNT):
                    assert target == PROJECT_MOUNT + source[1:], f"{name}: {source} -> {target}"
            else:
                assert source in declared, f"{name}: volume {source} is not declared"
    # Every project path a service names (entrypoint, environment) is a file or folder here.
    for name, service in services.items():
        words = [*service.get("entrypoint", []), *service.get("command", [])]
        words += [str(value) for value in service.get("environment", {}).values()]
        for word in words:
            for path in re.findall(rf"{PROJECT_MOUNT}(/[\w./-]*)", word):
                assert (REPO / path.lstrip("/")).exists(), f"{name} names {PROJECT_MOUNT}{path}"
    init = REPO / "docker" / "airflow-init.sh"
    assert os.access(init, os.X_OK)
    assert ".venv" in (REPO / ".dockerignore").read_text().split()


def test_every_airflow_command_named_exists(services):
    from airflow.cli.cli_config import ARG_JOB_TYPE_FILTER, core_commands

    commands = {command.name: command for command in core_commands}
    lines = (REPO / "docker" / "airflow-init.sh").read_text().splitlines()
    named = [shlex.split(line)[1:] for line in lines if line.startswith("airflow ")]
    for service in services.values():
        test = service.get("healthcheck", {}).get("test", [])
        if test[:1] == ["CMD-SHELL"] and test[1].startswith("airflow "):
            named.append(shlex.split(test[1])[1:])
    assert named, "no airflow command found"
    for args in named:
        group = commands[args[0]]
        if hasattr(group, "subcommands"):
            assert args[1] in {sub.name for sub in group.subcommands}, args
        if "--job-type" in args:
            assert args[args.index("--job-type") + 1] in ARG_JOB_TYPE_FILTER.kwargs["choices"]
    for service in AIRFLOW_SERVICES.values():
        assert service in commands
