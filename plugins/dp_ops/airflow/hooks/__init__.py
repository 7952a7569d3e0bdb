"""Airflow hooks of the report factory (registered in the provider info)."""
