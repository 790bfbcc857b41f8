#!/usr/bin/env bash
# docker-compose's airflow-init: migrate the metadata database, create the lake's pool and set the
# admin's password for the simple auth manager to AIRFLOW_ADMIN_PASSWORD, then exit. It runs on
# every `docker compose up`: a changed AIRFLOW_ADMIN_PASSWORD replaces the old one (the
# api-server reads the file at each login). The file is rewritten whole, readable by its owner
# only (0600); other users' entries in it are kept.
set -euo pipefail

: "${AIRFLOW_ADMIN_PASSWORD:?set AIRFLOW_ADMIN_PASSWORD: the password of the Airflow UI admin}"
passwords="${AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE:?set AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE}"

airflow db migrate
airflow pools set ticdc_lake 1 "one Spark job per lake at a time"

python - "$passwords" <<'PY'
import json
import os
import sys
import tempfile

path = sys.argv[1]
folder = os.path.dirname(os.path.abspath(path))
os.makedirs(folder, mode=0o700, exist_ok=True)
try:
    with open(path) as found:
        users = json.load(found)
except FileNotFoundError:
    users = {}
except ValueError:
    users = None
if not isinstance(users, dict):
    print(f"{path} was not a JSON object of passwords: it now holds admin's alone", file=sys.stderr)
    users = {}
changed = users.get("admin") != os.environ["AIRFLOW_ADMIN_PASSWORD"]
users["admin"] = os.environ["AIRFLOW_ADMIN_PASSWORD"]
# A new file (mkstemp: mode 0600) replacing the old in one step: never readable by others, never
# half-written, whatever mode an earlier version left on the old one.
handle, partial = tempfile.mkstemp(dir=folder, prefix=".passwords-")
try:
    with os.fdopen(handle, "w") as out:
        json.dump(users, out)
        out.write("\n")
    os.replace(partial, path)
except BaseException:
    os.unlink(partial)
    raise
print(f"admin's password {'set from' if changed else 'unchanged, as in'} AIRFLOW_ADMIN_PASSWORD")
PY
echo "Airflow is ready: log in as admin with AIRFLOW_ADMIN_PASSWORD"
