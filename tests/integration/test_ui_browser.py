"""The Airflow UI in a real browser: log in, check the DAG list, trigger an on-call rerun
from its form and watch it succeed (issue 7).

A module fixture prepares a data root the way an operator's machine has it (synthetic input
for 2020-01-01..02-16, then ``python -m dp_ops run mobility`` through 2020-02-15: a
published release and a noised 2020-02-15), then starts ``airflow standalone`` (api-server
with the UI, scheduler, dag-processor, triggerer; simple auth manager) on a free loopback
port, with the settings of ``scripts/airflow_demo.py`` (its own temporary ``AIRFLOW_HOME``,
SQLite, LocalExecutor, this repository's ``dags/``). Headless Chromium (Debian's
``/usr/bin/chromium``, driven by Playwright with ``executable_path`` and a fresh user data
dir) then does what an on-call engineer does:

1. signs in on the login form with the password that standalone generated;
2. on the DAG list, finds the report DAGs and no "Dag Import Error" indicator (and the
   REST API, with the session's cookie, and the metadata DB agree);
3. unpauses ``mobility_region_rerun`` with its toggle, opens it, presses Trigger, fills the
   form (date 2020-02-15, a level-2 region, a reason; "Draw fresh noise" left off) and
   submits;
4. follows the run page until its state badge says Success (the metadata DB agrees and holds
   the form's values as the run's conf); a failed run fails the test with the failed task's
   error and log.

Screenshots of each step go to ``test-artifacts/ui/`` (with the standalone log, failed
task logs and, on failure, a screenshot of the page as it was). Run state is read from the
SQLite metadata DB read-only. Every Airflow process is in one process group, which is
stopped at the end, also when the test fails.

Without ``/usr/bin/chromium`` the tests skip, naming ``scripts/install_test_browser.sh``,
except under CI, where they fail.
"""

from __future__ import annotations

import contextlib
import csv
import importlib.util
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import date
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from support.cached_roots import GeneratedRoots
from support.ci import in_ci
from support.pipeline_helpers import load_airflow_demo

pytestmark = [pytest.mark.slow, pytest.mark.integration,
              # data, Airflow start-up and one rerun take minutes on busy cores
              pytest.mark.timeout(1200)]

REPO = Path(__file__).resolve().parents[2]
ARTIFACTS = REPO / "test-artifacts" / "ui"
CHROMIUM = Path("/usr/bin/chromium")
INSTALL_HINT = "scripts/install_test_browser.sh (as root: apt-get install chromium)"
# exactly these, and a fresh --user-data-dir (Playwright's launch_persistent_context)
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu",
                 "--disable-background-networking", "--disable-component-update",
                 "--disable-sync", "--no-first-run"]
VIEWPORT = {"width": 1280, "height": 800}

START, END = date(2020, 1, 1), date(2020, 2, 16)
NOISED_THROUGH = date(2020, 2, 15)
USERS, SEED = 3000, 7
REPORT_DAGS = ("mobility_report", "symptoms_dataset", "mobility_region_rerun",
               "symptoms_region_rerun", "mobility_method_update")
RERUN_DAG = "mobility_region_rerun"
REASON = "OPS-42: raw data corrected (UI browser test)"
IMPORT_ERROR = re.compile(r"Dag Import Errors?")

STARTUP_TIMEOUT_S = 300  # db migrate + four components, on 2 cores shared with other tests
PARSE_TIMEOUT_S = 300
RUN_TIMEOUT_S = 360
UI_TIMEOUT_MS = 60_000  # one page action or expectation


def _tail(path: Path, lines: int = 30) -> str:
    with contextlib.suppress(OSError):
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    return ""


# ------------------------------------------------------------------------- deployment --
@dataclass
class AirflowUI:
    """``airflow standalone`` on a loopback port, its home, and the data root it serves."""

    base_url: str
    home: Path
    data_root: Path
    region: str  # a level-2 region_id of the synthetic reference data
    process: subprocess.Popen[bytes]
    log: Path
    meta: Any  # airflow_demo.Metadata: read-only queries on the SQLite metadata DB
    demo: ModuleType  # scripts/airflow_demo.py

    def check_alive(self) -> None:
        if self.process.poll() is not None:
            raise AssertionError(f"airflow standalone exited with code "
                                 f"{self.process.returncode}; see {self.log}:\n"
                                 f"{_tail(self.log)}")

    def password(self) -> str:
        """The admin password that the simple auth manager generated on first start."""
        path = self.home / "simple_auth_manager_passwords.json.generated"
        return str(json.loads(path.read_text())["admin"])

    def run(self, run_id: str) -> tuple[str, str, str | None, dict[str, Any]] | None:
        """(state, run_type, triggered_by, conf) of a ``RERUN_DAG`` run."""
        rows = self.meta.query("SELECT state, run_type, triggered_by, conf FROM dag_run "
                               "WHERE dag_id = ? AND run_id = ?", (RERUN_DAG, run_id))
        if not rows:
            return None
        state, run_type, triggered_by, conf = rows[0]
        return str(state), str(run_type), triggered_by, json.loads(conf or "{}")

    def task_states(self, run_id: str) -> dict[str, tuple[str | None, int]]:
        rows = self.meta.query("SELECT task_id, map_index, state, try_number FROM "
                               "task_instance WHERE dag_id = ? AND run_id = ?",
                               (RERUN_DAG, run_id))
        return {(t if m < 0 else f"{t}[{m}]"): (s, int(n)) for t, m, s, n in rows}

    def task_log(self, run_id: str, task_id: str, map_index: int, attempt: int) -> Path:
        """Airflow 3's default ``log_filename_template``."""
        mapped = f"map_index={map_index}/" if map_index >= 0 else ""
        return (self.home / "logs" / f"dag_id={RERUN_DAG}" / f"run_id={run_id}"
                / f"task_id={task_id}" / f"{mapped}attempt={max(attempt, 1)}.log")

    def failed_tasks(self, run_id: str) -> list[tuple[str, int, int]]:
        """(task id, map index, try number) of the run's failed task instances."""
        return [(str(t), int(m), int(n)) for t, m, n in self.meta.query(
            "SELECT task_id, map_index, try_number FROM task_instance WHERE dag_id = ? "
            "AND run_id = ? AND state = 'failed' ORDER BY start_date", (RERUN_DAG, run_id))]


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


@pytest.fixture(scope="module")
def chromium() -> Path:
    """Debian's Chromium and Playwright, or a skip (a failure under CI) saying how."""
    problem = None
    if not os.access(CHROMIUM, os.X_OK):
        problem = f"{CHROMIUM} is missing; install it with {INSTALL_HINT}"
    elif importlib.util.find_spec("playwright") is None:
        problem = "the playwright package is missing (pip install -r requirements-dev.txt)"
    if problem:
        if in_ci():
            pytest.fail(f"the Airflow UI browser test cannot run under CI: {problem}")
        pytest.skip(problem)
    return CHROMIUM


def _prepare_data_root(root: Path, generated_roots: GeneratedRoots) -> str:
    """Synthetic input at ``root`` (created), then the CLI's in-process mobility chain
    through NOISED_THROUGH: the rerun's ``validate_request`` needs that day noised and the
    baseline present. Returns the first level-2 region."""
    generated_roots.copy(root, users=USERS, seed=SEED, start=START, end=END)
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("AIRFLOW", "DP_"))}
    # the session's release-signing key (tests/conftest.py): the chain publishes
    env.update(DP_DATA_ROOT=str(root), GX_ANALYTICS_ENABLED="false",
               DP_RELEASE_SIGNING_KEY_FILE=os.environ["DP_RELEASE_SIGNING_KEY_FILE"])
    res = subprocess.run(
        [sys.executable, "-m", "dp_ops", "run", "mobility", "--start", START.isoformat(),
         "--end", NOISED_THROUGH.isoformat()],
        env=env, cwd=REPO, capture_output=True, text=True, timeout=900)
    assert res.returncode == 0, (f"dp_ops run mobility failed ({res.returncode}):\n"
                                 f"{res.stdout[-3000:]}\n{res.stderr[-3000:]}")
    assert (root / "published" / "mobility" / "latest" / "manifest.json").is_file()
    with (root / "reference" / "regions.csv").open(newline="") as f:
        return next(r["region_id"] for r in csv.DictReader(f) if r["level"] == "2")


def _standalone_env(demo: ModuleType, home: Path, data_root: Path, port: int) -> dict[str, str]:
    args = demo.parse_args(["--airflow-home", str(home), "--max-active-runs", "1"])
    with pytest.MonkeyPatch.context() as mp:
        # Nothing of this process's Airflow (tests/conftest.py) or of the developer's shell
        # reaches the deployment.
        for key in list(os.environ):
            if key.startswith(("AIRFLOW", "DP_")):
                mp.delenv(key)
        env: dict[str, str] = demo.airflow_env(args, home, data_root, port,
                                               demo.free_port(0))
    # the deployment's own release-signing key, made as the demo makes it (beside its home)
    env["DP_RELEASE_SIGNING_KEY_FILE"] = str(home / "release_signing.key")
    demo.release_signing_key(env, home)
    url = f"http://127.0.0.1:{port}"
    env.update({
        # 127.0.0.1 rather than the demo's localhost: the api-server binds IPv4 loopback
        # only, and the browser's cookie is for the host it was given.
        "AIRFLOW__API__BASE_URL": url,
        "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"{url}/execution/",
        # the triggerer's log server (default 8794) would clash with a concurrent Airflow
        "AIRFLOW__LOGGING__TRIGGER_LOG_SERVER_PORT": str(demo.free_port(0)),
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": "admin:admin",
        # standalone starts its components as `airflow ...` from PATH: this venv's
        "PATH": os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")]),
        "NO_COLOR": "1",
    })
    return env


def _wait_until_ready(ui: AirflowUI) -> None:
    """The health endpoint reports every component healthy and the password file exists."""
    url = f"{ui.base_url}/api/v2/monitor/health"
    direct = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # loopback
    deadline = time.monotonic() + STARTUP_TIMEOUT_S
    health: Any = None
    while time.monotonic() < deadline:
        ui.check_alive()
        with contextlib.suppress(urllib.error.URLError, OSError, ValueError):
            with direct.open(url, timeout=10) as r:
                health = json.loads(r.read())
            components = ("metadatabase", "scheduler", "triggerer", "dag_processor")
            if (all((health.get(c) or {}).get("status") == "healthy" for c in components)
                    and (ui.home / "simple_auth_manager_passwords.json.generated").is_file()):
                ui.password()  # written in one go, but make sure it parses
                return
        time.sleep(2)
    raise AssertionError(f"airflow standalone not ready after {STARTUP_TIMEOUT_S} s "
                         f"(health: {health}); see {ui.log}:\n{_tail(ui.log)}")


def _wait_until_parsed(ui: AirflowUI) -> None:
    """Every report DAG is in the metadata DB, or an import error is: the tests report it
    (through the UI first)."""
    marks = ",".join("?" * len(REPORT_DAGS))
    deadline = time.monotonic() + PARSE_TIMEOUT_S
    while time.monotonic() < deadline:
        ui.check_alive()
        if ui.meta.query("SELECT 1 FROM import_error"):
            return
        parsed = ui.meta.query(f"SELECT count(*) FROM dag WHERE dag_id IN ({marks}) AND NOT "
                               "is_stale", REPORT_DAGS)
        if parsed and parsed[0][0] == len(REPORT_DAGS):
            return
        time.sleep(2)
    raise AssertionError(f"the report DAGs were not parsed after {PARSE_TIMEOUT_S} s; see "
                         f"{ui.home / 'logs' / 'dag_processor'} and {ui.log}")


def _stop(process: subprocess.Popen[bytes]) -> None:
    """SIGTERM to standalone's process group (it, its four components, their workers and
    task processes), then SIGKILL to whatever is left of the group."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGTERM)
    try:
        process.wait(timeout=60)
    except subprocess.TimeoutExpired:
        pass
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:  # the components stop after their parent
        try:
            os.killpg(process.pid, 0)
        except ProcessLookupError:
            break
        time.sleep(0.5)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)
    with contextlib.suppress(subprocess.TimeoutExpired):
        process.wait(timeout=10)


@pytest.fixture(scope="module")
def airflow_ui(chromium: Path, tmp_path_factory: pytest.TempPathFactory,
               generated_roots: GeneratedRoots) -> Iterator[AirflowUI]:
    demo = load_airflow_demo()
    shutil.rmtree(ARTIFACTS, ignore_errors=True)
    ARTIFACTS.mkdir(parents=True)
    base = tmp_path_factory.mktemp("ui_browser")
    data_root = base / "data"
    region = _prepare_data_root(data_root, generated_roots)

    home = base / "airflow_home"
    (home / "plugins").mkdir(parents=True)  # empty: see airflow_demo.airflow_env
    demo.write_local_settings(home, True)  # tasks start with pandas, DuckDB, GX imported
    port = demo.free_port(0)
    env = _standalone_env(demo, home, data_root, port)
    log = home / "standalone.log"
    previous_handler = None
    if threading.current_thread() is threading.main_thread():
        # a CI job stopped with SIGTERM still runs the teardown below (as on Ctrl-C), so that
        # no Airflow process outlives the test session
        previous_handler = signal.signal(signal.SIGTERM, _interrupt)
    with log.open("ab") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", "airflow", "standalone"], env=env, cwd=home,
            stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            start_new_session=True)
    ui = AirflowUI(base_url=f"http://127.0.0.1:{port}", home=home, data_root=data_root,
                   region=region, process=process, log=log,
                   meta=demo.Metadata(home / "airflow.db"), demo=demo)
    try:
        _wait_until_ready(ui)
        _wait_until_parsed(ui)
        yield ui
    finally:
        _stop(process)
        with contextlib.suppress(OSError):
            shutil.copy(log, ARTIFACTS / "airflow-standalone.log")
        if previous_handler is not None:
            signal.signal(signal.SIGTERM, previous_handler)


# ---------------------------------------------------------------------------- browser --
def _shot(page: Any, name: str) -> Path:
    path = ARTIFACTS / f"{name}.png"
    page.screenshot(path=str(path))
    return path


@contextlib.contextmanager
def _screenshot_on_failure(page: Any, name: str) -> Iterator[None]:
    try:
        yield
    except BaseException:
        with contextlib.suppress(Exception):
            _shot(page, f"failure-{name}")
        raise


@pytest.fixture(scope="module")
def page(airflow_ui: AirflowUI, chromium: Path,
         tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """A signed-in page of headless Chromium (fresh profile) on the deployment's UI."""
    from playwright.sync_api import expect, sync_playwright

    with sync_playwright() as pw:
        context = pw.chromium.launch_persistent_context(
            str(tmp_path_factory.mktemp("chromium_profile")), executable_path=str(chromium),
            headless=True, args=CHROMIUM_ARGS, viewport=VIEWPORT,
            base_url=airflow_ui.base_url)
        try:
            context.set_default_timeout(UI_TIMEOUT_MS)
            context.set_default_navigation_timeout(2 * UI_TIMEOUT_MS)
            expect.set_options(timeout=UI_TIMEOUT_MS)
            page = context.pages[0] if context.pages else context.new_page()
            with _screenshot_on_failure(page, "login"):
                page.goto("/")
                # the UI sends a signed-out browser to the simple auth manager's form
                page.wait_for_url(re.compile(r"/auth/login"))
                page.get_by_label("Username").fill("admin")
                page.get_by_label("Password").fill(airflow_ui.password())
                _shot(page, "01-login")
                page.get_by_role("button", name="Sign in").click()
                page.wait_for_url(lambda url: "/auth/login" not in url)
                expect(page.get_by_test_id("nav-dags-link")).to_be_visible()
            yield page
        finally:
            context.close()
            expect.set_options(timeout=None)  # back to Playwright's default


def test_dag_list_shows_the_report_dags_without_import_errors(
        airflow_ui: AirflowUI, page: Any) -> None:
    from playwright.sync_api import expect

    with _screenshot_on_failure(page, "dag-list"):
        ui_count = _open_with_import_errors(page, "/dags")
        dag_ids = page.get_by_test_id("dag-id")
        expect(dag_ids.first).to_be_visible()
        page.wait_for_load_state("networkidle")
        _shot(page, "02-dag-list")
        # import errors first: they are the likely reason for a missing DAG
        indicator = page.get_by_role("button", name=IMPORT_ERROR)
        in_db = airflow_ui.meta.query("SELECT filename, stacktrace FROM import_error")
        assert (indicator.count(), ui_count, len(in_db)) == (0, 0, 0), (
            f"import errors: the DAG list shows {indicator.count()} indicator(s) "
            f"({indicator.first.get_attribute('aria-label') if indicator.count() else '-'}),"
            f" the UI's API answer counts {ui_count}, see {ARTIFACTS / '02-dag-list.png'}; "
            "in the metadata DB:\n" + "\n".join(f"{f}:\n{trace}" for f, trace in in_db))
        # every report DAG has its card
        for dag_id in REPORT_DAGS:
            expect(dag_ids.filter(has_text=re.compile(f"^{dag_id}$"))).to_have_count(1)

    with _screenshot_on_failure(page, "home"):
        # the home page has its own "Dag Import Errors" indicator
        assert _open_with_import_errors(page, "/") == 0
        page.wait_for_load_state("networkidle")
        expect(page.get_by_text(IMPORT_ERROR)).to_have_count(0)

    # the REST API, with the session's cookie, agrees
    api = page.request.get("/api/v2/importErrors")
    assert api.ok, f"GET /api/v2/importErrors: {api.status} {api.text()[:300]}"
    assert api.json()["total_entries"] == 0, api.json()
    api_dags = page.request.get("/api/v2/dags", params={"limit": 100})
    assert api_dags.ok, f"GET /api/v2/dags: {api_dags.status} {api_dags.text()[:300]}"
    assert set(REPORT_DAGS) <= {d["dag_id"] for d in api_dags.json()["dags"]}


def test_on_call_rerun_from_the_trigger_form_succeeds(airflow_ui: AirflowUI,
                                                      page: Any) -> None:
    from playwright.sync_api import expect

    with _screenshot_on_failure(page, "unpause"):
        page.goto("/dags")
        card = page.get_by_test_id("dag-card").filter(
            has=page.get_by_test_id("dag-id").filter(has_text=re.compile(f"^{RERUN_DAG}$")))
        toggle = card.get_by_test_id("toggle-pause")
        expect(toggle).to_have_attribute("data-state", "unchecked")  # paused at creation
        toggle.click()
        expect(toggle).to_have_attribute("data-state", "checked")
        _poll(lambda: airflow_ui.meta.query(
            "SELECT is_paused FROM dag WHERE dag_id = ?", (RERUN_DAG,)) == [(0,)],
            timeout=60, what=f"{RERUN_DAG} unpaused in the metadata DB")

    with _screenshot_on_failure(page, "trigger-form"):
        card.get_by_test_id("dag-id").click()
        expect(page.get_by_test_id("header-card")).to_contain_text(RERUN_DAG)
        page.get_by_test_id("trigger-dag-button").click()
        form = page.get_by_role("dialog").filter(
            has_text=re.compile(rf"Trigger Dag\s*-\s*{RERUN_DAG}"))
        # the form Airflow renders from the DAG's Params: element_<param name>
        form.locator('input[name="element_date"]').fill(NOISED_THROUGH.isoformat())
        form.locator('input[name="element_region"]').fill(airflow_ui.region)
        form.locator('input[name="element_reason"]').fill(REASON)
        expect(form.locator('input[name="element_renoise"]')).not_to_be_checked()
        submit = form.get_by_test_id("trigger-dag-submit")
        expect(submit).to_be_enabled()
        _shot(page, "03-trigger-form")
        with page.expect_response(lambda r: r.request.method == "POST"
                                  and r.url.endswith(f"/dags/{RERUN_DAG}/dagRuns")) as posted:
            submit.click()
        assert posted.value.ok, f"trigger: {posted.value.status} {posted.value.text()[:500]}"
        run_id = str(posted.value.json()["dag_run_id"])

    with _screenshot_on_failure(page, "run"):
        # the UI goes on to the new run's page
        header = page.get_by_test_id("header-card")
        expect(header).to_contain_text(run_id)
        _wait_for_success(airflow_ui, page, run_id)
        _shot(page, "04-run-succeeded")

    run = airflow_ui.run(run_id)
    assert run is not None
    state, run_type, triggered_by, conf = run
    assert (state, run_type, triggered_by) == ("success", "manual", "UI")
    assert conf == {"date": NOISED_THROUGH.isoformat(), "region": airflow_ui.region,
                    "renoise": False, "reason": REASON, "repeat_renoise": False}
    assert set(airflow_ui.task_states(run_id).values()) == {("success", 1)}


def _open_with_import_errors(page: Any, path: str) -> int:
    """Load ``path`` in a fresh document and return the import-error count of the UI's own
    request for it, so that "no indicator" on the page means "none", not "not loaded yet".
    From about:blank, because a late answer to the previous page's request would match too
    (and its body is gone once that page is left)."""
    page.goto("about:blank")
    with page.expect_request(lambda r: "/api/v2/importErrors" in r.url) as asked:
        page.goto(path)
    answer = asked.value.response()
    assert answer is not None and answer.ok, (
        f"the UI's GET {asked.value.url}: {answer.status if answer else 'no answer'}")
    return int(answer.json()["total_entries"])


def _poll(check: Any, *, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"not seen within {timeout:.0f} s: {what}")
        time.sleep(1)


def _wait_for_success(ui: AirflowUI, page: Any, run_id: str) -> None:
    """Until the run page's state badge says Success, following the run in the metadata DB:
    a failed run fails at once, with the failed tasks' errors and logs."""
    from playwright.sync_api import expect

    badge = page.get_by_test_id("header-card").get_by_test_id("state-badge").first
    deadline = time.monotonic() + RUN_TIMEOUT_S
    while True:
        ui.check_alive()
        run = ui.run(run_id)
        state = run[0] if run else None
        if state == "success":
            break
        if state == "failed":
            # for the failure screenshot: the page as the user sees it then
            with contextlib.suppress(AssertionError):
                expect(badge).to_have_text("Failed", timeout=20_000)
            failures = []
            for task_id, map_index, attempt in ui.failed_tasks(run_id):
                log = ui.task_log(run_id, task_id, map_index, attempt)
                with contextlib.suppress(OSError):
                    shutil.copy(log, ARTIFACTS / f"{task_id}-attempt{attempt}.log")
                failures.append(f"{task_id} (try {attempt}): "
                                f"{ui.demo.task_error(log) or 'no error recorded'}\n  log: {log}")
            raise AssertionError(f"{RERUN_DAG} run {run_id} failed:\n" + "\n".join(failures)
                                 + f"\ntask states: {ui.task_states(run_id)}")
        if time.monotonic() > deadline:
            raise AssertionError(f"{RERUN_DAG} run {run_id} not finished after "
                                 f"{RUN_TIMEOUT_S} s (state {state}, tasks "
                                 f"{ui.task_states(run_id)}); see {ui.log}")
        page.wait_for_timeout(2000)
    # the UI refreshes a running run's page by itself (auto_refresh_interval, 3 s); reload
    # once if it has not caught up
    try:
        expect(badge).to_have_text("Success", timeout=20_000)
    except AssertionError:
        page.reload()
        expect(badge).to_have_text("Success")


# ---------------------------------------------------------------- the privacy budget view --
BUDGET_PAGES = ("/dp-budget/", "/dp-budget/api/budget",
                "/dp-budget/release/mobility/index.html", "/dp-budget/data-docs/index.html")


def _cli_totals(data_root: Path) -> dict[str, dict[str, float]]:
    """report -> date -> composed epsilon, read off ``python -m dp_ops ledger``'s output
    (consecutive dates with the same spends are one range there)."""
    from datetime import timedelta

    env = {k: v for k, v in os.environ.items() if not k.startswith(("AIRFLOW", "DP_"))}
    env.update(DP_DATA_ROOT=str(data_root), GX_ANALYTICS_ENABLED="false")
    res = subprocess.run([sys.executable, "-m", "dp_ops", "ledger"], env=env, cwd=REPO,
                         capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr
    totals: dict[str, dict[str, float]] = {}
    section = res.stdout.split("composed epsilon per user-day", 1)[1]
    for m in re.finditer(r"^\s+(\w+)\s+(\d{4}-\d\d-\d\d)(?:\.\.(\d{4}-\d\d-\d\d))?"
                         r"(?: \(\d+ dates\))?\s+(\d+\.\d+)", section, re.M):
        first = date.fromisoformat(m[2])
        last = date.fromisoformat(m[3] or m[2])
        for i in range((last - first).days + 1):
            totals.setdefault(m[1], {})[(first + timedelta(days=i)).isoformat()] = float(m[4])
    return totals


def test_the_privacy_budget_view_is_behind_airflows_authentication(
        airflow_ui: AirflowUI) -> None:
    direct = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    for path in BUDGET_PAGES:
        for headers, expected in (({}, 401), ({"Authorization": "Bearer forged"}, 403),
                                  ({"Cookie": "_token=forged"}, 403)):
            request = urllib.request.Request(airflow_ui.base_url + path, headers=headers)
            with pytest.raises(urllib.error.HTTPError) as refused:
                direct.open(request, timeout=30)
            assert refused.value.code == expected, (path, headers, refused.value.code)


def test_the_privacy_budget_view_shows_the_ledgers_totals(airflow_ui: AirflowUI,
                                                          page: Any) -> None:
    """Browse > Privacy budget opens the plugin's page inside the UI; its figures are the
    ledger's (the same totals as ``python -m dp_ops ledger``); the release page and the
    Data Docs it links to open with the session."""
    from playwright.sync_api import expect

    with _screenshot_on_failure(page, "privacy-budget"):
        page.goto("/")
        page.get_by_role("button", name="Browse").click()
        page.get_by_role("menuitem", name="Privacy budget").click()
        page.wait_for_url(re.compile(r"/plugin/privacy-budget"))
        frame = page.frame_locator("iframe").first
        expect(frame.get_by_role("heading", name="Privacy budget")).to_be_visible()
        expect(frame.get_by_role("heading", name="mobility")).to_be_visible()
        expect(frame.get_by_text("the ledger's hash chain verifies")).to_be_visible()
        page.wait_for_load_state("networkidle")
        _shot(page, "05-privacy-budget")
    api = page.request.get("/dp-budget/api/budget")
    assert api.ok, f"GET /dp-budget/api/budget: {api.status} {api.text()[:300]}"
    shown = api.json()["reports"]
    cli = _cli_totals(airflow_ui.data_root)
    assert cli["mobility"], "python -m dp_ops ledger printed no mobility totals"
    assert set(shown["mobility"]["totals"]) == set(cli["mobility"])
    for day, value in cli["mobility"].items():
        assert abs(shown["mobility"]["totals"][day] - value) < 5e-5, day
    # the rerun test re-published: the release history names the latest release
    assert any(r["latest"] for r in shown["mobility"]["releases"])
    for path in BUDGET_PAGES[2:]:
        linked = page.request.get(path)
        assert linked.ok, f"GET {path}: {linked.status}"
