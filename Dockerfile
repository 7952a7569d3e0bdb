# The Airflow image of docker-compose.yaml: Airflow's official image of the version pinned
# in requirements.txt (tests/unit/test_compose.py fails if the two disagree), plus this
# project's runtime dependencies. The code itself (dags/, plugins/, include/) is mounted
# by docker-compose.yaml, not baked in, so editing a DAG needs no rebuild.
FROM apache/airflow:3.3.2-python3.11

# The official image's documented way of adding packages (docker-stack docs, "Adding
# packages from requirements.txt"): pip as the airflow user, never as root, naming
# apache-airflow==${AIRFLOW_VERSION} (set by the image) so that pip fails instead of
# up- or downgrading the image's Airflow. constraints.txt pins every transitive package
# to the set the test suite ran with (it replaces the image's own ${HOME}/constraints.txt).
USER airflow
COPY --chown=airflow:0 requirements.txt constraints.txt /opt/airflow/dp_requirements/
RUN pip install --no-cache-dir "apache-airflow==${AIRFLOW_VERSION}" \
        -r /opt/airflow/dp_requirements/requirements.txt \
        -c /opt/airflow/dp_requirements/constraints.txt
