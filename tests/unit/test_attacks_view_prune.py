"""Security review, rows 10-13: an attacker who can write the data root must not get
script into the Privacy budget view (10), private files out of its release route (11), a
permission check of their choosing or a 500 from a malformed manifest (12), nor make
``dp-ops prune`` delete outside the data root (13).

The view's FastAPI app is exercised in-process: Airflow's ``get_user`` is overridden and
its auth manager replaced by one that records which DAG each check names and allows only
the DAGs a test gives it (the real authentication is tested through a real api-server in
tests/integration/test_ui_browser.py)."""

from __future__ import annotations

import hashlib
import json
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from dp_ops.budget_view import release_history, render_page, report_budget
from dp_ops.layout import DataRoot
from dp_ops.privacy.ledger import Ledger
from dp_ops.prune import describe, prune
from dp_ops.steps.ledger_binding import record_release
from dp_ops.steps.release import checksums

XSS = "<img src=x onerror=alert(1)>"
RELEASE_ID = "2020-03-02-0123456789ab"
DAY = 86400


# ------------------------------------------------------------------------- fixtures --
def _manifest(release_id: str, files: dict[str, Any], **overrides: Any) -> dict[str, Any]:
    manifest: dict[str, Any] = {
        "release_id": release_id, "run_id": "scheduled__2020-03-02",
        "first_date": "2020-02-15", "last_date": "2020-03-02",
        "epsilon": {"per_user_day_max": 1.75},
        "suppression": {"values": {"cells": {"published_share": 0.625}}},
        "gate": {"success": True, "evaluated": 40}, "files": files}
    manifest.update(overrides)
    return manifest


def _publish(root: Path, report: str, release_id: str = RELEASE_ID, *,
             latest: bool = True, links: dict[str, Path] | None = None,
             recorded: bool = True, **overrides: Any) -> Path:
    """A release that ``current_release`` verifies: index.html, a CSV, a chart and
    ``links`` (name: target) listed with their checksums in the manifest; ``latest``
    pointing at it as ``promote`` points it; its manifest recorded in the data root's
    ledger as publish records it, unless not ``recorded`` (a planted release)."""
    release = root / "published" / report / "releases" / release_id
    (release / "charts").mkdir(parents=True)
    (release / "index.html").write_text("<h1>release page</h1>")
    (release / "report.csv").write_text("region,value\nR-1,12.5\n")
    (release / "charts" / "R-1.png").write_bytes(b"PNG")
    for name, target in (links or {}).items():
        (release / name).symlink_to(target)
    data = json.dumps(_manifest(release_id, checksums(release), **overrides)).encode()
    (release / "manifest.json").write_bytes(data)
    if recorded:
        ledger = Ledger(f"sqlite:///{root}/ledger.sqlite")
        try:
            record_release(ledger, report, release_id, hashlib.sha256(data).hexdigest())
        finally:
            ledger.dispose()
    if latest:
        os.symlink(os.path.relpath(release, release.parent.parent),
                   root / "published" / report / "latest")
    return release


def _true_aggregates(root: Path) -> Path:
    part = root / "work" / "bounded" / "mobility" / "date=2020-03-02"
    part.mkdir(parents=True)
    (part / "aggregates.parquet").write_bytes(b"PAR1 true un-noised sums PAR1")
    return part


@dataclass
class Viewer:
    """The app under test and the auth manager's view of it."""

    client: Any
    all_dags: bool = False  # may read every DAG (what a check naming no DAG asks)
    allowed: set[str] = field(default_factory=set)
    checked: list[str | None] = field(default_factory=list)


@pytest.fixture
def viewer(dp_data_root: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Viewer]:
    from airflow.api_fastapi.core_api import security
    from fastapi.testclient import TestClient

    from dp_ops.airflow.budget_plugin import create_app

    # the view lists the ledger's totals: an empty ledger with its schema
    Ledger(f"sqlite:///{dp_data_root}/ledger.sqlite").dispose()
    monkeypatch.setenv("DP_LEDGER_URL", f"sqlite:///{dp_data_root}/ledger.sqlite")

    app = create_app()
    view = Viewer(client=None)

    class RecordingAuthManager:
        def is_authorized_dag(self, *, method: str, access_entity: Any = None,
                              details: Any = None, user: Any = None) -> bool:
            dag_id = getattr(details, "id", None)
            view.checked.append(dag_id)
            return view.all_dags or dag_id in view.allowed

    monkeypatch.setattr(security, "get_auth_manager", RecordingAuthManager)
    # the team lookup reads Airflow's metadata DB, which a unit test does not have
    monkeypatch.setattr(security.DagModel, "get_team_name",
                        staticmethod(lambda dag_id, **_: None))
    app.dependency_overrides[security.get_user] = lambda: object()
    with TestClient(app, raise_server_exceptions=False) as client:
        view.client = client
        yield view


# ------------------------------------------------------------- row 10: stored XSS --
def test_row10_manifest_strings_are_escaped_on_the_page(tmp_path: Path) -> None:
    _publish(tmp_path, "mobility", run_id=XSS, first_date=XSS, last_date=XSS,
             gate={"success": True, "evaluated": XSS},
             suppression={"values": {XSS: {"published_share": 0.5}}})
    _publish(tmp_path, "mobility", XSS, latest=False)  # a release directory named so
    page = _page(tmp_path)
    assert XSS not in page
    assert "&lt;img src=x onerror=alert(1)&gt;" in page  # shown, as text


def test_row10_non_numbers_where_numbers_belong_are_shown_invalid(tmp_path: Path) -> None:
    _publish(tmp_path, "mobility", epsilon={"per_user_day_max": XSS},
             suppression={"values": {"cells": {"published_share": "NaN%"}},
                          "published_share": [1]},
             gate={"success": "yes", "evaluated": 40.5})
    page = _page(tmp_path)
    assert XSS not in page and "NaN%" not in page
    row = _release_row(page, RELEASE_ID)
    assert "invalid" in row and "malformed manifest" in row


def _page(root: Path) -> str:
    led = Ledger(f"sqlite:///{root}/ledger.sqlite")
    try:
        b = report_budget(DataRoot(root), led, "mobility", cap=3.0, normal_run=1.0)
    finally:
        led.dispose()
    return render_page([b], {"mobility": {"release": "/dp-budget/release/mobility/index.html"}},
                       "the ledger's hash chain verifies")


def _release_row(page: str, release_id: str) -> str:
    """The HTML table row of one release."""
    rows = [r for r in page.split("<tr>") if release_id in r]
    assert len(rows) == 1, (release_id, rows)
    return rows[0]


# ------------------------------------------------ row 11: private files out of /release --
def test_row11_latest_pointing_at_work_bounded_serves_nothing(viewer: Viewer,
                                                              dp_data_root: Path) -> None:
    viewer.all_dags = True
    bounded = _true_aggregates(dp_data_root)
    (dp_data_root / "published" / "mobility").mkdir(parents=True)
    (dp_data_root / "published" / "mobility" / "latest").symlink_to(bounded)
    for path in ("aggregates.parquet", "index.html", ""):
        got = viewer.client.get(f"/release/mobility/{path}")
        assert got.status_code == 404, (path, got.status_code, got.content[:60])


def test_row11_only_the_files_a_verified_release_lists_are_served(
        viewer: Viewer, dp_data_root: Path) -> None:
    viewer.all_dags = True
    bounded = _true_aggregates(dp_data_root)
    # listed in the manifest with the right checksum (the attacker wrote both), but a
    # symlink to the true aggregates: served only from inside the release
    release = _publish(dp_data_root, "mobility",
                       links={"data.parquet": bounded / "aggregates.parquet"})
    # planted after publication: not listed in the manifest
    (release / "aggregates.parquet").symlink_to(bounded / "aggregates.parquet")
    (release / "planted.parquet").write_bytes((bounded / "aggregates.parquet").read_bytes())
    assert viewer.client.get("/release/mobility/index.html").text == "<h1>release page</h1>"
    assert viewer.client.get("/release/mobility/").text == "<h1>release page</h1>"
    assert viewer.client.get("/release/mobility/report.csv").status_code == 200
    assert viewer.client.get("/release/mobility/charts/R-1.png").content == b"PNG"
    assert viewer.client.get("/release/mobility/manifest.json").json()["release_id"] \
        == RELEASE_ID
    for path in ("aggregates.parquet", "planted.parquet", "data.parquet",
                 "../../../work/bounded/mobility/date=2020-03-02/aggregates.parquet",
                 "%2e%2e/latest/index.html", "charts"):
        got = viewer.client.get(f"/release/mobility/{path}")
        assert got.status_code == 404, (path, got.status_code, got.content[:60])
    (release / "report.csv").write_text("region,value\nR-1,99.0\n")  # edited after the gate
    assert viewer.client.get("/release/mobility/report.csv").status_code == 404


def test_row11_data_docs_are_not_served_through_a_symlink(viewer: Viewer,
                                                          dp_data_root: Path) -> None:
    """``gx`` linked to a directory the attacker shaped like a Data Docs site, next to
    the true aggregates."""
    viewer.all_dags = True
    bounded = _true_aggregates(dp_data_root)
    site = bounded / "data_docs" / "local_site"
    site.mkdir(parents=True)
    (site / "index.html").write_text("<h1>docs</h1>")
    (site / "aggregates.parquet").symlink_to(bounded / "aggregates.parquet")
    (dp_data_root / "gx").symlink_to(bounded)
    for path in ("index.html", "aggregates.parquet"):
        got = viewer.client.get(f"/data-docs/{path}")
        assert got.status_code == 404, (path, got.status_code, got.content[:60])
    (dp_data_root / "gx").unlink()
    real = dp_data_root / "gx" / "uncommitted" / "data_docs" / "local_site"
    real.mkdir(parents=True)
    (real / "index.html").write_text("<h1>docs</h1>")
    page = real / "validations" / "suite" / "run" / "20200302T000000Z" / "batch.html"
    page.parent.mkdir(parents=True)
    page.write_text("<h1>validation</h1>")
    (real / "validations" / "linked.html").symlink_to(bounded / "aggregates.parquet")
    for index in ("/data-docs/index.html", "/data-docs/"):
        listing = viewer.client.get(index)
        assert listing.status_code == 200
        assert 'href="validations/suite/run/20200302T000000Z/batch.html"' in listing.text
        assert "linked.html" not in listing.text
    got = viewer.client.get("/data-docs/validations/suite/run/20200302T000000Z/batch.html")
    assert got.text == "<h1>validation</h1>"
    assert viewer.client.get("/data-docs/validations/linked.html").status_code == 404


def test_row11_a_latest_pointing_elsewhere_marks_no_release_latest(tmp_path: Path) -> None:
    _publish(tmp_path, "mobility", latest=False)
    decoy = tmp_path / "work" / "bounded" / "mobility" / RELEASE_ID  # same name as a release
    decoy.mkdir(parents=True)
    (tmp_path / "published" / "mobility" / "latest").symlink_to(decoy)
    ledger = Ledger(f"sqlite:///{tmp_path}/ledger.sqlite")
    try:
        rows = release_history(DataRoot(tmp_path), "mobility", ledger)
    finally:
        ledger.dispose()
    assert [(r.release_id, r.latest) for r in rows] == [(RELEASE_ID, False)]


# ------------------------------------------- row 12: permission scope, malformed manifests --
ROUTES = ("/", "/api/budget", "/release/mobility/index.html",
          "/release/symptoms/index.html", "/data-docs/index.html")


def test_row12_a_query_string_cannot_choose_the_dag_checked(viewer: Viewer,
                                                            dp_data_root: Path) -> None:
    """A viewer who may read only another DAG asks for its id in the query."""
    _publish(dp_data_root, "mobility")
    viewer.allowed |= {"mobility_release_consumer_example"}
    for route in ROUTES:
        got = viewer.client.get(route, params={"dag_id": "mobility_release_consumer_example"})
        assert got.status_code == 403, (route, got.status_code, got.content[:60])
    assert "mobility_release_consumer_example" not in viewer.checked


def test_row12_each_route_checks_its_reports_dag(viewer: Viewer, dp_data_root: Path) -> None:
    _publish(dp_data_root, "mobility")
    _publish(dp_data_root, "symptoms")
    viewer.allowed |= {"mobility_report"}
    assert viewer.client.get("/release/mobility/index.html").status_code == 200
    assert viewer.checked == ["mobility_report"]
    viewer.checked.clear()
    assert viewer.client.get("/release/symptoms/index.html",
                             params={"dag_id": "mobility_report"}).status_code == 403
    assert viewer.checked == ["symptoms_dataset"]
    # the page and the JSON show both reports: both DAGs
    viewer.checked.clear()
    assert viewer.client.get("/", params={"dag_id": "mobility_report"}).status_code == 403
    assert "symptoms_dataset" in viewer.checked
    viewer.allowed |= {"symptoms_dataset"}
    assert viewer.client.get("/").status_code == 200
    assert viewer.client.get("/api/budget").status_code == 200


MALFORMED = {"2020-03-01-00000000000a": "{not json",
             "2020-03-01-00000000000b": "[1, 2]",
             "2020-03-01-00000000000c": "{}",
             "2020-03-01-00000000000d": json.dumps({
                 "first_date": 20200301, "last_date": None, "epsilon": [],
                 "suppression": "all", "gate": "passed"}),
             "2020-03-01-00000000000e": '"a string"'}


def test_row12_a_malformed_manifest_is_shown_as_such(viewer: Viewer,
                                                     dp_data_root: Path) -> None:
    viewer.all_dags = True
    _publish(dp_data_root, "mobility")
    releases = dp_data_root / "published" / "mobility" / "releases"
    for release_id, text in MALFORMED.items():
        (releases / release_id).mkdir()
        (releases / release_id / "manifest.json").write_text(text)
    got = viewer.client.get("/")
    assert got.status_code == 200, got.content[:200]
    for release_id in MALFORMED:
        assert "malformed manifest" in _release_row(got.text, release_id)
    assert "malformed manifest" not in _release_row(got.text, RELEASE_ID)
    api = viewer.client.get("/api/budget")
    assert api.status_code == 200
    shown = {r["release_id"]: r for r in api.json()["reports"]["mobility"]["releases"]}
    assert all(shown[r]["malformed"] for r in MALFORMED) and not shown[RELEASE_ID]["malformed"]


# ------------------------ issue 48, route 6: releases by the ledger, pages without script --
PLANTED_ID = "2020-03-09-feedfacecafe"
SCRIPT = "<script>document.title = 'ran'</script>"


def _repoint_latest(root: Path, report: str, release_id: str) -> None:
    latest = root / "published" / report / "latest"
    latest.unlink()
    latest.symlink_to(Path("releases") / release_id)


def test_route6_a_release_the_ledger_never_recorded_is_not_served_or_linked(
        viewer: Viewer, dp_data_root: Path) -> None:
    """A release directory planted beside the real one, its manifest consistent with its
    files (``current_release`` without the ledger accepts it), and ``latest`` pointed at
    it: none of its files is served and the page links no release; once ``latest`` names
    the recorded release again, that one is served."""
    viewer.all_dags = True
    _publish(dp_data_root, "mobility", latest=False)
    planted = _publish(dp_data_root, "mobility", PLANTED_ID, recorded=False,
                       epsilon={"per_user_day_max": 0.01})
    (planted / "index.html").write_text("<h1>release page</h1>")  # same bytes, listed sha
    for path in ("index.html", "report.csv", "manifest.json", ""):
        got = viewer.client.get(f"/release/mobility/{path}")
        assert got.status_code == 404, (path, got.status_code, got.content[:60])
    page = viewer.client.get("/").text
    assert "/dp-budget/release/mobility/index.html" not in page
    assert "not a release this ledger recorded" in _release_row(page, PLANTED_ID)
    shown = {r["release_id"]: r for r in
             viewer.client.get("/api/budget").json()["reports"]["mobility"]["releases"]}
    assert shown[PLANTED_ID]["epsilon_max"] is None and not shown[PLANTED_ID]["latest"]
    _repoint_latest(dp_data_root, "mobility", RELEASE_ID)
    assert viewer.client.get("/release/mobility/index.html").status_code == 200


def _policy(response: Any) -> dict[str, list[str]]:
    """The response's Content-Security-Policy as directive -> values."""
    header = response.headers.get("content-security-policy")
    assert header, (response.url, "no Content-Security-Policy")
    directives = [d.split() for d in header.split(";") if d.strip()]
    return {d[0].lower(): d[1:] for d in directives}


def test_route6_every_page_and_file_is_served_under_a_policy_that_runs_no_script(
        viewer: Viewer, dp_data_root: Path) -> None:
    """HTML planted in the data root (a Data Docs page, a release page) must not run
    script with the viewer's session on the api-server's origin: every response of the
    view forbids script (no script source, no 'unsafe-inline' for it, a sandbox without
    allow-scripts), loads nothing from elsewhere, may be framed only by Airflow, and is
    not content-sniffed; a file that is no page is a download."""
    viewer.all_dags = True
    release = _publish(dp_data_root, "mobility")
    site = dp_data_root / "gx" / "uncommitted" / "data_docs" / "local_site"
    page = site / "validations" / "suite" / "run" / "20200302T000000Z" / "batch.html"
    page.parent.mkdir(parents=True)
    page.write_text(f"<h1>validation</h1>{SCRIPT}")
    (site / "index.html").write_text(SCRIPT)
    (site / "static").mkdir()
    (site / "static" / "styles.css").write_text("h1{color:red}")
    (site / "static" / "logo.svg").write_text(f"<svg xmlns='http://www.w3.org/2000/svg'>"
                                             f"{SCRIPT}</svg>")
    assert (release / "report.csv").is_file()
    # route -> (its media type, sent as a download); None: not found
    routes: dict[str, tuple[str, bool] | None] = {
        "/": ("text/html", False), "/api/budget": ("application/json", False),
        "/release/mobility/index.html": ("text/html", False),
        "/release/mobility/report.csv": ("text/csv", True),
        "/release/mobility/charts/R-1.png": ("image/png", False),
        "/release/mobility/manifest.json": ("application/json", True),
        "/data-docs/index.html": ("text/html", False),
        "/data-docs/validations/suite/run/20200302T000000Z/batch.html": ("text/html", False),
        "/data-docs/static/styles.css": ("text/css", False),
        "/data-docs/static/logo.svg": ("image/svg+xml", True),
        "/data-docs/absent.html": None, "/release/mobility/absent.html": None}
    for route, expected in routes.items():
        got = viewer.client.get(route)
        assert got.status_code == (404 if expected is None else 200), route
        policy = _policy(got)
        assert policy.get("default-src") == ["'none'"], (route, policy)
        for directive in ("script-src", "script-src-elem", "script-src-attr", "object-src",
                          "connect-src", "frame-src", "child-src", "worker-src"):
            assert directive not in policy, (route, directive)  # default-src 'none' rules
        assert "sandbox" in policy, route
        assert set(policy["sandbox"]) <= {"allow-same-origin", "allow-downloads"}, route
        assert policy.get("frame-ancestors") == ["'self'"]
        assert policy.get("base-uri") == ["'none'"] and policy.get("form-action") == ["'none'"]
        assert all("http" not in value for values in policy.values() for value in values)
        assert got.headers.get("x-content-type-options") == "nosniff", route
        if expected is not None:
            media_type, download = expected
            assert got.headers["content-type"].split(";")[0] == media_type, route
            assert (got.headers.get("content-disposition") == "attachment") == download, route
    # the view's own index of the Data Docs, not the planted one
    assert SCRIPT not in viewer.client.get("/data-docs/index.html").text


def test_route6_the_data_docs_index_escapes_what_the_data_root_names(
        viewer: Viewer, dp_data_root: Path) -> None:
    viewer.all_dags = True
    site = dp_data_root / "gx" / "uncommitted" / "data_docs" / "local_site"
    page = site / "validations" / XSS / "run" / "20200302T000000Z" / f"{XSS}.html"
    page.parent.mkdir(parents=True)
    page.write_text("<h1>validation</h1>")
    (site / "index.html").write_text("<h1>docs</h1>")
    listing = viewer.client.get("/data-docs/index.html").text
    assert XSS not in listing and "&lt;img src=x onerror=alert(1)&gt;" in listing
    href = listing.split('href="', 1)[1].split('"', 1)[0]
    assert "<" not in href and viewer.client.get(f"/data-docs/{href}").status_code == 200


# ------------------------------------------------ row 13: prune and symlinked areas --
def _old_partition(part: Path, age_days: float = 40) -> Path:
    part.mkdir(parents=True)
    f = part / "data.parquet"
    f.write_bytes(b"x" * 100)
    stamp = time.time() - age_days * DAY
    os.utime(f, (stamp, stamp))
    return part


@pytest.mark.parametrize("area", ["quarantine", "work/clean", "work/bounded", "work"])
def test_row13_prune_does_not_follow_a_symlinked_area(tmp_path: Path, area: str) -> None:
    root, outside = tmp_path / "data", tmp_path / "elsewhere"
    victims = [_old_partition(outside / sub / "location_history" / "date=2020-01-01")
               for sub in (("clean", "bounded") if area == "work" else ("",))]
    kept = [_old_partition(root / a / "location_history" / "date=2020-01-01")
            for a in ("work/clean", "work/bounded", "quarantine") if not a.startswith(area)]
    (root / area).parent.mkdir(parents=True, exist_ok=True)
    (root / area).symlink_to(outside)  # for "work": clean/ and bounded/ live there
    found = prune(DataRoot(root), 30, apply=True)
    assert [v for v in victims if not (v / "data.parquet").exists()] == []  # outside: kept
    assert [k for k in kept if k.exists()] == []  # the rest is pruned
    assert sorted(c.path for c in found) == sorted(kept)
    message = describe(found, DataRoot(root), 30, applied=True)
    assert f"skipped {area}" in message and "symlink" in message


def test_row13_a_symlinked_partition_is_skipped_and_the_rest_pruned(tmp_path: Path) -> None:
    root, outside = tmp_path / "data", tmp_path / "elsewhere"
    victim = _old_partition(outside / "date=2020-01-01")
    linked = root / "work" / "bounded" / "mobility" / "date=2020-01-01"
    linked.parent.mkdir(parents=True)
    linked.symlink_to(victim)
    rest = [_old_partition(root / "work" / "bounded" / "mobility" / "date=2020-01-02"),
            _old_partition(root / "quarantine" / "location_history" / "date=2020-01-01")]
    found = prune(DataRoot(root), 30, apply=True)
    assert (victim / "data.parquet").exists()
    assert linked.is_symlink()  # skipped, not removed either
    assert [p for p in rest if p.exists()] == []
    assert sorted(c.path for c in found) == sorted(rest)
    message = describe(found, DataRoot(root), 30, applied=True)
    assert "removed 2 partition(s)" in message
    assert "skipped work/bounded/mobility/date=2020-01-01: a symlink" in message


def test_row13_a_symlinked_dataset_directory_is_not_followed(tmp_path: Path) -> None:
    root, outside = tmp_path / "data", tmp_path / "elsewhere"
    victim = _old_partition(outside / "date=2020-01-01")
    dataset_link = root / "work" / "clean" / "location_history"
    dataset_link.parent.mkdir(parents=True)
    dataset_link.symlink_to(outside)  # date=... partitions inside it
    rest = _old_partition(root / "work" / "bounded" / "mobility" / "date=2020-01-02")
    found = prune(DataRoot(root), 30, apply=True)
    assert (victim / "data.parquet").exists()
    assert not rest.exists() and [c.path for c in found] == [rest]
    assert "skipped work/clean/location_history: a symlink" in describe(
        found, DataRoot(root), 30, applied=True)


def test_row13_a_partition_swapped_for_a_symlink_after_the_scan_is_not_followed(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The race: the scan saw a directory; by the removal it is a link out of the root."""
    import dp_ops.prune as prune_module

    root, outside = tmp_path / "data", tmp_path / "elsewhere"
    victim = _old_partition(outside / "mobility" / "date=2020-01-01")
    part = _old_partition(root / "work" / "bounded" / "mobility" / "date=2020-01-01")
    rest = _old_partition(root / "quarantine" / "location_history" / "date=2020-01-01")
    scanned = prune_module.candidates(DataRoot(root), 30)

    def swapped(*_: Any, **__: Any) -> list[Any]:
        for path in part.iterdir():
            path.unlink()
        part.rmdir()
        (root / "work" / "bounded" / "mobility").rmdir()
        (root / "work" / "bounded" / "mobility").symlink_to(outside / "mobility")
        return scanned

    monkeypatch.setattr(prune_module, "candidates", swapped)
    found = prune(DataRoot(root), 30, apply=True)
    assert (victim / "data.parquet").exists()
    assert not rest.exists() and [c.path for c in found] == [rest]


def test_route6_the_signature_file_is_served_only_when_it_signs_the_recorded_manifest(
        viewer: Viewer, dp_data_root: Path) -> None:
    """A consumer downloads ``manifest.json.sig`` from the view: it is served when it is a
    good signature of the ledger-recorded manifest by the key that manifest names, never
    a planted signature (another key's, or garbage)."""
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    from dp_ops.release_signing import SIGNATURE_FILE, ReleaseSigner

    viewer.all_dags = True
    publisher, mirror = ReleaseSigner(Ed25519PrivateKey.generate()), ReleaseSigner(
        Ed25519PrivateKey.generate())
    release = _publish(dp_data_root, "mobility", signature=publisher.manifest_fields())
    route = f"/release/mobility/{SIGNATURE_FILE}"
    assert viewer.client.get(route).status_code == 404  # none written yet
    good = publisher.sign((release / "manifest.json").read_bytes())
    (release / SIGNATURE_FILE).write_bytes(good)
    got = viewer.client.get(route)
    assert got.status_code == 200 and got.content == good
    for planted in (mirror.sign((release / "manifest.json").read_bytes()),
                    publisher.sign(b"another manifest"), b"not a signature"):
        (release / SIGNATURE_FILE).write_bytes(planted)
        assert viewer.client.get(route).status_code == 404
