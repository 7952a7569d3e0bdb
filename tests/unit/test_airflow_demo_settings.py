"""``scripts/airflow_demo.py``'s settings (issue 16): both DAGs backfilled at once by
default, with enough executor slots for both, the DAG files re-parsed every 5 min, the
supervisors' heartbeats at Airflow's default, the scheduler's idle sleep by how many DAGs
run at once, and the input generated beside Airflow's start-up."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from support.pipeline_helpers import load_airflow_demo


def _env(argv: list[str], tmp_path: Path) -> dict[str, str]:
    demo = load_airflow_demo()
    args = demo.parse_args(argv)
    return dict(demo.airflow_env(args, tmp_path, tmp_path / "data", 8080, 8793))


def test_both_dags_at_once_by_default(tmp_path: Path) -> None:
    demo = load_airflow_demo()
    args = demo.parse_args([])
    assert args.together and args.dag_ids == ["mobility_report", "symptoms_dataset"]
    # both at once: 4 mobility runs and 6 symptoms runs (symptoms runs cost more: with 4
    # each, symptoms ended well after mobility); one DAG at a time: 4
    runs = {d: demo.max_active_runs(args, d) for d in args.dag_ids}
    assert runs == {"mobility_report": 4, "symptoms_dataset": 6}
    alone = demo.parse_args(["--no-together"])
    assert {demo.max_active_runs(alone, d) for d in alone.dag_ids} == {4}
    given = demo.parse_args(["--max-active-runs", "3"])
    assert {demo.max_active_runs(given, d) for d in given.dag_ids} == {3}
    # twice the runs in executor slots, summed over the DAGs backfilled at the same time
    assert _env([], tmp_path)["AIRFLOW__CORE__PARALLELISM"] == "20"
    assert _env(["--max-active-runs", "3"], tmp_path)["AIRFLOW__CORE__PARALLELISM"] == "12"
    assert _env(["--no-together"], tmp_path)["AIRFLOW__CORE__PARALLELISM"] == "8"
    assert _env(["--dag-id", "symptoms_dataset"], tmp_path)["AIRFLOW__CORE__PARALLELISM"] == "8"


def test_the_dag_files_are_not_reparsed_every_30_s(tmp_path: Path) -> None:
    env = _env([], tmp_path)
    assert env["AIRFLOW__DAG_PROCESSOR__MIN_FILE_PROCESS_INTERVAL"] == "300"


def test_tasks_heartbeat_at_airflow_s_default_interval(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # a supervisor notices its task's exit without waiting out an interval
    # (dp_ops.airflow.supervisor), so the demo sets none: no heartbeat a second per task
    monkeypatch.delenv("AIRFLOW__WORKERS__MIN_HEARTBEAT_INTERVAL", raising=False)
    assert "AIRFLOW__WORKERS__MIN_HEARTBEAT_INTERVAL" not in _env([], tmp_path)
    # without the local settings file (--no-warm-imports) the supervisors are Airflow's
    # own, and a second a heartbeat bounds how long one holds its slot after its task
    assert _env(["--no-warm-imports"], tmp_path)[
        "AIRFLOW__WORKERS__MIN_HEARTBEAT_INTERVAL"] == "1"


def test_the_scheduler_idle_sleep_follows_how_many_dags_run_at_once(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # one DAG: each task of a run's chain waited up to Airflow's default 1 s to be
    # scheduled while the cores idled; both at once: the cores are busy, Airflow's 1 s
    monkeypatch.delenv("AIRFLOW__SCHEDULER__SCHEDULER_IDLE_SLEEP_TIME", raising=False)
    sleep = "AIRFLOW__SCHEDULER__SCHEDULER_IDLE_SLEEP_TIME"
    assert _env([], tmp_path)[sleep] == "1"
    assert _env(["--dag-id", "mobility_report"], tmp_path)[sleep] == "0.2"
    assert _env(["--no-together"], tmp_path)[sleep] == "0.2"
    monkeypatch.setenv(sleep, "0.5")
    assert _env([], tmp_path)[sleep] == "0.5"
    assert _env(["--dag-id", "mobility_report"], tmp_path)[sleep] == "0.5"


def test_generating_the_input_beside_the_start_up(tmp_path: Path) -> None:
    demo = load_airflow_demo()
    assert demo.parse_args([]).generate_users is None
    args = demo.parse_args(["--start", "2020-01-01", "--end", "2020-01-02",
                            "--generate-users", "50"])
    generator = demo.Generator(args, tmp_path / "data")
    generator.wait()  # nothing started: nothing to wait for
    with pytest.raises(SystemExit):
        demo.parse_args(["--generate-users", "0"])
    # a generator that fails stops the demo with its exit code, before the scheduler
    generator.proc = subprocess.Popen(["false"])
    with pytest.raises(demo.DemoError, match="generating the input failed"):
        generator.wait()
    # one that succeeds but leaves no input is caught by the input check
    generator.proc = subprocess.Popen(["true"])
    with pytest.raises(demo.DemoError, match="no synthetic input"):
        generator.wait()



@pytest.mark.slow
def test_the_scheduler_starts_once_the_input_is_written(tmp_path: Path) -> None:
    """A generator still running (the truth) but with the last day's files written: the
    wait for the input returns at once, the final wait waits for the process."""
    import sys
    import time

    demo = load_airflow_demo()
    args = demo.parse_args(["--start", "2020-01-01", "--end", "2020-01-02",
                            "--generate-users", "50"])
    root = tmp_path / "data"
    for path in ("reference/regions.csv", "reference/symptoms.txt"):
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_text("x")
    generator = demo.Generator(args, root)
    assert {p.parent.parent.name for p in generator.last_files()} == {
        "location_history", "search_activity"}
    for source in ("location_history", "search_activity"):
        (root / "raw" / source / "date=2020-01-01").mkdir(parents=True)
    # a stand-in generator: writes the last day's files after 1 s, then "computes" 2 s
    script = ("import sys, time, pathlib; time.sleep(1)\n"
              "for p in sys.argv[1:]:\n"
              "    pathlib.Path(p).parent.mkdir(parents=True, exist_ok=True)\n"
              "    pathlib.Path(p).write_text('x')\n"
              "time.sleep(2)")
    generator.proc = subprocess.Popen([sys.executable, "-c", script,
                                       *map(str, generator.last_files())])
    t = time.monotonic()
    generator.input_written()
    # returned once the files were there (after the 1 s) while the generator still runs:
    # the scheduler need not wait for it (no upper bound on the clock: poll() says it)
    assert generator.proc.poll() is None
    assert time.monotonic() - t > 0.9
    generator.wait()
    assert generator.proc is None and time.monotonic() - t >= 2.9
    # a generator that fails before the input is complete fails the wait for the input
    generator.proc = subprocess.Popen([sys.executable, "-c", "raise SystemExit(3)"])
    for p in generator.last_files():
        p.unlink()
    with pytest.raises(demo.DemoError, match="exit 3"):
        generator.input_written()


def test_evaluations_run_beside_and_print_at_the_end(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``--evaluate``: each report's evaluation starts as its backfill is done and runs in
    the background; its output is printed after the demo, in order, and a failed one
    fails the demo."""
    import sys

    demo = load_airflow_demo()
    assert demo.parse_args(["--evaluate"]).evaluate and not demo.parse_args([]).evaluate
    # a stand-in for `python -m dp_ops evaluate <report>`: prints, fails for "symptoms"
    stand_in = tmp_path / "python"
    stand_in.write_text(f"#!{sys.executable}\nimport sys, time; time.sleep(0.5)\n"
                        "report = sys.argv[sys.argv.index('evaluate') + 1]\n"
                        "print('evaluated', report)\n"
                        "open(sys.argv[sys.argv.index('--json') + 1], 'w').write('{}')\n"
                        "raise SystemExit(4 if report == 'symptoms' else 0)\n")
    stand_in.chmod(0o755)
    evaluations = demo.Evaluations(tmp_path / "data", tmp_path, python=str(stand_in))
    evaluations.start("mobility")
    evaluations.start("symptoms")
    assert all(p.poll() is None for p, _ in evaluations.procs.values())  # in the background
    capsys.readouterr()
    assert evaluations.finish() == 1
    out = capsys.readouterr().out
    assert out.index("evaluated mobility") < out.index("evaluated symptoms")
    assert "evaluating symptoms failed (exit 4" in out
    assert (tmp_path / "evaluate-mobility.log").read_text() == "evaluated mobility\n"
    assert evaluations.figures_file("mobility").read_text() == "{}"


def _niceness(pid: int) -> list[int]:
    """The niceness of every thread of ``pid`` (field 19 of /proc/<pid>/task/<tid>/stat)."""
    out = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        raw = (task / "stat").read_text()
        out.append(int(raw[raw.rindex(")") + 2:].split()[16]))
    return out


@pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="Linux /proc only")
def test_the_truth_and_the_evaluations_run_in_the_background(tmp_path: Path) -> None:
    """Once the input is written, the generator's every thread (DuckDB's among them) is
    lowered to BACKGROUND_NICENESS, and so are the evaluations, so that the task
    processes of the backfill keep their share of the cores."""
    import os
    import sys

    demo = load_airflow_demo()
    child = subprocess.Popen([sys.executable, "-c",
                              "import threading, time\n"
                              "threading.Thread(target=time.sleep, args=(30,), daemon=True)"
                              ".start()\ntime.sleep(30)\n"])
    try:
        import time
        deadline = time.monotonic() + 10
        while len(list(Path(f"/proc/{child.pid}/task").iterdir())) < 2:
            assert time.monotonic() < deadline
            time.sleep(0.05)
        base = os.getpriority(os.PRIO_PROCESS, 0)  # the child's, inherited
        expected = max(base, demo.BACKGROUND_NICENESS)
        assert set(_niceness(child.pid)) == {base}
        demo.lower_priority(child.pid)
        assert set(_niceness(child.pid)) == {expected}
    finally:
        child.kill()
        child.wait()
    stand_in = tmp_path / "python"
    stand_in.write_text(f"#!{sys.executable}\nimport os\nprint(os.nice(0))\n")
    stand_in.chmod(0o755)
    evaluations = demo.Evaluations(tmp_path / "data", tmp_path, python=str(stand_in))
    evaluations.start("mobility")
    evaluations.procs["mobility"][0].wait()
    assert (tmp_path / "evaluate-mobility.log").read_text() == f"{expected}\n"


def test_the_demo_writes_its_figures_to_a_stamped_results_file(tmp_path: Path) -> None:
    """``make demo``'s figures go to one results file, stamped with the commit and the date:
    the Markdown holds the timings and each evaluation's text, the JSON the same as
    numbers."""
    import json

    demo = load_airflow_demo()
    args = demo.parse_args(["--generate-users", "5000", "--end", "2020-02-20",
                            "--results", "demo"])
    assert demo.parse_args([]).results is None  # only make demo writes the results file
    figures = tmp_path / "evaluate-mobility.json"
    figures.write_text(json.dumps({"published_values": 12, "within_10_points": 1.0}))
    text = tmp_path / "evaluate-mobility.log"
    text.write_text("published values: 12\n")
    md = demo.write_results(args, 61.4, {"mobility_report": 50.2}, 20.1,
                            {"mobility": figures}, {"mobility": text},
                            results_dir=tmp_path / "results")
    assert md == tmp_path / "results" / "demo.md"
    body = md.read_text()
    head = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True,
                          cwd=Path(demo.__file__).parents[1]).stdout.strip()
    assert f"Measured at commit {head[:12]}" in body
    assert "| end to end (wall) | 61 |" in body and "published values: 12" in body
    # the backfills themselves: from the scheduler's start to the last run done
    assert ("the scheduler started at 20, the last run done at 50 | 30 |") in body
    data = json.loads((tmp_path / "results" / "demo.json").read_text())
    assert data["stamp"]["commit"] == head and data["users"] == 5000
    assert data["seconds"] == 61.4 and data["end"] == "2020-02-20"
    assert data["evaluation"]["mobility"]["published_values"] == 12
    assert data["backfill_done_after_seconds"] == {"mobility_report": 50.2}
    assert data["runs_executing_after_seconds"] == 20.1


def test_a_release_past_the_end_is_refused_before_anything_starts(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """A data root whose release ends after ``--end`` (an earlier, longer demo) would make
    the evaluation refuse at the end: the demo says so at once, naming the manifest, and
    starts nothing (no Airflow home written). A release ending on ``--end`` is fine."""
    import json
    import os
    import sys

    demo = load_airflow_demo()
    root, home = tmp_path / "data", tmp_path / "airflow_home"
    latest = root / "published" / "symptoms" / "latest"
    latest.mkdir(parents=True)
    (latest / "manifest.json").write_text(json.dumps({"last_date": "2020-03-31"}))
    monkeypatch.setenv("DP_DATA_ROOT", str(root))
    # the venv's airflow on PATH, as make puts it (the demo checks for it first)
    monkeypatch.setenv("PATH", f"{Path(sys.executable).parent}:{os.environ['PATH']}")
    argv = ["--airflow-home", str(home), "--generate-users", "100", "--evaluate",
            "--end", "2020-02-23"]
    assert demo.main(argv) == 2
    out = capsys.readouterr().out
    assert str(latest / "manifest.json") in out and "ends on 2020-03-31" in out
    assert not home.exists()

    demo.check_no_later_release(root, demo.date(2020, 3, 31), ["mobility", "symptoms"])
    with pytest.raises(demo.DemoError, match="after --end 2020-03-30"):
        demo.check_no_later_release(root, demo.date(2020, 3, 30), ["symptoms"])
