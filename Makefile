# Two commands matter: `make demo` (set up, run the main job on built-in sample data) and
# `make test` (set up, lint, run the tests). Both create .venv and install what they need.
# `make test-fast` is lint and the tests that start no JVM, Airflow or browser (docs/testing.md).
VENV ?= .venv
PY := $(VENV)/bin/python
UV_VERSION := 0.13.9

.PHONY: setup demo airflow test test-fast lint browser postgres kafka bench bench-decode bench-pipeline bench-pipeline-4m \
	bench-submit bench-compact bench-quality bench-wide-rows bench-tenants bench-kafka-land \
	bench-files bench-report clean

setup: $(VENV)/.installed $(VENV)/.jars $(VENV)/.class-archive

# Every C source and header of the extensions: the decoders' in protocols/native/, silver's own.
SPEEDUPS := $(wildcard include/ticdc_lake/protocols/native/_*speedups.[ch] include/ticdc_lake/silver/_*speedups.[ch])

# Bytecode compiled once here: where PYTHONDONTWRITEBYTECODE is set (CI, containers) every new
# process (Spark's Python workers, each Airflow task) would otherwise compile its imports again,
# 10.2 s against 4.5 s for Airflow's and Great Expectations' alone.
# No uv cache: PySpark comes only as a source archive, and where the index's responses are not
# cacheable uv kept a new 0.5-1.4 GB copy of it per setup (66 GB after a few dozen clean clones,
# with the disk full); uv's temporary cache is removed when the install ends.
$(VENV)/.installed: requirements.txt constraints.txt pyproject.toml $(SPEEDUPS)
	python3 -m venv $(VENV)
	$(VENV)/bin/pip install --quiet --no-cache-dir uv==$(UV_VERSION)
	$(VENV)/bin/uv pip install --quiet --no-cache --compile-bytecode --python $(PY) \
		-r requirements.txt -c constraints.txt -e .
	$(PY) -m compileall -q -j 0 include dags plugins spark_jobs
	touch $@

# Spark's jars, Delta Lake's and Kafka's (ticdc_lake.runtime.jars, pinned in orchestration.SPARK_ARTIFACTS): with
# Maven's strict checksums, from its local repository once it has them.
$(VENV)/.jars: $(VENV)/.installed include/ticdc_lake/orchestration.py
	$(PY) -m ticdc_lake.runtime.jars
	touch $@

# The driver JVM's archive of Spark's classes (ticdc_lake.runtime.class_archive): every Spark driver
# started from this environment maps it instead of loading the classes from the jars.
$(VENV)/.class-archive: $(VENV)/.installed $(VENV)/.jars
	$(PY) -m ticdc_lake.runtime.class_archive
	touch $@

demo: setup
	$(VENV)/bin/ticdc-lake demo

# A local Airflow with the project's DAGs (AIRFLOW_HOME .airflow/); Ctrl-C stops it.
airflow: setup
	$(VENV)/bin/ticdc-lake airflow

lint: setup
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

test: lint browser postgres kafka
	$(VENV)/bin/pytest

# The fast tier: no test marked spark, airflow, browser, slow, kafka or postgres (tests/conftest.py
# marks every test asking for the session's Spark, Airflow, Kafka, PostgreSQL or S3 server). TICDC_LAKE_TESTS_FAST=1 fails any test that
# starts a JVM or an Airflow all the same, naming the marker it lacks.
FAST_TIER := not spark and not airflow and not browser and not slow and not kafka and not postgres and not s3
test-fast: lint
	TICDC_LAKE_TESTS_FAST=1 $(VENV)/bin/pytest -m "$(FAST_TIER)"

# The report's browser test needs Chromium: installed from Debian's packages when missing, only
# where apt-get exists and we are root (elsewhere the test is skipped and says why).
browser:
	@if ! command -v chromium >/dev/null && command -v apt-get >/dev/null \
		&& [ "$$(id -u)" = 0 ]; then \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium; \
	fi

# The real-Airflow tests run Airflow on PostgreSQL, a temporary cluster of their own made with the
# server's initdb (tests/postgres_harness.py): Debian's postgresql installed when no server is
# found, the same way (elsewhere those tests are skipped and say why). Debian's package may make
# and start a cluster of its own (main, port 5432); the tests do not use it.
postgres:
	@if ! command -v initdb >/dev/null && ! ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 \
		&& command -v apt-get >/dev/null && [ "$$(id -u)" = 0 ]; then \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql; \
	fi

# The real-Kafka tests (tests/kafka_broker.py) need a broker and kcat: Apache Kafka's jars,
# resolved with mvn from Maven Central once (offline afterwards), and Debian's kcat, installed
# when missing where apt-get exists and we are root (elsewhere those tests skip and say why).
kafka: $(VENV)/.kafka
	@if ! command -v kcat >/dev/null && command -v apt-get >/dev/null \
		&& [ "$$(id -u)" = 0 ]; then \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq kcat; \
	fi

$(VENV)/.kafka: $(VENV)/.installed tests/kafka_broker.py
	$(PY) -m tests.kafka_broker
	touch $@

bench: bench-decode bench-pipeline bench-submit bench-compact bench-quality bench-wide-rows \
	bench-tenants bench-files bench-report bench-kafka-land

clean:
	rm -rf $(VENV) .pytest_cache .hypothesis

bench-decode: setup
	$(PY) -m bench.decode

# Each profile beside its floor (bench/results/pipeline-<profile>-<size>.json).
bench-pipeline: setup
	$(PY) -m bench.pipeline --profile realistic --row-events 1000000
	$(PY) -m bench.pipeline --profile ddl-heavy --row-events 1000000

bench-pipeline-4m: setup
	$(PY) -m bench.pipeline --profile realistic --row-events 4000000
	$(PY) -m bench.pipeline --profile ddl-heavy --row-events 4000000

# Each stage as the DAG runs it, a spark-submit of its own (bench/results/submit-<profile>-<size>.json).
bench-submit: setup
	$(PY) -m bench.submit

bench-compact: setup
	$(PY) -m bench.compact

# Decode cost per value as tables widen to 800 columns (bench/results/wide-rows.json).
bench-wide-rows: setup
	$(PY) -m bench.wide_rows

# 1 and 100 tenants' shops (6 and 600 gold tables), two runs each (bench/results/tenants.json).
bench-tenants: setup
	$(PY) -m bench.tenants

# Land straight from Kafka against land of kcat's export of the same records (kafka-land.json).
bench-kafka-land: setup kafka
	$(PY) -m bench.kafka_land

# Land of the realistic 1M's records as 4, 400 and 2,000 export files (bench/results/files.json).
bench-files: setup
	$(PY) -m bench.files

# What the data-quality checks cost beside the stages (target: all checks <= 15% of the pipeline).
bench-quality: setup
	$(PY) -m bench.quality

# The data-quality report over 10k and 200k rows of quality/results, in this version's layout and
# an older one's (bench/results/report.json; target at 200k: under 1 s and 300 MB).
bench-report: setup
	$(PY) -m bench.report
