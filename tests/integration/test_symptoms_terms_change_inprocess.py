"""Issue 48, routes 7 and 8 end to end in-process: a symptoms epsilon change.

`ledger set-epsilon` refuses a change that would take effect mid-week (the next date
noised is a Wednesday) and records nothing; recorded on a Sunday night it takes effect on
the Monday, the next release builds (both weeks summed under one law each), and its data
statement shows each date with the epsilon the ledger recorded for it, not the new one
for every date."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import date, timedelta

import pytest
from support.cached_roots import GeneratedRoots
from support.dates import date_range
from support.report_steps import SYMPTOMS_STEPS as steps
from support.report_steps import run_days

from dp_ops.layout import DataRoot
from dp_ops.privacy.ledger import Ledger
from dp_ops.reports.symptoms.config import SymptomsConfig
from dp_ops.steps.noise_request import RunRequest

pytestmark = [pytest.mark.slow, pytest.mark.integration]

# 2020-01-01 is a Wednesday; the weeks of 2020-01-06 and 2020-01-13 are complete
START, TUESDAY, SUNDAY, END = (date(2020, 1, 1), date(2020, 1, 7), date(2020, 1, 12),
                               date(2020, 1, 19))
TERMS = ("epsilon.symptom_searches", "epsilon.search_users")


def test_a_symptoms_epsilon_change_takes_effect_on_a_monday_and_the_statement_says_so(
        tmp_path_factory: pytest.TempPathFactory, generated_roots: GeneratedRoots) -> None:
    root = DataRoot(generated_roots.copy(tmp_path_factory.mktemp("symptoms_terms_change")
                                         / "data", users=3000, seed=5, start=START, end=END))
    url = f"sqlite:///{root.root / 'ledger.sqlite'}"
    env = {**os.environ, "DP_LEDGER_URL": url, "DP_DATA_ROOT": str(root.root)}
    old = SymptomsConfig()
    new = SymptomsConfig(total_epsilon=1.2, cap_override=old.cap)

    def set_epsilon(term: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "dp_ops", "ledger", "set-epsilon", "symptoms", term,
             repr(new.policy_terms[term]), "--reason", "test: a smaller budget"],
            env=env, capture_output=True, text=True, timeout=120, check=False)

    def policies() -> int:
        ledger = Ledger(url)
        try:
            return len(ledger.policies())
        finally:
            ledger.dispose()

    run_days(steps, root, old,
             date_range(START, TUESDAY), RunRequest(run_id="first"),
             ledger_url=url)
    recorded = policies()
    refused = set_epsilon(TERMS[0])
    assert refused.returncode == 2
    assert "2020-01-08 (a Wednesday" in refused.stderr
    assert "takes effect on Monday 2020-01-13" in refused.stderr
    assert policies() == recorded  # nothing recorded

    run_days(steps, root, old,
             date_range(TUESDAY + timedelta(days=1), SUNDAY),
             RunRequest(run_id="second"), ledger_url=url)
    for term in TERMS:
        done = set_epsilon(term)
        assert done.returncode == 0, done.stderr
    run_days(steps, root, new, date_range(SUNDAY + timedelta(days=1), END),
             RunRequest(run_id="third"), ledger_url=url)

    latest = root.latest_release("symptoms")
    manifest = json.loads((latest / "manifest.json").read_text(encoding="utf-8"))
    assert (manifest["first_date"], manifest["last_date"]) == (START.isoformat(),
                                                              END.isoformat())
    weekly = (latest / "2020_DM_weekly_symptoms_dataset.csv").read_text(encoding="utf-8")
    assert "2020-01-06" in weekly and "2020-01-13" in weekly
    statement = (latest / "DATASTATEMENT.md").read_text(encoding="utf-8")
    a_rows = [line for line in statement.splitlines()
              if line.startswith("| symptom_searches | daily |")]
    k = old.max_symptoms_per_day
    assert len(a_rows) == 2, a_rows
    for row, cfg, dates in ((a_rows[0], old, "2020-01-01..2020-01-12"),
                            (a_rows[1], new, "2020-01-13..2020-01-19")):
        cells = [c.strip() for c in row.strip("|").split("|")]
        assert cells[-1] == dates
        assert float(cells[3]) == pytest.approx(cfg.symptom_epsilon / k, rel=1e-3)
    assert f"| {round(old.run_epsilon, 6):g} | 2020-01-01..2020-01-12 |" in statement
    assert f"| {round(new.run_epsilon, 6):g} | 2020-01-13..2020-01-19 |" in statement
