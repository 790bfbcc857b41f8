"""docker-compose.yml, checked without a Docker engine (none runs here): the services and their
commands, the image's versions against requirements.txt, volumes, ports, healthchecks, and that
every command and project path the file names exists, that no secret is written in it; and
docker/airflow-init.sh run here with a fake `airflow` (the admin's password file it writes).
What runs for real is tested elsewhere:
the Airflow processes by tests/airflow/test_local_airflow.py, the Spark master and worker started
the same way (pyspark's spark-class) by tests/e2e/test_spark_cluster.py.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import stat
import subprocess
import sys
import zipfile
from pathlib import Path

import pyspark
import pytest
import yaml
from ticdc_lake.airflow.airflow_local import LocalAirflowSettings

REPO = Path(__file__).resolve().parents[2]
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


REQUIRED = {"AIRFLOW_ADMIN_PASSWORD", "AIRFLOW_JWT_SECRET", "POSTGRES_PASSWORD"}


def test_every_secret_is_required_from_the_environment(compose, services):
    """No password is written in the file: compose refuses to start without each, and the
    usage line at the top names them all."""
    text = (REPO / "docker-compose.yml").read_text()
    assert set(re.findall(r"\$\{(\w+):\?", text)) == REQUIRED
    usage = next(line for line in text.splitlines() if "docker compose up" in line)
    assert all(f"{name}=" in usage for name in REQUIRED), usage
    assert "airflow:airflow" not in text
    required = "${POSTGRES_PASSWORD:?"
    assert services["postgres"]["environment"]["POSTGRES_PASSWORD"].startswith(required)
    for name in ("airflow-init", *AIRFLOW_SERVICES):
        env = services[name]["environment"]
        # The password reaches libpq and asyncpg as PGPASSWORD, never inside the URL (where a
        # '@', '/' or '%' in it would break the URL).
        assert env["PGPASSWORD"].startswith(required), name
        url = env["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"]
        assert url == "postgresql+psycopg2://airflow@postgres/airflow", name
    assert services["airflow-init"]["environment"]["AIRFLOW_ADMIN_PASSWORD"].startswith(
        "${AIRFLOW_ADMIN_PASSWORD:?"
    )


def test_the_state_volume_is_the_airflow_users_alone(services):
    """A new named volume takes its mount point's owner and mode from the image."""
    dockerfile = (REPO / "docker" / "Dockerfile").read_text()
    before, made, _ = dockerfile.partition("\nRUN mkdir -p -m 0700 /opt/airflow/state\n")
    assert made, "the image does not make the state volume's mount point"
    assert re.findall(r"^USER (\S+)", before, re.MULTILINE)[-1] == "airflow"
    assert mounts(services["airflow-init"])["/opt/airflow/state"] == "airflow-state"


@pytest.fixture
def init_script(tmp_path):
    """airflow-init.sh runnable here: a fake `airflow` on PATH that logs its arguments, the
    venv's python, and the passwords file in a state folder of the test's."""
    fakes = tmp_path / "bin"
    fakes.mkdir()
    log = tmp_path / "airflow.log"
    fake = fakes / "airflow"
    fake.write_text(f'#!/bin/sh\necho "$@" >> {shlex.quote(str(log))}\n')
    fake.chmod(0o755)
    (fakes / "python").symlink_to(sys.executable)
    passwords = tmp_path / "state" / "passwords.json"
    base = {
        "PATH": f"{fakes}{os.pathsep}/usr/bin{os.pathsep}/bin",
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE": str(passwords),
    }

    def run(**env: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            ["bash", str(REPO / "docker" / "airflow-init.sh")], env=base | env,
            capture_output=True, text=True, timeout=60,
        )  # fmt: skip

    return run, passwords, log


def test_airflow_init_rotates_the_admin_password_into_a_file_only_its_owner_reads(init_script):
    run, passwords, log = init_script
    first = run(AIRFLOW_ADMIN_PASSWORD="first-secret")
    assert first.returncode == 0, first.stderr
    assert json.loads(passwords.read_text()) == {"admin": "first-secret"}
    assert stat.S_IMODE(passwords.stat().st_mode) == 0o600
    assert log.read_text().splitlines() == [
        "db migrate", "pools set ticdc_lake 1 one Spark job per lake at a time",
    ]  # fmt: skip

    # Changed after the first start (an earlier init left the file 0644, with another user's):
    passwords.write_text(json.dumps({"admin": "first-secret", "alice": "hers"}))
    passwords.chmod(0o644)
    second = run(AIRFLOW_ADMIN_PASSWORD="second:secret@/%")
    assert second.returncode == 0, second.stderr
    assert json.loads(passwords.read_text()) == {"admin": "second:secret@/%", "alice": "hers"}
    assert stat.S_IMODE(passwords.stat().st_mode) == 0o600
    assert "admin's password set from AIRFLOW_ADMIN_PASSWORD" in second.stdout
    assert "unchanged" in run(AIRFLOW_ADMIN_PASSWORD="second:secret@/%").stdout
    assert [p.name for p in passwords.parent.iterdir()] == ["passwords.json"]  # no leftovers
    for done in (first, second):
        assert "secret" not in done.stdout + done.stderr


def test_airflow_init_refuses_to_start_without_the_admin_password(init_script):
    run, passwords, log = init_script
    done = run()
    assert done.returncode != 0
    assert "AIRFLOW_ADMIN_PASSWORD: set AIRFLOW_ADMIN_PASSWORD" in done.stderr
    assert not passwords.exists() and not log.exists()  # before touching the database
