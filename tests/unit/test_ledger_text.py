"""The ledger as text for the command line (``dp_ops.ledger_text``), exactly."""

from __future__ import annotations

from datetime import date

from dp_ops.ledger_text import format_ledger, format_ledger_summary
from dp_ops.privacy.ledger import ALL_REGIONS, Slot, Spend


def _spend(i: int, report: str, day: int, level: int, metric: str, eps: float,
           scope: str = ALL_REGIONS, kind: str = "noise") -> Spend:
    return Spend(i, Slot(report, date(2020, 3, day), level, metric, scope), 0, eps, kind,
                 "v1", f"run-{i}", "", "t")


def test_the_ledger_text_exactly() -> None:
    spends = [_spend(1, "mobility", 1, 1, "retail", 0.1),
              _spend(2, "mobility", 1, 2, "parks", 0.25, "EE-37", "renoise"),
              _spend(3, "symptoms", 1, 0, "fever", 0.5)]
    assert format_ledger(spends).splitlines() == [
        "    id report     date       lvl metric             scope        gen  epsilon "
        "kind          version  run_id",
        "     1 mobility   2020-03-01   1 retail             *              0   0.1000 "
        "noise         v1       run-1",
        "     2 mobility   2020-03-01   2 parks              EE-37          0   0.2500 "
        "renoise       v1       run-2",
        "     3 symptoms   2020-03-01   0 fever              *              0   0.5000 "
        "noise         v1       run-3",
        "",
        "composed epsilon per user-day (basic composition over metrics and levels):",
        "  mobility   2020-03-01  0.3500  (2 spends)",
        "  symptoms   2020-03-01  0.5000  (1 spends)",
    ]
    assert format_ledger([]) == "(no spends)"


def test_the_summary_text_exactly() -> None:
    spends = [s for d in (1, 2, 3, 4, 6) for s in (
        _spend(10 * d, "mobility", d, 1, "retail", 0.3),
        _spend(10 * d + 1, "mobility", d, 2, "parks", 0.2))]
    spends.append(_spend(99, "mobility", 4, 2, "parks", 0.2, "EE-37", "renoise"))
    spends.append(_spend(98, "symptoms", 1, 0, "fever", 0.5))
    spends.append(_spend(97, "symptoms", 2, 0, "fever", 0.5))
    assert format_ledger_summary(spends, caps={"mobility": 0.6}).splitlines() == [
        "spent per report, date, level and metric (epsilon per user-day of the date):",
        "  report     dates                  lvl metric             scope        kind         "
        " spends  epsilon",
        "  mobility   2020-03-01..2020-03-03   1 retail             *            noise        "
        "      1   0.3000",
        "  mobility   2020-03-01..2020-03-03   2 parks              *            noise        "
        "      1   0.2000",
        "  mobility   2020-03-04               1 retail             *            noise        "
        "      1   0.3000",
        "  mobility   2020-03-04               2 parks              *            noise        "
        "      1   0.2000",
        "  mobility   2020-03-04               2 parks              EE-37        renoise      "
        "      1   0.2000",
        "  mobility   2020-03-06               1 retail             *            noise        "
        "      1   0.3000",
        "  mobility   2020-03-06               2 parks              *            noise        "
        "      1   0.2000",
        "  symptoms   2020-03-01..2020-03-02   0 fever              *            noise        "
        "      1   0.5000",
        "",
        "composed epsilon per user-day (basic composition over metrics and levels; delta = 0):",
        "  mobility   2020-03-01..2020-03-03   0.5000  cap 0.6000, headroom 0.1000",
        "  mobility   2020-03-04               0.7000  cap 0.6000, headroom -0.1000"
        "  OVER THE CAP",
        "  mobility   2020-03-06               0.5000  cap 0.6000, headroom 0.1000",
        "  symptoms   2020-03-01..2020-03-02   0.5000",
    ]
    # at the cap (within float rounding: 0.1 + 0.2 > 0.3) is not over it, nor is a total
    # exactly at the tolerance above it
    at_cap = [_spend(1, "mobility", 1, 1, "a", 0.1), _spend(2, "mobility", 1, 1, "b", 0.2)]
    assert format_ledger_summary(at_cap, caps={"mobility": 0.3}).splitlines()[-1] == (
        "  mobility   2020-03-01               0.3000  cap 0.3000, headroom 0.0000")
    edge = [_spend(1, "mobility", 1, 1, "a", 0.5 + 1e-9)]
    assert "OVER" not in format_ledger_summary(edge, caps={"mobility": 0.5})
    # two spends of one slot add up in one line
    twice = [_spend(1, "mobility", 1, 1, "a", 0.1), _spend(2, "mobility", 1, 1, "a", 0.2)]
    assert format_ledger_summary(twice).splitlines()[2] == (
        "  mobility   2020-03-01               1 a                  *            noise        "
        "      2   0.3000")
    assert format_ledger_summary([]) == "(no spends)"


def test_the_headroom_is_zero_up_to_the_tolerance_itself() -> None:
    """A total within the tolerance of the cap has no headroom (0.0000, not -0.0000), up
    to and including the tolerance; past it, the headroom is negative and the date over.
    Float subtraction is exact at that edge only near zero: a cap of 0 and a total of
    exactly the tolerance, then twice it."""
    from dp_ops.privacy.ledger import EPS_TOLERANCE

    def last_line(total: float) -> str:
        spends = [_spend(1, "mobility", 1, 1, "a", total)]
        return format_ledger_summary(spends, caps={"mobility": 0.0}).splitlines()[-1]

    assert last_line(EPS_TOLERANCE) == (
        "  mobility   2020-03-01               0.0000  cap 0.0000, headroom 0.0000")
    assert last_line(2 * EPS_TOLERANCE) == (
        "  mobility   2020-03-01               0.0000  cap 0.0000, headroom -0.0000"
        "  OVER THE CAP")


def test_dates_are_one_range_while_their_spends_agree_to_12_decimals() -> None:
    def days(*eps: float) -> list[str]:
        spends = [_spend(i, "mobility", i + 1, 1, "a", e) for i, e in enumerate(eps)]
        return [ln.split()[1] for ln in format_ledger_summary(spends).splitlines()[2:]
                if ln.strip() and "composed" not in ln][:len(eps)]

    assert days(0.3, 0.3000000000004)[0] == "2020-03-01..2020-03-02"
    assert days(0.3, 0.300000000002)[:2] == ["2020-03-01", "2020-03-02"]
    assert days(0.3, 0.4)[:2] == ["2020-03-01", "2020-03-02"]
