"""The only package that imports Airflow: DAG defaults and tags, the operators and sensor,
and the one place that turns a pipeline error into fail-with-retry or fail-without-retry."""
