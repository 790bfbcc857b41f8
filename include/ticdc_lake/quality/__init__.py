"""Data-quality checks of every stage (Great Expectations on Spark), their results table, the
HTML report, and a JVM-free read API of the lake (``lakeview``) for the CLI and the Airflow UI."""
