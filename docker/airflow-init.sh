#!/usr/bin/env bash
# docker-compose's airflow-init: migrate the metadata database, create the lake's pool and write
# the admin's password for the simple auth manager (kept if already there), then exit.
set -euo pipefail

airflow db migrate
airflow pools set ticdc_lake 1 "one Spark job per lake at a time"

passwords="${AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE}"
mkdir -p "$(dirname "$passwords")"
if [[ ! -s "$passwords" ]]; then
  python - "$passwords" <<'PY'
import json, os, sys
with open(sys.argv[1], "w") as out:
    json.dump({"admin": os.environ["AIRFLOW_ADMIN_PASSWORD"]}, out)
PY
fi
echo "Airflow is ready: log in as admin with AIRFLOW_ADMIN_PASSWORD"
