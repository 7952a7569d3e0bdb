# The Airflow image of docker-compose.yaml: Airflow's official image of the version pinned
# in requirements.txt (tests/unit/test_compose.py fails if the two disagree), plus this
# project's runtime dependencies and the project itself (the dp_ops and dp_demo packages
# of plugins/, installed as `pip install .` would, with the SQL of include/sql as package
# data). dags/ is not baked in: docker-compose.yaml mounts it, so editing a DAG needs no
# rebuild; a change under plugins/ or include/ needs `docker compose build`.
FROM apache/airflow:3.3.2-python3.11

# The official image's documented way of adding packages (docker-stack docs, "Adding
# packages from requirements.txt"): pip as the airflow user, never as root, naming
# apache-airflow==${AIRFLOW_VERSION} (set by the image) so that pip fails instead of
# up- or downgrading the image's Airflow. constraints.txt pins every transitive package
# to the set the test suite ran with (it replaces the image's own ${HOME}/constraints.txt).
USER airflow
COPY --chown=airflow:0 requirements.txt requirements-nodeps.txt constraints.txt \
     /opt/airflow/dp_requirements/
RUN pip install --no-cache-dir "apache-airflow==${AIRFLOW_VERSION}" \
        -r /opt/airflow/dp_requirements/requirements.txt \
        -c /opt/airflow/dp_requirements/constraints.txt
# the Apache Spark provider without its pyspark-client requirement (requirements-nodeps.txt)
RUN pip install --no-cache-dir --no-deps -r /opt/airflow/dp_requirements/requirements-nodeps.txt

# The project, after the pinned requirements (a code change rebuilds only these layers).
# --no-deps: its dependencies are exactly the pinned ones installed above. Not editable:
# the packages are copied into site-packages, which is what every Airflow process
# imports; nothing puts plugins/ on PYTHONPATH. include/ is copied beside plugins/ because
# plugins/dp_ops/sql is a symlink to include/sql: the install copies the SQL files into
# site-packages (package data), where the engines read them.
COPY --chown=airflow:0 pyproject.toml README.md /opt/airflow/dp_src/
COPY --chown=airflow:0 include/ /opt/airflow/dp_src/include/
COPY --chown=airflow:0 plugins/ /opt/airflow/dp_src/plugins/
RUN pip install --no-cache-dir --no-deps /opt/airflow/dp_src
