"""dp_ops: a differentially private report factory (mobility and symptoms reports).

The privacy core (noise, bounding, ledger, baseline, suppression, reports) has no Airflow
imports; ``dp_ops.airflow.operators`` holds the thin Airflow adapters.
"""

__version__ = "0.1.0"
