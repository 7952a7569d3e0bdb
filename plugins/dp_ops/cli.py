"""``python -m dp_ops`` (``dp-ops``): run a report in-process, print the ledger; with the demo
package installed also ``generate`` demo data and ``evaluate`` a release against its truth.

Errors print one clear line (``error: ...``) and the path of the log file holding the
detail (``<data root>/logs/dp_ops.log``: every step summary and the traceback; like every
log of this project it names paths and counts of cells, never rows, ids or un-noised
values). Exit status 2; ``--verbose`` also shows the detail on the terminal.
"""

from __future__ import annotations

import argparse
import logging
import sys
import time
import uuid
from collections.abc import Sequence
from datetime import date, timedelta
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING

from dp_ops import requests, settings
from dp_ops.errors import BadRequest
from dp_ops.reports.spec import report_names

if TYPE_CHECKING:
    from dp_ops.reports.registry import AnyReport

log = logging.getLogger("dp_ops")


def _date(text: str) -> date:
    try:
        return requests.iso_day(text, field="date")
    except BadRequest as exc:
        raise argparse.ArgumentTypeError(str(exc)) from exc


def _region(text: str) -> str:
    try:
        return requests.region_id(text.strip())
    except BadRequest as exc:
        raise argparse.ArgumentTypeError(str(exc)) from exc


def _reason(text: str) -> str:
    try:
        return requests.reason(text)
    except BadRequest as exc:
        raise argparse.ArgumentTypeError(str(exc)) from exc


def _run_id(text: str) -> str:
    try:
        return requests.run_id(text)
    except BadRequest as exc:
        raise argparse.ArgumentTypeError(str(exc)) from exc


def _person(text: str) -> str:
    try:
        return requests.plain_text(text.strip(), field="name", max_length=100)
    except BadRequest as exc:
        raise argparse.ArgumentTypeError(str(exc)) from exc


def _days(start: date, end: date) -> list[date]:
    if end < start:
        raise ValueError(f"--end {end} is before --start {start}")
    return [start + timedelta(days=i) for i in range((end - start).days + 1)]


def _record_cli_approvals(report: AnyReport, days: list[date], run_id: str,
                          args: argparse.Namespace) -> None:
    """``--renoise`` at the command line is an administrator's path: the administrator
    attests that ``--approved-by`` approved it, and the ledger records that (``via`` cli),
    one approval per date. Refused without ``--approved-by``, or when it names the
    requester (``--requested-by``, by default the operating-system user)."""
    import getpass

    from dp_ops.privacy.ledger import VIA_CLI
    from dp_ops.steps.ledger_binding import closing_ledger, open_ledger
    from dp_ops.steps.noising import renoise_request

    if not args.approved_by:
        raise BadRequest("--renoise needs --approved-by NAME: a re-noise spends budget again "
                         "and needs the approval of someone other than its requester, "
                         "recorded in the ledger; nothing was spent")
    try:
        requester = args.requested_by or getpass.getuser()
    except (KeyError, OSError):
        requester = None  # no user name to be had: the ledger refuses, naming the remedy
    plan = report.noise_plan()
    with closing_ledger(open_ledger(report.root, report.ledger_url)) as ledger:
        for day in days:
            ledger.record_approval(
                renoise_request(plan, day, args.region, args.reason, args.repeat_renoise),
                run_id=run_id, requester=requester, approver=args.approved_by, via=VIA_CLI)


def cmd_run(args: argparse.Namespace) -> int:
    from dp_ops.reports.registry import load_report
    from dp_ops.steps.noise_request import RunRequest
    from dp_ops.steps.result import StepResult

    report = load_report(args.report)
    run_id = args.run_id or f"cli__{uuid.uuid4().hex[:12]}"
    days = _days(args.start, args.end)
    if args.renoise and args.region is not None:
        _record_cli_approvals(report, days, run_id, args)
    t0 = time.monotonic()
    done = 0

    def progress(day: date, results: list[StepResult]) -> None:
        nonlocal done
        done += 1
        for result in results:
            log.info(result.summary)
        print(f"[{done}/{len(days)}] {day} done ({time.monotonic() - t0:.0f} s)", flush=True)

    request = RunRequest(run_id=run_id, region=args.region, renoise=args.renoise,
                         repeat_renoise=args.repeat_renoise, reason=args.reason)
    results = report.run_days(days, request, on_day=progress)
    for result in results[-2:]:  # gate and publish
        print(result.summary)
    return 0


def cmd_ledger(args: argparse.Namespace) -> int:
    from dp_ops.ledger_text import format_ledger, format_ledger_summary
    from dp_ops.privacy.ledger import Ledger

    action = getattr(args, "action", None)
    if action is not None:
        return int(args.ledger_func(args))
    if args.verify:
        return cmd_ledger_verify(args)
    root = settings.data_root()
    ledger = Ledger(settings.ledger(root))
    try:
        spends = ledger.spends(args.report, args.date)
        caps = {}
        for name in report_names():
            policy = ledger.policy(name)
            if policy is not None:
                caps[name] = policy.cap
    finally:
        ledger.dispose()
    if args.spends:
        print(format_ledger(spends))
    else:
        print(format_ledger_summary(spends, caps))
    return 0


def cmd_ledger_verify(args: argparse.Namespace) -> int:
    """Exit 0 when the hash chain, the ledger's schema (its append-only guards and nothing
    else) and the data root's identity record all check; else 1, naming the first
    problem."""
    from dp_ops.errors import LedgerMismatch
    from dp_ops.privacy import ledger_key
    from dp_ops.privacy.ledger import Ledger, safe_url
    from dp_ops.steps.ledger_binding import (
        IDENTITY_FILE,
        head_problem,
        recorded_ledger_id,
        release_problems,
    )

    root = settings.data_root()
    url = settings.ledger(root)
    ledger = Ledger(url)
    older: str | None = None
    recorded: str | None = None
    try:
        check = ledger.verify()
        try:
            # the data root's records, their MACs checked under the ledger key
            recorded = recorded_ledger_id(root, ledger_key.load_key())
            if check.ok and recorded == ledger.ledger_id:
                older = head_problem(root, ledger)
        except LedgerMismatch as exc:
            older = str(exc)
        if older is None and check.ok:
            older = next(iter(release_problems(root, ledger)), None)
    finally:
        ledger.dispose()
    print(f"ledger {ledger.ledger_id} at {safe_url(url)}: {check.entries} chain entries, "
          f"head {check.head[:16]}")
    problem = check.problem
    if problem is None and recorded is not None and recorded != ledger.ledger_id:
        problem = (f"{root.root / IDENTITY_FILE} names ledger {recorded}, not this one: "
                   "DP_LEDGER_URL points at another ledger than the data root's")
    problem = problem or older
    if problem is not None:
        print(f"FAILED: {problem}")
        return 1
    print("OK: every row matches its chain entry, the chain is unbroken, the schema is the "
          "one dp_ops creates (its append-only guards and nothing else)"
          + ("" if recorded is None else ", and the data root names this ledger"))
    return 0


def cmd_ledger_init(args: argparse.Namespace) -> int:
    """Create the schema and its append-only guards (as the owner role); on PostgreSQL,
    grant the pipeline's role SELECT and INSERT only."""
    import os

    from dp_ops.privacy import ledger_migrations
    from dp_ops.privacy.ledger import Ledger, safe_url
    from dp_ops.privacy.ledger_schema import grant_pipeline_role, schema_differences

    url = os.environ.get("DP_LEDGER_OWNER_URL") or settings.ledger(settings.data_root())
    ledger = Ledger(url)  # creates or migrates the schema (Alembic) under the write lock
    try:
        with ledger.engine.begin() as conn:
            gone = schema_differences(conn)
            revision = ledger_migrations.current(conn)
            if args.grant:
                grant_pipeline_role(conn, args.grant)
    finally:
        ledger.dispose()
    print(f"ledger {ledger.ledger_id} at {safe_url(url)}: schema ready (migration "
          f"{revision}); append-only guards "
          + ("in place" if not gone else f"NOT AS CREATED: {'; '.join(gone)}"))
    if args.grant:
        print(f"granted {args.grant} SELECT and INSERT on the ledger's tables, nothing else")
    return 0 if not gone else 1


def _set_policy(args: argparse.Namespace, **change: object) -> int:
    from dp_ops.privacy.ledger import Ledger

    ledger = Ledger(settings.ledger(settings.data_root()))
    try:
        before = ledger.policy(args.report)
        after = ledger.set_policy(args.report, reason=args.reason,
                                  run_id=f"cli__{args.action}__{uuid.uuid4().hex[:8]}",
                                  **change)  # type: ignore[arg-type]
    finally:
        ledger.dispose()
    assert before is not None
    print(f"{args.report}: policy recorded ({after.created_at}, reason: {after.reason})")
    for line in before.differences(after.cap, after.terms):
        print(f"  {line.replace('configured', 'now')}")
    print("runs must now be configured to match (see OPERATIONS.md, Changing the cap)")
    return 0


def cmd_ledger_set_cap(args: argparse.Namespace) -> int:
    return _set_policy(args, cap=args.value)


def cmd_ledger_set_epsilon(args: argparse.Namespace) -> int:
    """The new term applies from the next date noised; a report whose values are summed by
    week (its spec's ``terms_change_weekday``) accepts it only when that date is the
    week's first day, and otherwise refuses naming that day."""
    from dp_ops.reports.spec import report_spec

    return _set_policy(args, terms={args.term: args.value},
                       change_weekday=report_spec(args.report).terms_change_weekday)


def cmd_ledger_policy(args: argparse.Namespace) -> int:
    from dp_ops.privacy.ledger import Ledger

    ledger = Ledger(settings.ledger(settings.data_root()))
    try:
        history = ledger.policies()
    finally:
        ledger.dispose()
    if not history:
        print("(no policy recorded yet: the first spend of a report records its configured "
              "one)")
    for p in history:
        terms = ", ".join(f"{k}={v!r}" for k, v in sorted(p.terms.items()))
        print(f"{p.created_at} {p.report:<10} cap={p.cap!r} {terms}  [{p.run_id}: {p.reason}]")
    return 0


def _positive(text: str) -> float:
    try:
        value = float(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"{text[:40]!r}: not a number") from exc
    if not (value > 0 and value != float("inf")):
        raise argparse.ArgumentTypeError(f"{text[:40]!r}: must be a finite number > 0")
    return value


def cmd_prune(args: argparse.Namespace) -> int:
    from dp_ops.prune import RETENTION_DAYS, describe, prune

    root = settings.data_root()
    retention = RETENTION_DAYS if args.retention_days is None else args.retention_days
    found = prune(root, retention, apply=args.apply)
    print(describe(found, root, retention, args.apply))
    return 0


def cmd_verify_release(args: argparse.Namespace) -> int:
    """Exit 0 when the release verifies, 1 when it does not (each problem printed),
    2 when the directory, the column schema or the public key cannot be used."""
    import json

    from dp_ops.sshsig import trusted_keys
    from dp_ops.verify_release import verify_release

    if not args.directory.is_dir():
        print(f"error: {args.directory}: not a directory", file=sys.stderr)
        return 2
    trusted = None
    if args.public_key is not None:
        try:
            trusted = trusted_keys(args.public_key.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            print(f"error: --public-key {args.public_key}: not an OpenSSH public key or "
                  f"allowed_signers file ({exc})", file=sys.stderr)
            return 2
        if not trusted:
            print(f"error: --public-key {args.public_key}: holds no ssh-ed25519 key",
                  file=sys.stderr)
            return 2
    contract = None
    if args.columns is not None:
        try:
            contract = json.loads(args.columns.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            print(f"error: --columns {args.columns}: not a readable JSON column schema "
                  f"({exc})", file=sys.stderr)
            return 2
        if not isinstance(contract, dict) or not isinstance(contract.get("files"), list):
            print(f"error: --columns {args.columns}: a column schema is an object with a "
                  "'files' list", file=sys.stderr)
            return 2
    outcome = verify_release(args.directory, contract, trusted)
    print(json.dumps(outcome.as_dict(), indent=2) if args.json else outcome.text())
    return 0 if outcome.ok else 1


def cmd_release_key(args: argparse.Namespace) -> int:
    """``generate``: make the release-signing key file (refusing to replace one);
    ``show``: the configured key's public half. Both print the public key line, its
    fingerprint and the ``allowed_signers`` line to publish, never the private key."""
    from dp_ops import release_signing

    if args.key_action == "generate":
        path = args.file or release_signing.key_file()
        if path.exists():
            print(f"error: {path} exists: a key that signed releases is kept so that they "
                  "keep verifying (OPERATIONS.md, 'The release-signing key': rotation)",
                  file=sys.stderr)
            return 2
        signer = release_signing.generate_key_file(path, release_signing.signer_identity())
        print(f"release-signing key written to {path} (0600): back it up apart from the "
              "data root and the ledger key")
    else:
        loaded = release_signing.load_signer(settings.data_root().root)
        if loaded is None:
            print(f"no release-signing key: releases are published unsigned "
                  f"({release_signing.UNSIGNED_ENV})")
            return 1
        signer = loaded
    print(f"public key:      {signer.public_key_line()}")
    print(f"fingerprint:     {signer.fingerprint}")
    print(f"allowed_signers: {signer.allowed_signers_line()}")
    return 0


# Commands other installed packages add to this one (the demo package adds ``generate`` and
# ``evaluate``): each entry point is a function that adds its subparser. dp_ops itself
# never imports those packages.
COMMANDS_GROUP = "dp_ops.commands"


def plugin_commands() -> list[metadata.EntryPoint]:
    """The installed ``dp_ops.commands`` entry points, by name."""
    return sorted(metadata.entry_points(group=COMMANDS_GROUP), key=lambda ep: ep.name)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m dp_ops", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--verbose", "-v", action="store_true", help="log every step")
    sub = parser.add_subparsers(dest="command", required=True)

    run = sub.add_parser("run", help="run a report in-process, in date order")
    run.add_argument("report", choices=report_names())
    run.add_argument("--start", type=_date, required=True)
    run.add_argument("--end", type=_date, required=True)
    run.add_argument("--region", type=_region, default=None,
                     help="rerun one region (stored noise reused)")
    run.add_argument("--renoise", action="store_true",
                     help="draw fresh noise for --region (spends budget, needs --reason)")
    run.add_argument("--repeat-renoise", action="store_true",
                     help="allow a second re-noise of the same region and day (recorded)")
    run.add_argument("--reason", type=_reason, default="",
                     help="why; recorded in the ledger (at most 500 characters, no control "
                          "characters)")
    run.add_argument("--run-id", type=_run_id, default=None,
                     help="ledger run id (default: a new one)")
    run.add_argument("--approved-by", type=_person, default=None, metavar="NAME",
                     help="with --renoise: who approved it (not the requester); recorded in "
                          "the ledger as a command-line approval")
    run.add_argument("--requested-by", type=_person, default=None, metavar="NAME",
                     help="with --renoise: who asked for it (default: the operating-system "
                          "user)")
    run.set_defaults(func=cmd_run)

    led = sub.add_parser("ledger", help="print privacy spends and composed epsilon; verify, "
                                        "initialise the ledger, change its recorded policy")
    led.add_argument("--report", default=None)
    led.add_argument("--date", type=_date, default=None)
    led.add_argument("--spends", action="store_true",
                     help="list every spend (id, generation, run id) instead of the summary")
    led.add_argument("--verify", action="store_true",
                     help="check the hash chain, the append-only guards and the data root's "
                          "identity record; exit 1 naming the first problem")
    led.set_defaults(func=cmd_ledger)
    actions = led.add_subparsers(dest="action", required=False)
    init = actions.add_parser("init", help="create the schema and its append-only guards "
                                           "(run as the owner role: DP_LEDGER_OWNER_URL)")
    init.add_argument("--grant", default=None, metavar="ROLE",
                      help="PostgreSQL: grant this role SELECT and INSERT, nothing else")
    init.set_defaults(ledger_func=cmd_ledger_init)
    reports = report_names()
    cap = actions.add_parser("set-cap", help="record a new per-user-day cap for a report")
    cap.add_argument("report", choices=reports)
    cap.add_argument("value", type=_positive)
    cap.add_argument("--reason", type=_reason, required=True)
    cap.set_defaults(ledger_func=cmd_ledger_set_cap)
    eps = actions.add_parser("set-epsilon", help="record a new value of a policy term "
                                                 "(e.g. epsilon.places) for a report; it "
                                                 "applies from the next date noised, which "
                                                 "a report with weekly values needs to be a "
                                                 "Monday")
    eps.add_argument("report", choices=reports)
    eps.add_argument("term")
    eps.add_argument("value", type=_positive)
    eps.add_argument("--reason", type=_reason, required=True)
    eps.set_defaults(ledger_func=cmd_ledger_set_epsilon)
    pol = actions.add_parser("policy", help="print every recorded policy, oldest first")
    pol.set_defaults(ledger_func=cmd_ledger_policy)

    pru = sub.add_parser("prune", help="remove private intermediate files past their "
                                       "retention (dry run unless --apply)")
    pru.add_argument("--retention-days", type=float, default=None,
                     help="keep partitions written within this many days (default 30)")
    pru.add_argument("--apply", action="store_true", help="remove them (default: list only)")
    pru.set_defaults(func=cmd_prune)

    ver = sub.add_parser("verify-release", help="check a published release against its "
                                                "manifest and the release contract (no "
                                                "ledger, no data root needed)")
    ver.add_argument("directory", type=Path, help="the release directory (the one holding "
                                                  "manifest.json)")
    ver.add_argument("--columns", type=Path, default=None, metavar="FILE",
                     help="the column schema of a report dp-ops does not ship "
                          "(<report>.columns.json of its package)")
    ver.add_argument("--public-key", type=Path, default=None, metavar="FILE",
                     help="the publisher's public key (OpenSSH format) or allowed_signers "
                          "file: check the manifest's signature against it (without it, "
                          "integrity only: not authenticated)")
    ver.add_argument("--json", action="store_true", help="print the outcome as JSON")
    ver.set_defaults(func=cmd_verify_release, consumer=True)

    key = sub.add_parser("release-key", help="make or show the release-signing key "
                                             "(prints the public key, never the private)")
    key_actions = key.add_subparsers(dest="key_action", required=True)
    gen = key_actions.add_parser("generate", help="write a new key file (refuses to replace "
                                                  "one)")
    gen.add_argument("--file", type=Path, default=None, metavar="PATH",
                     help="where (default: DP_RELEASE_SIGNING_KEY_FILE or "
                          "~/.config/dp-ops/release_signing.key)")
    key_actions.add_parser("show", help="the configured key's public key and fingerprint")
    key.set_defaults(func=cmd_release_key, consumer=True)

    for command in plugin_commands():
        command.load()(sub)
    return parser


LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s %(message)s"


def open_log_file() -> Path | None:
    """Send this run's log (INFO and up, tracebacks included) to ``<data root>/logs/
    dp_ops.log``; ``None`` if that cannot be written (the terminal still gets the error)."""
    try:
        path = settings.data_root().root / "logs" / "dp_ops.log"
        path.parent.mkdir(parents=True, exist_ok=True)
        handler = logging.FileHandler(path, encoding="utf-8")
    except (OSError, ValueError):
        return None
    handler.setLevel(logging.INFO)
    handler.setFormatter(logging.Formatter(LOG_FORMAT))
    logging.getLogger().addHandler(handler)
    return path


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    console = logging.StreamHandler()
    console.setLevel(logging.INFO if args.verbose else logging.WARNING)
    console.setFormatter(logging.Formatter(LOG_FORMAT))
    if not args.verbose:  # the error line below says it; the traceback is in the file
        console.addFilter(lambda record: not record.exc_info)
    logging.getLogger().addHandler(console)
    logging.getLogger().setLevel(logging.INFO)
    # a consumer's command reads a release only: no log file in a data root
    log_file = None if getattr(args, "consumer", False) else open_log_file()
    log.info("python -m dp_ops %s", args.command)
    try:
        return int(args.func(args))
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except Exception as exc:  # one clear line; the detail goes to the log file
        log.exception("failed: %s", exc)  # on the terminal too with --verbose
        print(f"error: {exc}", file=sys.stderr)
        if log_file is not None:
            print(f"  (details: {log_file})", file=sys.stderr)
        return 2
