"""The plugin's FastAPI app in-process, behind Airflow's real auth: an auth manager that refuses
one user one DAG (tests/plugins/refusing_auth_manager.py, the simple auth manager otherwise),
tokens it signs itself (the api-server's /auth/token does the same), Airflow's metadata database
holding the DAG runs, over real small lakes."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from tests.plugins.refusing_auth_manager import REFUSED_ENV
from tests.quality.report_lake import BAD_KEY, fill_hostile_lake, fill_lake, write_config
from tests.quality.test_report import assert_escaped, assert_offline

REPO = Path(__file__).resolve().parents[2]
AUTH_MANAGER = "tests.plugins.refusing_auth_manager.RefusingAuthManager"
SHOP = {"ticdc_lake_shop", "ticdc_lake_backfill_shop"}
LEDGER = {"ticdc_lake_ledger", "ticdc_lake_backfill_ledger"}
RUNS = {("ticdc_lake_shop", "manual__1"), ("ticdc_lake_backfill_shop", "backfill__1"),
        ("ticdc_lake_ledger", "manual__1")}  # fmt: skip
REFUSED = "refused:ticdc_lake_shop"  # refused shop's pipeline DAG; its backfill DAG is allowed


def load_plugin():
    spec = importlib.util.spec_from_file_location(
        "ticdc_lake_quality", REPO / "plugins" / "ticdc_lake_quality.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def airflow_db(tmp_path_factory):
    """Airflow's metadata DB (the auth manager looks revoked tokens up there, the plugin DAG
    runs): a new SQLite, created from Airflow's models, holding RUNS; the previous ORM setup is
    restored afterwards."""
    from airflow import settings
    from airflow.models.dagrun import DagRun
    from airflow.utils import db
    from airflow.utils.session import create_session
    from airflow.utils.state import DagRunState

    with pytest.MonkeyPatch.context() as env:
        path = tmp_path_factory.mktemp("airflow-db") / "airflow.db"
        env.setenv("AIRFLOW__DATABASE__SQL_ALCHEMY_CONN", f"sqlite:///{path}")
        settings.dispose_orm(do_log=False)
        settings.configure_vars()
        settings.configure_orm()
        db.initdb()
        with create_session() as session:
            for dag_id, run_id in sorted(RUNS):
                session.add(DagRun(dag_id, run_id, run_type="manual", state=DagRunState.QUEUED))
        yield path
        settings.dispose_orm(do_log=False)
    settings.configure_vars()
    settings.configure_orm()


def auth_env(tmp_path: Path, database: Path) -> dict[str, str]:
    return {
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{database}",
        "AIRFLOW__API_AUTH__JWT_SECRET": "a-secret-for-this-test-only-" * 3,
        "AIRFLOW__CORE__AUTH_MANAGER": AUTH_MANAGER,
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE": str(tmp_path / "pw"),
        REFUSED_ENV: REFUSED,
    }


@pytest.fixture
def tokens(tmp_path, monkeypatch, airflow_db) -> dict[str, str]:
    """Airflow's auth manager, as the api-server sets it up, and a token it issued per user."""
    for name, value in auth_env(tmp_path, airflow_db).items():
        monkeypatch.setenv(name, value)
    from airflow.api_fastapi.app import init_auth_manager
    from airflow.api_fastapi.auth.managers.simple.user import SimpleAuthManagerUser

    manager = init_auth_manager()
    return {
        name: manager.generate_jwt(SimpleAuthManagerUser(username=name, role="viewer"))
        for name in ("viewer", "refused")
    }


@pytest.fixture(scope="module")
def lakes(tmp_path_factory) -> dict:
    """Two filled lakes, shop and ledger, each written by a pipeline and a backfill DAG."""
    found = {}
    for name, dag_ids in (("shop", SHOP), ("ledger", LEDGER)):
        config = write_config(tmp_path_factory.mktemp(name))
        fill_lake(config)
        found[name] = (config.source, dag_ids)
    return found


def app_client(lakes: dict) -> TestClient:
    return TestClient(load_plugin().quality_app(lambda: lakes))


@pytest.fixture
def client(lakes, tokens) -> TestClient:
    return app_client(lakes)


def get(client: TestClient, path: str, token: str | None):
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    return client.get(path, headers=headers)


PAGES = ["/", "/lakes/shop", "/dags/ticdc_lake_shop/runs/manual__1"]


@pytest.mark.parametrize("path", PAGES)
def test_every_route_wants_a_login(client, path):
    assert client.get(path).status_code == 401
    bad = client.get(path, headers={"Authorization": "Bearer not-a-token"})
    assert bad.status_code in (401, 403)


def test_the_page_shows_the_lake_to_a_user_who_may_read_its_dags(client, tokens, lakes):
    page = get(client, "/lakes/shop", tokens["viewer"])
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    assert "Failing stages: silver" in page.text and BAD_KEY in page.text
    assert "shop.orders" in page.text and "moving" in page.text
    run = get(client, "/dags/ticdc_lake_shop/runs/manual__1", tokens["viewer"])
    assert run.status_code == 200 and "DAG ticdc_lake_shop, run manual__1" in run.text
    listed = get(client, "/", tokens["viewer"])
    assert listed.status_code == 200
    assert "/ticdc-lake/lakes/shop" in listed.text and "/ticdc-lake/lakes/ledger" in listed.text
    assert get(client, "/dags/other/runs/x", tokens["viewer"]).status_code == 404
    assert get(client, "/lakes/nope", tokens["viewer"]).status_code == 404


def test_a_user_refused_a_dag_is_refused_the_lake_it_writes_on_every_route(client, tokens, lakes):
    """Refused shop's pipeline DAG by the auth manager: shop's page is 403 on every route (its
    backfill DAG's runs too: the page shows what both wrote) and shop is not listed; ledger is
    shown."""
    refused = tokens["refused"]
    shop_lake = str(lakes["shop"][0].parent)
    for path in ("/lakes/shop", "/dags/ticdc_lake_shop/runs/manual__1",
                 "/dags/ticdc_lake_backfill_shop/runs/backfill__1"):  # fmt: skip
        page = get(client, path, refused)
        assert page.status_code == 403, path
        assert BAD_KEY not in page.text and shop_lake not in page.text
    listed = get(client, "/", refused)
    assert listed.status_code == 200
    assert "/ticdc-lake/lakes/ledger" in listed.text
    assert "lakes/shop" not in listed.text and shop_lake not in listed.text
    ledger = get(client, "/lakes/ledger", refused)
    assert ledger.status_code == 200 and BAD_KEY in ledger.text
    assert get(client, "/dags/ticdc_lake_ledger/runs/manual__1", refused).status_code == 200


def test_a_lone_lake_a_user_is_refused_is_403_at_the_root(lakes, tokens):
    client = app_client({"shop": lakes["shop"]})
    assert get(client, "/", tokens["viewer"]).status_code == 200
    refused = get(client, "/", tokens["refused"])
    assert refused.status_code == 403 and BAD_KEY not in refused.text


def test_a_run_the_dag_does_not_have_is_404(client, tokens):
    viewer, refused = tokens["viewer"], tokens["refused"]
    assert get(client, "/dags/ticdc_lake_shop/runs/nope", viewer).status_code == 404
    # backfill__1 is a run of the backfill DAG, not of the pipeline DAG
    assert get(client, "/dags/ticdc_lake_shop/runs/backfill__1", viewer).status_code == 404
    assert get(client, "/dags/ticdc_lake_backfill_shop/runs/backfill__1", viewer).status_code == 200
    # refused first: a refused user learns nothing of the DAG's runs
    assert get(client, "/dags/ticdc_lake_shop/runs/nope", refused).status_code == 403


# Plain dot segments ("/lakes/..") are resolved by the test client before sending: the real
# api-server's test sends them as they are (test_quality_plugin.py).
@pytest.mark.parametrize(
    "path",
    [
        "/lakes/%2e%2e",
        "/lakes/..%2F..%2F..%2Fetc%2Fpasswd",
        "/lakes/shop%2F..%2Fledger",
        "/lakes/shop%00",
        "/lakes/%2Ftmp",
        "/dags/..%2F..%2Fetc/runs/manual__1",
        "/dags/ticdc_lake_shop/runs/..%2F..%2Fetc%2Fpasswd",
        "/dags/ticdc_lake_shop/runs/manual__1%2F..",
    ],
)
def test_traversal_in_plugin_urls_is_404(client, tokens, path):
    page = get(client, path, tokens["viewer"])
    assert page.status_code == 404, (path, page.status_code)
    assert BAD_KEY not in page.text


def test_the_ui_cookie_logs_in_too(client, tokens):
    client.cookies.set("_token", tokens["viewer"])
    assert client.get("/lakes/shop").status_code == 200
    client.cookies.set("_token", tokens["refused"])
    assert client.get("/lakes/shop").status_code == 403


def test_the_plugin_page_shows_the_lakes_text_as_text(tmp_path, tokens):
    config = write_config(tmp_path)
    fill_hostile_lake(config)
    client = app_client({"hostile": (config.source, LEDGER)})
    page = get(client, "/lakes/hostile", tokens["viewer"])
    assert page.status_code == 200
    assert_escaped(page.text)
    assert_offline(page.text)


_PAGE_IN_A_NEW_PROCESS = """
import importlib.util, json, sys
from pathlib import Path
sys.path.insert(0, {repo!r})
from airflow.api_fastapi.app import init_auth_manager
from airflow.api_fastapi.auth.managers.simple.user import SimpleAuthManagerUser
from fastapi.testclient import TestClient

spec = importlib.util.spec_from_file_location("plugin", {plugin!r})
plugin = importlib.util.module_from_spec(spec)
spec.loader.exec_module(plugin)
token = init_auth_manager().generate_jwt(SimpleAuthManagerUser(username="v", role="viewer"))
lakes = {{"shop": (Path({config!r}), {{"ticdc_lake_shop", "ticdc_lake_backfill_shop"}})}}
client = TestClient(plugin.quality_app(lambda: lakes))
pages = [client.get(path, headers={{"Authorization": "Bearer " + token}})
         for path in ("/", "/lakes/shop", "/dags/ticdc_lake_shop/runs/manual__1")]
spark = sorted(m for m in sys.modules if m.split(".")[0] in ("pyspark", "py4j"))
print(json.dumps({{"status": [p.status_code for p in pages], "spark": spark}}))
"""


def _files(root: Path) -> dict[str, tuple[int, int]]:
    return {str(p.relative_to(root)): (p.stat().st_size, p.stat().st_mtime_ns)
            for p in sorted(root.rglob("*"))}  # fmt: skip


@pytest.mark.slow  # a few seconds: out of the fast tier
def test_a_page_imports_no_spark_and_writes_nothing(tmp_path, airflow_db, lakes):
    """Every page, in a new process (a test's own imports cannot hide one): no pyspark or py4j
    module is imported, and nothing in the lake's folder is added or changed."""
    config = lakes["shop"][0]
    before = _files(config.parent)
    plugin = REPO / "plugins" / "ticdc_lake_quality.py"
    code = _PAGE_IN_A_NEW_PROCESS.format(repo=str(REPO), plugin=str(plugin), config=str(config))
    env = {k: v for k, v in os.environ.items() if not k.startswith("AIRFLOW")}
    env |= auth_env(tmp_path, airflow_db)
    done = subprocess.run([sys.executable, "-c", code], env=env, cwd=tmp_path,
                          capture_output=True, text=True, timeout=300)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    found = json.loads(done.stdout.strip().splitlines()[-1])
    assert found == {"status": [200, 200, 200], "spark": []}
    assert _files(config.parent) == before


def test_configs_sharing_a_dag_id_are_reported_not_half_listed(tmp_path, monkeypatch, tokens):
    """The DAG files fail to import on them; the page says why instead of listing some."""
    configs = tmp_path / "configs"
    configs.mkdir()
    for name in ("prod.yaml", "prod.yml", "orders.yaml"):
        (configs / name).touch()
    monkeypatch.setenv("TICDC_LAKE_CONFIGS", str(configs))
    client = TestClient(load_plugin().quality_app())  # the configs the DAGs find
    for path in ("/", "/lakes/prod", "/dags/ticdc_lake__prod/runs/r1"):
        page = get(client, path, tokens["viewer"])
        assert page.status_code == 500, path
        assert "The pipeline configs cannot be scheduled: " in page.text
        assert "&#x27;prod.yaml&#x27; and &#x27;prod.yml&#x27; both give" in page.text
