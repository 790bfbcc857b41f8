"""The Airflow side: the DAGs' parts, the Spark job operator and a local Airflow.

Modules here import Apache Airflow as ``airflow`` (absolute imports), not this package."""
