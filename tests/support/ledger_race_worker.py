"""Real OS processes that race on one budget ledger (helper of test_ledger.py).

:class:`RacePool` starts ``n`` worker processes with the ``spawn`` start method (fresh
interpreters, nothing inherited but the arguments, like separate Airflow workers) once, and
reuses them for many races. In each race every worker opens its own :class:`Ledger` on the
given URL, opens a database connection, then waits at a shared barrier; all are released
together and call the ledger at once. Each worker reports what happened as a plain dict.
"""

from __future__ import annotations

import multiprocessing as mp
import threading
import time
from multiprocessing.connection import Connection
from multiprocessing.synchronize import Barrier
from typing import Any

BARRIER_TIMEOUT_S = 60.0


def _call(ledger: Any, op: dict[str, Any]) -> dict[str, Any]:
    if op["method"] == "reserve":
        res = ledger.reserve(op["requests"], run_id=op["run_id"], kind=op["kind"],
                             cap=op["cap"], method_version=op["method_version"],
                             reason=op.get("reason", ""), approval=op.get("approval"))
        return {"spend_ids": tuple(s.id for s in res.spends),
                "generations": tuple(s.generation for s in res.spends),
                "new_ids": tuple(sorted(res.new_ids))}
    raise ValueError(f"unknown op {op['method']!r}")


def _widen_race_window(ledger: Any, pause: float) -> None:
    """Make this worker's ``reserve`` start ``pause`` seconds late, like a process the OS
    suspends at the worst moment: a check-then-reserve that is not atomic (e.g. a check
    in one transaction and the spend in another) is then caught with certainty."""
    reserve = ledger.reserve

    def late_reserve(*args: Any, **kwargs: Any) -> Any:
        time.sleep(pause)
        return reserve(*args, **kwargs)

    ledger.reserve = late_reserve


def _serve(conn: Connection, barrier: Barrier) -> None:
    """Worker loop: one ``(url, op)`` per race, ``None`` to stop."""
    from dp_ops.errors import LedgerError
    from dp_ops.privacy.ledger import Ledger

    conn.send("ready")
    while (msg := conn.recv()) is not None:
        url, op = msg
        ledger = None
        if not op.get("open_after_start"):
            try:
                ledger = Ledger(url)
                ledger.spends()  # connect before the start line: the race is on reserve
            except Exception as exc:  # noqa: BLE001 - reported to the test, which fails
                barrier.abort()
                conn.send({"ok": False, "error": type(exc).__name__, "message": repr(exc)})
                continue
        try:
            barrier.wait(BARRIER_TIMEOUT_S)
        except threading.BrokenBarrierError:
            if ledger is not None:
                ledger.dispose()
            conn.send({"ok": False, "error": "BrokenBarrierError", "message": ""})
            continue
        released = time.monotonic()  # CLOCK_MONOTONIC: comparable across processes
        try:
            if ledger is None:  # racing to create the schema, too
                ledger = Ledger(url)
            if pause := op.get("pause_before_reserve_s"):
                _widen_race_window(ledger, pause)
            out = {"ok": True, **_call(ledger, op)}
        except LedgerError as exc:
            out = {"ok": False, "error": type(exc).__name__, "message": str(exc)}
        except Exception as exc:  # noqa: BLE001 - anything else is a bug the test reports
            out = {"ok": False, "error": type(exc).__name__, "message": repr(exc)}
        out["released"] = released
        out["finished"] = time.monotonic()
        if ledger is not None:
            ledger.dispose()
        conn.send(out)


class RacePool:
    """``n`` spawned worker processes sharing one barrier; use as a context manager."""

    def __init__(self, n: int) -> None:
        ctx = mp.get_context("spawn")
        self.n = n
        self.barrier = ctx.Barrier(n)
        self._conns: list[Connection] = []
        self._procs: list[Any] = []
        for i in range(n):
            parent, child = ctx.Pipe()
            proc = ctx.Process(target=_serve, args=(child, self.barrier),
                               name=f"ledger-race-{i}", daemon=True)
            proc.start()
            child.close()
            self._conns.append(parent)
            self._procs.append(proc)
        # wait for every interpreter to be up and importing done, so races time only races
        for i, conn in enumerate(self._conns):
            try:
                ready = conn.poll(120) and conn.recv() == "ready"
            except EOFError:  # the worker died while starting
                ready = False
            if not ready:
                self.close()
                raise RuntimeError(f"ledger race worker {i} did not start")

    def race(self, url: str, ops: list[dict[str, Any]], timeout: float = 120.0
             ) -> list[dict[str, Any]]:
        """Run ``ops[i]`` in worker ``i``, all released at once; results in worker order."""
        if len(ops) != self.n:
            raise ValueError(f"need exactly {self.n} ops, got {len(ops)}")
        if self.barrier.broken:
            self.barrier.reset()
        for conn, op in zip(self._conns, ops, strict=True):
            conn.send((url, op))
        deadline = time.monotonic() + timeout
        results = []
        for i, conn in enumerate(self._conns):
            if not conn.poll(max(0.0, deadline - time.monotonic())):
                raise TimeoutError(f"ledger race worker {i} did not answer in {timeout} s")
            results.append(conn.recv())
        return results

    def close(self) -> None:
        for conn in self._conns:
            try:
                conn.send(None)
            except (BrokenPipeError, OSError):
                pass
        for proc in self._procs:
            proc.join(10)
            if proc.is_alive():
                proc.terminate()
                proc.join(5)
        for conn in self._conns:
            conn.close()

    def __enter__(self) -> RacePool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
