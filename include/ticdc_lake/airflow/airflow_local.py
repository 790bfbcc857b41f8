"""A local Airflow for one person (`ticdc-lake airflow`, `make airflow`) and for the tests.

    settings = LocalAirflowSettings(home=..., project=..., port=8080)
    with LocalAirflow(settings) as airflow:   # migrate, start, wait until healthy
        client = airflow.client("admin")      # REST API v2 with a token from /auth/token
        ...                                   # leaving the block stops every process it started

Airflow runs from its own ``AIRFLOW_HOME`` (LocalExecutor, low parallelism), with the
project's dags/ and plugins/ and a ``spark_default`` connection to ``local[*]`` or a Spark
master. Every process listens on 127.0.0.1 only: the api-server, and the task log server
(``serve-logs``), which this module starts itself since the one the scheduler and triggerer would
start listens on every interface and cannot be told otherwise. Each Airflow process (api-server,
scheduler, dag-processor, serve-logs, triggerer) is started in a session of its own, so stopping
it reaches the task processes and spark-submit JVMs it forked too; their output goes to
``$AIRFLOW_HOME/logs/<name>.out``.

The simple auth manager's users and their passwords are written to a file before Airflow starts
(Airflow keeps a file it finds), so the login is known and can be printed; a password is made
once and kept across restarts.

The metadata database is SQLite in ``$AIRFLOW_HOME`` unless a database URL is given
(``--database-url``, ``TICDC_LAKE_AIRFLOW_DB``): PostgreSQL as docker-compose.yml runs it,
``postgresql+psycopg2://user:password@host:port/db``, or the same without the password with libpq's
``PGPASSWORD`` set. The URL's password is never printed: what this module prints or raises shows
the URL with ``***`` for it (redact.py), and Airflow's processes are given it in their environment
only, never on a command line.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ticdc_lake.errors import ConfigError, TicdcLakeError
from ticdc_lake.orchestration import CONFIGS_ENV, LOG_SERVER_PORT, POOL
from ticdc_lake.redact import redact_text, redact_url, url_password

# role in the simple auth manager, by user name
USERS = {"admin": "admin", "viewer": "viewer"}
PASSWORDS_FILE = "simple_auth_manager_passwords.json"
SECRETS_FILE = "local_secrets.json"
HEALTHY_WITHIN = 240.0  # seconds; the api-server alone takes ~30 s on 2 busy cores
STOP_WITHIN = 20.0  # seconds between SIGTERM and SIGKILL
DATABASE_ENV = "TICDC_LAKE_AIRFLOW_DB"  # the metadata database's URL; unset: SQLite
# Tasks at once: SQLite takes one writer at a time; a server takes more (docker-compose.yml's 4).
SQLITE_PARALLELISM = 2
SERVER_PARALLELISM = 4
# SQLAlchemy's dialects Airflow supports for its metadata database.
DATABASE_SCHEMES = ("sqlite", "postgresql", "mysql")


class AirflowStartError(TicdcLakeError):
    """Airflow did not come up; the message names the process and its log."""


@dataclass(frozen=True)
class LocalAirflowSettings:
    home: Path  # AIRFLOW_HOME: database, logs, passwords
    project: Path  # holds dags/, plugins/ and spark_jobs/
    port: int = 8080
    log_port: int = LOG_SERVER_PORT  # the task log server's
    spark_master: str = "local[*]"
    parallelism: int = SQLITE_PARALLELISM
    configs: Path | None = None  # TICDC_LAKE_CONFIGS; None: the DAGs' demo sample
    triggerer: bool = True
    schedules: bool = True  # False: only triggered runs (the tests' runs must not queue behind one)
    python: Path = field(default_factory=lambda: Path(sys.executable))
    # SQLAlchemy URL of the metadata database; None: SQLite in home. Not in the repr: a password.
    database_url: str | None = field(default=None, repr=False)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def sql_alchemy_conn(self) -> str:
        return self.database_url or f"sqlite:///{self.home.resolve() / 'airflow.db'}"

    @property
    def database_shown(self) -> str:
        """The metadata database as it may be printed: the URL with its password masked."""
        return redact_url(self.sql_alchemy_conn)

    @property
    def secrets(self) -> tuple[str, ...]:
        """What must never be printed: the database URL's password, as given in it and decoded."""
        if self.database_url is None:
            return ()
        password = url_password(self.database_url)
        raw = self.database_url.partition("://")[2].rpartition("@")[0].partition(":")[2]
        return tuple(dict.fromkeys(s for s in (password, raw) if s))

    def redact(self, text: str) -> str:
        return redact_text(text, self.secrets)

    @property
    def processes(self) -> tuple[str, ...]:
        return ("api-server", "scheduler", "dag-processor", "serve-logs") + (
            ("triggerer",) if self.triggerer else ()
        )


def database_url(text: str) -> str:
    """A metadata database URL as given (``--database-url``, ``TICDC_LAKE_AIRFLOW_DB``), checked:
    a SQLAlchemy URL of SQLite, PostgreSQL or MySQL. libpq's ``postgres://`` is read as
    ``postgresql://`` (SQLAlchemy and Airflow refuse the former). The error shows the scheme
    only."""
    url = text.strip()
    scheme, sep, rest = url.partition("://")
    dialect = scheme.partition("+")[0].lower()
    if dialect == "postgres":
        scheme, dialect = "postgresql" + scheme[len("postgres") :], "postgresql"
    if not sep or dialect not in DATABASE_SCHEMES or not rest:
        # Not the URL itself: what is not a URL cannot be told apart from its password.
        given = f"scheme {scheme!r}" if sep else "no scheme://"
        raise ConfigError(
            f"the Airflow database URL ({given}) is not a SQLAlchemy URL of "
            + ", ".join(DATABASE_SCHEMES)
            + " with a host or path, e.g. "
            + "postgresql+psycopg2://airflow:PASSWORD@127.0.0.1:5432/airflow"
        )
    return f"{scheme}://{rest}"


def default_parallelism(database: str | None) -> int:
    """Tasks at once when not given: low on SQLite (one writer at a time), more on a server."""
    if database is None or database.startswith("sqlite"):
        return SQLITE_PARALLELISM
    return SERVER_PARALLELISM


def spark_connection(master: str) -> str:
    """``spark_default`` in the JSON form (the URI form needs ``local[*]`` escaped, and an
    unescaped one is silently ignored: the job then goes to YARN)."""
    return json.dumps({"conn_type": "spark", "host": master})


def _json_file(path: Path, make: dict[str, str]) -> dict[str, str]:
    """The JSON object in ``path``, completed with the keys of ``make`` it lacks (written back,
    readable by the owner only: it holds passwords)."""
    found = json.loads(path.read_text()) if path.is_file() else {}
    if not set(make) <= set(found):
        found = make | found
        path.parent.mkdir(parents=True, exist_ok=True)
        path.touch(mode=0o600)
        path.write_text(json.dumps(found) + "\n")
    return found


def passwords(home: Path) -> dict[str, str]:
    """Every user's password, made on the first start and kept in ``$AIRFLOW_HOME``."""
    return _json_file(home / PASSWORDS_FILE, {name: secrets.token_urlsafe(12) for name in USERS})


def airflow_env(settings: LocalAirflowSettings, base: Mapping[str, str]) -> dict[str, str]:
    """The environment every Airflow process runs with: ``base`` without its Airflow and
    ticdc-lake settings, plus this Airflow's."""
    home = settings.home.resolve()
    project = settings.project.resolve()
    python = str(settings.python)
    # The api-server, scheduler and workers sign and check each other's tokens: one secret.
    keys = _json_file(home / SECRETS_FILE, {"jwt": secrets.token_urlsafe(32)})
    env = {k: v for k, v in base.items() if not k.startswith(("AIRFLOW", "TICDC_LAKE"))}
    env |= {
        "AIRFLOW_HOME": str(home),
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": settings.sql_alchemy_conn,
        "AIRFLOW__CORE__EXECUTOR": "LocalExecutor",
        "AIRFLOW__CORE__PARALLELISM": str(settings.parallelism),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__DAG_PROCESSOR__PARSING_PROCESSES": "1",
        "AIRFLOW__SCHEDULER__USE_JOB_SCHEDULE": str(settings.schedules),
        "AIRFLOW__CORE__DAGS_FOLDER": str(project / "dags"),
        "AIRFLOW__CORE__PLUGINS_FOLDER": str(project / "plugins"),
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": ",".join(
            f"{name}:{role}" for name, role in USERS.items()
        ),
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE": str(home / PASSWORDS_FILE),
        "AIRFLOW__API__HOST": "127.0.0.1",
        "AIRFLOW__API__PORT": str(settings.port),
        # The task log server (serve_task_logs) serves workers' and the triggerer's logs, one
        # folder: one port for both.
        "AIRFLOW__LOGGING__WORKER_LOG_SERVER_PORT": str(settings.log_port),
        "AIRFLOW__LOGGING__TRIGGER_LOG_SERVER_PORT": str(settings.log_port),
        # The api-server fetches a running task's log from http://<the task's hostname>:<port>:
        # every process names this machine by the address that server listens on.
        "AIRFLOW__CORE__HOSTNAME_CALLABLE": f"{__name__}.{loopback_hostname.__name__}",
        # Off by default; were it turned on in airflow.cfg, not on every interface (0.0.0.0).
        "AIRFLOW__SCHEDULER__SCHEDULER_HEALTH_CHECK_SERVER_HOST": "127.0.0.1",
        "AIRFLOW__API__BASE_URL": settings.url,
        # Task processes report to the api-server: keep the URL in step with its port.
        "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"{settings.url}/execution/",
        "AIRFLOW__API_AUTH__JWT_SECRET": keys["jwt"],
        "AIRFLOW_CONN_SPARK_DEFAULT": spark_connection(settings.spark_master),
        # spark-submit and pyspark's scripts are found beside the venv's Python.
        "PATH": os.pathsep.join([str(Path(python).parent), env.get("PATH", "")]),
        "PYSPARK_PYTHON": python,
        "TICDC_LAKE_PYTHON": python,
    }
    if settings.configs is not None:
        env[CONFIGS_ENV] = str(settings.configs.resolve())
    return env


class AirflowClient:
    """A few calls of the REST API v2, with a bearer token (or none: ``token=None``)."""

    def __init__(self, url: str, token: str | None = None):
        self.url = url
        self.token = token

    @classmethod
    def login(cls, url: str, username: str, password: str) -> AirflowClient:
        status, body = cls(url).request(
            "POST", "/auth/token", {"username": username, "password": password}
        )
        if status not in (200, 201):
            raise AirflowStartError(f"POST /auth/token as {username}: HTTP {status}: {body}")
        return cls(url, body["access_token"])

    def request(self, method: str, path: str, body: Any = None) -> tuple[int, Any]:
        """(HTTP status, the JSON body or its text); an HTTP error status is returned too."""
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(self.url + path, data=data, method=method)
        request.add_header("Content-Type", "application/json")
        if self.token:
            request.add_header("Authorization", f"Bearer {self.token}")
        try:
            with urllib.request.urlopen(request, timeout=60) as response:
                status, text = response.status, response.read().decode()
        except urllib.error.HTTPError as error:
            status, text = error.code, error.read().decode(errors="replace")
        try:
            return status, json.loads(text) if text else None
        except ValueError:
            return status, text

    def get(self, path: str) -> Any:
        status, body = self.request("GET", path)
        if status != 200:
            raise AirflowStartError(f"GET {path}: HTTP {status}: {body}")
        return body


class LocalAirflow:
    """Airflow's processes, started in sessions of their own, stopped with all they started."""

    def __init__(self, settings: LocalAirflowSettings, base_env: Mapping[str, str] | None = None):
        self.settings = settings
        self.env = airflow_env(settings, os.environ if base_env is None else base_env)
        self.logs = settings.home.resolve() / "logs"
        self.started: dict[str, subprocess.Popen] = {}

    def __enter__(self) -> LocalAirflow:
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc_info) -> None:
        self.stop()

    def airflow(self, *args: str) -> list[str]:
        return [str(self.settings.python.parent / "airflow"), *args]

    def start(self) -> None:
        """Migrate the database, start every process, wait until healthy, create the pool."""
        self.logs.mkdir(parents=True, exist_ok=True)
        passwords(self.settings.home)
        migrate = subprocess.run(
            self.airflow("db", "migrate"), env=self.env, capture_output=True, text=True
        )
        if migrate.returncode != 0:
            raise AirflowStartError(
                self.settings.redact(f"airflow db migrate failed:\n{migrate.stderr[-3000:]}")
            )
        for name in self.settings.processes:
            self._spawn(name)
        self.wait_healthy()
        self.client("admin").request(
            "POST", "/api/v2/pools", {"name": POOL, "slots": 1, "description": "one job per lake"}
        )  # a second start finds it there (409): fine either way

    def command(self, name: str) -> list[str]:
        """How process ``name`` is started."""
        if name == "api-server":
            return self.airflow(name, "--port", str(self.settings.port))
        if name in ("scheduler", "triggerer"):  # their own log servers listen everywhere
            return self.airflow(name, "--skip-serve-logs")
        if name == "serve-logs":
            return [str(self.settings.python), "-c", f"import {__name__} as m; m.serve_task_logs()"]
        return self.airflow(name)

    def _spawn(self, name: str) -> None:
        with open(self.logs / f"{name}.out", "ab") as log:
            self.started[name] = subprocess.Popen(
                self.command(name),
                env=self.env,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,  # its own session: stopped with all it forks
            )

    def wait_healthy(self, within: float = HEALTHY_WITHIN) -> None:
        """Until /api/v2/monitor/health says every started component is healthy."""
        wanted = {"metadatabase", "scheduler"} | (
            {"dag_processor"} if "dag-processor" in self.started else set()
        )
        deadline = time.monotonic() + within
        health: Any = None
        while time.monotonic() < deadline:
            self.check_running()
            try:
                status, health = AirflowClient(self.settings.url).request(
                    "GET", "/api/v2/monitor/health"
                )
            except OSError:  # not listening yet
                status = None
            if status == 200 and all(
                (health.get(part) or {}).get("status") == "healthy" for part in wanted
            ):
                return
            time.sleep(1)
        raise AirflowStartError(
            f"Airflow was not healthy within {within:.0f} s (last health: {health}); "
            f"see the logs in {self.logs}"
        )

    def check_running(self) -> None:
        for name, process in self.started.items():
            if process.poll() is not None:
                raise AirflowStartError(
                    f"airflow {name} exited with status {process.returncode}; "
                    f"see {self.logs / (name + '.out')}"
                )

    def client(self, username: str | None = None) -> AirflowClient:
        """A REST client logged in as ``username`` (None: without a token)."""
        if username is None:
            return AirflowClient(self.settings.url)
        password = passwords(self.settings.home)[username]
        return AirflowClient.login(self.settings.url, username, password)

    def stop(self) -> list[str]:
        """Stop every process each Airflow process started, task processes and spark-submit
        JVMs included (Airflow puts each task in a process group of its own, but it stays in
        the session): SIGTERM, then SIGKILL what is left after STOP_WITHIN. Returns the names
        whose processes had to be killed (empty: a clean stop)."""
        sessions = {name: process.pid for name, process in self.started.items()}
        for sid in sessions.values():
            signal_session(sid, signal.SIGTERM)
        forced = [name for name, sid in sessions.items() if not self._ended(sid, STOP_WITHIN)]
        for name in forced:
            signal_session(sessions[name], signal.SIGKILL)
            self._ended(sessions[name], STOP_WITHIN)
        for process in self.started.values():
            process.wait()
        self.started = {}
        return forced

    def _ended(self, sid: int, within: float) -> bool:
        deadline = time.monotonic() + within
        while session_processes(sid):
            if time.monotonic() > deadline:
                return False
            for process in self.started.values():
                process.poll()  # reap the leaders
            time.sleep(0.2)
        return True


def loopback_hostname() -> str:
    """``[core] hostname_callable`` of a local Airflow: the address its log server is on."""
    return "127.0.0.1"


def serve_task_logs() -> None:
    """Airflow's task log server (``airflow serve-logs``' app: JWT-checked reads of the log
    folder) on 127.0.0.1 at ``[logging] worker_log_server_port``, until stopped."""
    import uvicorn
    from airflow.configuration import conf

    uvicorn.run(
        "airflow.utils.serve_logs.log_server:get_app",
        factory=True,
        host="127.0.0.1",
        port=conf.getint("logging", "worker_log_server_port"),
        log_level="warning",
        log_config=None,  # Airflow's own logging, as its serve-logs keeps it
        access_log=False,
    )


def session_processes(sid: int) -> list[int]:
    """The live (not zombie) processes of session ``sid``."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:  # it ended while we looked
            continue
        if int(fields[3]) == sid and fields[0] != "Z":
            found.append(int(stat.parent.name))
    return found


def signal_session(sid: int, signum: int) -> None:
    for pid in session_processes(sid):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signum)


def _interrupt(signum, frame) -> None:
    raise KeyboardInterrupt  # SIGTERM stops Airflow the way Ctrl-C does


def serve(settings: LocalAirflowSettings, out=print) -> int:
    """Run Airflow in the foreground until Ctrl-C (or SIGTERM), then stop all of it."""
    signal.signal(signal.SIGTERM, _interrupt)
    out(f"Starting Airflow in {settings.home} (logs in {settings.home / 'logs'}) ...")
    out(f"  metadata database: {settings.database_shown}")
    airflow = LocalAirflow(settings)
    try:
        airflow.start()
        login = passwords(settings.home)
        out(f"Airflow is up: {settings.url}/")
        out(f"  log in as admin / {login['admin']}  (read-only: viewer / {login['viewer']})")
        out(f"  DAGs from {settings.project / 'dags'}; spark_default -> {settings.spark_master}")
        out("  DAGs start paused: unpause ticdc_lake in the UI to run it. Ctrl-C stops Airflow.")
        while True:
            airflow.check_running()
            time.sleep(2)
    except KeyboardInterrupt:
        out("Stopping Airflow ...")
        return 0
    except AirflowStartError as error:
        out(settings.redact(f"ticdc-lake airflow: {error}"))
        return 1
    finally:
        airflow.stop()
