"""The privacy kernel: the noise sampler, the budget ledger and what a report noises.

No files, no engine, no Airflow: everything here runs in a plain Python process and is
tested on its own.
"""
