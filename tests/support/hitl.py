"""Answer Airflow's human-in-the-loop requests while ``dag.test()`` waits for them.

``dag.test()`` never answers an ``awaiting_input`` task itself: it waits until a response
recorded from outside (the Required Actions UI or the HITL REST API) flips it back to
scheduled. :func:`responder` is that outside party for the in-process tests: a thread that
finds the unanswered request of a DAG's run in the metadata DB and records a response the
way the REST API's ``update_hitl_detail`` does (responded_by, chosen options, then
``handle_event_submit`` on the parked task). The topology test answers through the real
REST API instead (and checks its refusal of the requester).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field


@dataclass
class Responses:
    """What the responder saw: each request's subject and body, in order."""

    subjects: list[str] = field(default_factory=list)
    bodies: list[str] = field(default_factory=list)


def _answer_one(dag_id: str, user: str, option: str, seen: Responses) -> bool:
    from airflow._shared.timezones import timezone
    from airflow.models.hitl import HITLDetail
    from airflow.models.taskinstance import TaskInstance
    from airflow.models.trigger import handle_event_submit
    from airflow.triggers.base import TriggerEvent
    from airflow.utils.session import create_session
    from airflow.utils.state import TaskInstanceState
    from sqlalchemy import select

    with create_session() as session:
        row = session.execute(
            select(HITLDetail, TaskInstance)
            .join(TaskInstance, TaskInstance.id == HITLDetail.ti_id)
            .where(TaskInstance.dag_id == dag_id,
                   TaskInstance.state == TaskInstanceState.AWAITING_INPUT,
                   HITLDetail.responded_at.is_(None))).first()
        if row is None:
            return False
        detail, ti = row
        seen.subjects.append(detail.subject)
        seen.bodies.append(detail.body or "")
        detail.responded_by = {"id": user, "name": user}
        detail.responded_at = timezone.utcnow()
        detail.chosen_options = [option]
        detail.params_input = {}
        session.add(detail)
        handle_event_submit(TriggerEvent(detail.as_resume_event_payload()),
                            task_instance=ti, session=session)
    return True


@contextmanager
def responder(dag_id: str, *, user: str = "approver", option: str = "Approve",
              poll_s: float = 0.5) -> Iterator[Responses]:
    """Answer every request of ``dag_id`` with ``option`` as ``user`` while the block runs."""
    seen = Responses()
    stop = threading.Event()
    errors: list[BaseException] = []

    def loop() -> None:
        while not stop.is_set():
            try:
                _answer_one(dag_id, user, option, seen)
            except Exception as exc:  # noqa: BLE001 - reported to the test below
                errors.append(exc)
                return
            time.sleep(poll_s)

    thread = threading.Thread(target=loop, name=f"hitl-responder-{dag_id}", daemon=True)
    thread.start()
    try:
        yield seen
    finally:
        stop.set()
        thread.join(timeout=10)
    if errors:
        raise errors[0]
