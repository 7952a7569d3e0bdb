"""The demo's commands: ``generate`` (synthetic input and its truth) and ``evaluate`` (a
release against that truth).

They are plugged into ``python -m dp_ops`` / ``dp-ops`` through the ``dp_ops.commands``
entry points (pyproject.toml), and also run on their own as ``python -m dp_demo`` or
``dp-demo``.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Sequence
from datetime import date
from pathlib import Path
from typing import Any

from dp_ops import settings


def _date(text: str) -> date:
    try:
        return date.fromisoformat(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"{text!r} is not a date (YYYY-MM-DD)") from exc


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from exc
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: must be >= 1")
    return value


def cmd_generate(args: argparse.Namespace) -> int:
    from dp_demo.generator import DEFAULT_USERS, generate

    root = settings.data_root()
    t0 = time.monotonic()
    summary = generate(root, args.start, args.end, users=args.users or DEFAULT_USERS,
                       seed=args.seed, progress=lambda msg: print(f"  {msg}", flush=True))
    print(summary.describe())
    print(f"generated into {root.root} in {time.monotonic() - t0:.1f} s")
    return 0


def cmd_evaluate(args: argparse.Namespace) -> int:
    from dp_demo.evaluation import (
        MobilityEvaluation,
        SymptomsEvaluation,
        TruthMismatch,
        evaluate_mobility,
        evaluate_symptoms,
    )

    t0 = time.monotonic()
    root = settings.data_root()
    evaluation: MobilityEvaluation | SymptomsEvaluation
    try:
        if args.report == "mobility":
            oracle = {k: v for k, v in (("draws", args.draws), ("seed", args.seed))
                      if v is not None}
            evaluation = evaluate_mobility(root, **oracle)
        else:
            evaluation = evaluate_symptoms(root)
    except TruthMismatch as exc:
        print(f"evaluate {args.report}: {exc}", file=sys.stderr)
        return 2
    print(evaluation.describe())
    if args.json is not None:
        args.json.write_text(json.dumps(evaluation.figures(), indent=2) + "\n")
    print(f"evaluated in {time.monotonic() - t0:.1f} s")
    return 0


def generate_command(sub: Any) -> None:
    """Add ``generate`` to a subparsers object (the ``dp_ops.commands`` entry point)."""
    gen = sub.add_parser("generate", help="write synthetic input and its truth")
    gen.add_argument("--start", type=_date, default=date(2020, 1, 1))
    gen.add_argument("--end", type=_date, default=date(2020, 3, 31))
    gen.add_argument("--users", type=int, default=None,
                     help="population size (default: the generator's demo size)")
    gen.add_argument("--seed", type=int, default=2020)
    gen.set_defaults(func=cmd_generate)


def evaluate_command(sub: Any) -> None:
    """Add ``evaluate`` to a subparsers object (the ``dp_ops.commands`` entry point)."""
    ev = sub.add_parser("evaluate", help="compare the latest release with the synthetic "
                                         "truth (evaluation only)")
    ev.add_argument("report", choices=["mobility", "symptoms"])
    # defaults: dp_demo.evaluation's (not imported here: the parser is built on every call)
    ev.add_argument("--draws", type=_positive, default=None,
                    help="mobility: simulated baselines per cell for the oracle "
                         "(default 2000)")
    ev.add_argument("--seed", type=int, default=None,
                    help="mobility: seed of the oracle's simulation (default 2020)")
    ev.add_argument("--json", type=Path, default=None, metavar="PATH",
                    help="also write the figures to PATH as JSON")
    ev.set_defaults(func=cmd_evaluate)


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m dp_demo generate|evaluate ...``: the same commands and the same error
    handling (one line, details in the log file) as ``python -m dp_ops``."""
    from dp_ops import cli

    return cli.main(argv)
