# Two commands do all the setup on a fresh machine with Python 3.11:
#   make demo   build the environment, generate demo data, run both reports (mobility and
#               symptoms, at once) through Airflow (real scheduler, backfills 2020-01-01..2020-02-23,
#               SQLite metadata DB), then compare the releases with the synthetic truth
#   make test   build the environment and run every test (what .ci/run runs), the ledger
#               tests on SQLite and on a throwaway PostgreSQL server

PYTHON ?= $(shell command -v python3.11 || command -v python3)
# pytest-xdist workers (make test, make test-fast): one per core by default
PYTEST_WORKERS ?= auto
PYTHON := $(PYTHON)
VENV   := .venv
PY     := $(VENV)/bin/python
# The demo's range: the mobility baseline window (2020-01-03..02-06), then nine public days
# from 2020-02-15 to a Sunday, which closes the symptoms report's seventh whole week;
# DEMO_END=2020-03-31 for the whole quarter (docs/airflow.md, "The demo's range")
DEMO_START ?= 2020-01-01
DEMO_END   ?= 2020-02-23
DEMO_USERS ?= 100000

export PATH := $(CURDIR)/$(VENV)/bin:$(PATH)
export GX_ANALYTICS_ENABLED := false
# Python caches compiled modules (the venv's are compiled when it is built): an inherited
# PYTHONDONTWRITEBYTECODE would make every process, task and test worker compile the
# project's modules and pytest rewrite every test file again
export PYTHONDONTWRITEBYTECODE :=
export DP_DATA_ROOT ?= $(CURDIR)/data

.PHONY: venv demo generate run test test-fast lint constraints clean topology mutation hooks

venv: $(VENV)/.installed

$(VENV)/.installed: requirements.txt requirements-nodeps.txt requirements-dev.txt constraints.txt \
		scripts/build_venv.sh \
		pyproject.toml
	# the pinned files, with uv (pip when uv cannot be had, or DP_INSTALLER=pip); then
	# dp_ops and dp_demo, editable: `import dp_ops`, `dp-ops` and `python -m dp_ops` work
	# everywhere the venv's python runs (no PYTHONPATH), and edits need no reinstall
	bash scripts/build_venv.sh $(PYTHON) $(VENV)
	# the build leaves plugins/<name>.egg-info behind; plugins/ is on sys.path, so it would
	# be found as a second copy of the package's metadata (Airflow then warns that the
	# Privacy budget plugin is registered twice): the venv's dist-info is the one
	rm -rf plugins/*.egg-info
	-@$(MAKE) --no-print-directory hooks
	touch $@

# ruff before every commit (scripts/pre-commit), in a clone with a .git directory
hooks:
	@if [ -d .git ]; then mkdir -p .git/hooks && ln -sf ../../scripts/pre-commit .git/hooks/pre-commit \
		&& ln -sf ../../scripts/commit-msg .git/hooks/commit-msg; fi

generate: venv
	$(PY) -m dp_ops generate --start $(DEMO_START) --end $(DEMO_END) --users $(DEMO_USERS)

# the input is generated beside Airflow's start-up (--generate-users), not before it
demo: venv
	$(PY) scripts/airflow_demo.py --fresh --start $(DEMO_START) --end $(DEMO_END) \
		--generate-users $(DEMO_USERS) --evaluate --results demo

# the same chains in-process, without Airflow (fast local runs and debugging)
run: generate
	$(PY) -m dp_ops run mobility --start $(DEMO_START) --end $(DEMO_END)
	$(PY) -m dp_ops run symptoms --start $(DEMO_START) --end $(DEMO_END)

# The ledger tests run on SQLite and on PostgreSQL: the script gives pytest a throwaway
# PostgreSQL server (installing Debian's package first if it is missing and we are root, as
# in CI) and stops it afterwards; DP_TEST_POSTGRES_URL=... uses an existing server.
# The browser test drives Debian's chromium: install_test_browser.sh installs it when
# missing and we are root (as in CI); elsewhere it prints the command and the test skips.
# Then the critical mutants (tests/mutation/critical_mutants.toml): each small bug that
# would break the privacy guarantee or the published numbers must fail the fast tests.
# mypy (strict) runs first, over the packages mypy.ini names (the test plug-in report
# included): a mutant it rejects counts as caught in make mutation.
test: venv
	$(VENV)/bin/mypy --config-file mypy.ini
	bash scripts/install_test_browser.sh
	bash scripts/with_test_postgres.sh $(PY) -m pytest -q -n $(PYTEST_WORKERS) --dist loadgroup \
		--durations=15
	$(PY) scripts/critical_mutants.py

# docker-compose.yaml's stack (PostgreSQL with its roles, Redis, airflow-init, api-server,
# dag-processor, scheduler, triggerer, Celery worker) as local processes, without Docker,
# and the scenario its test checks (docs/deploy.md, "The same stack without Docker").
# As root it installs Debian's postgresql and redis-server when missing.
# TOPOLOGY_ARGS=--keep-running leaves it up for the UI.
TOPOLOGY_ARGS ?=
topology: venv
	$(PY) scripts/topology.py $(TOPOLOGY_ARGS)

# Mutation testing of the privacy kernel, the noise step, the gate suites and the reliability
# rules (scripts/mutation.py): score and survivors in benchmarks/results/mutation.md.
mutation: venv
	$(PY) -m pip install -q -r requirements-mutation.txt -c constraints.txt
	$(PY) scripts/mutation.py

# The inner loop: the fast tier (every test not marked slow: the unit tests but those that
# take several seconds, every critical mutant's test among them, and the DAG checks), on
# one pytest-xdist worker per core.
test-fast: venv
	$(PY) -m pytest -q -n $(PYTEST_WORKERS) --dist loadgroup -m "not slow"

lint: venv
	$(VENV)/bin/ruff check plugins dags tests scripts benchmarks
	$(VENV)/bin/mypy --config-file mypy.ini

constraints: venv
	$(PY) -m pip freeze --exclude-editable > constraints.txt

clean:
	rm -rf data airflow_home topology .pytest_cache .hypothesis .mutation

# Benchmark (benchmarks/README.md): our public-places step against PipelineDP, OpenDP and a
# non-private DuckDB floor on one synthetic day of 1M, 4M and 16M stays, plus the noise
# sampler and one whole pipeline day (~10 min). Quick run: make bench BENCH_ARGS="--sizes 250k,1M"
PEERS_VENV := benchmarks/.venv-peers
BENCH_ARGS ?=

.PHONY: bench bench-peers

bench-peers: $(PEERS_VENV)/.installed

# the peer libraries get their own venv: they pin polars 1.36.1 and must not touch .venv
$(PEERS_VENV)/.installed: benchmarks/requirements-peers.txt
	$(PYTHON) -m venv $(PEERS_VENV)
	$(PEERS_VENV)/bin/python -m pip install --quiet --upgrade pip
	$(PEERS_VENV)/bin/python -m pip install --quiet -r benchmarks/requirements-peers.txt
	touch $@

bench: venv bench-peers
	$(PY) benchmarks/run.py $(BENCH_ARGS)
	$(PY) benchmarks/sampler.py
