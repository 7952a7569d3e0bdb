"""The engines: the only code that reads private rows (DuckDB or Spark over Parquet), the
SQL renderer, and the atomic file writes every step uses."""
