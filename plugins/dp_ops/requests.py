"""Checks on every value a person types (trigger forms, the CLI), made before anything is
spent. Pure: no files, no Airflow.

- Dates are ISO ``YYYY-MM-DD`` only (Python also reads ``20200216`` as a date: refused).
- Free text (a reason, a run id) is length-limited and holds no control characters, so it
  cannot forge lines in ``ledger --spends``, recolour a terminal or flood a log.
- Region ids are short and plain.
- A rejected value is echoed at most as a short prefix (:func:`shown`): a 1 MB value does
  not reach the task log whole.
"""

from __future__ import annotations

import re
import unicodedata
from datetime import date

from dp_ops.errors import BadRequest

REASON_MAX = 500
RUN_ID_MAX = 250
REGION_ID_MAX = 64
SHOWN_MAX = 40
_ISO_DATE = re.compile(r"\d{4}-\d{2}-\d{2}")
_REGION_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:-]*")


def shown(value: object) -> str:
    """``repr`` of at most the first ``SHOWN_MAX`` characters of ``value`` (and its length
    when cut): safe to put in an error message."""
    text = str(value)
    if len(text) <= SHOWN_MAX:
        return repr(text)
    return f"{text[:SHOWN_MAX]!r}... ({len(text)} characters)"


def iso_day(value: object, *, field: str) -> date:
    """A date written ``YYYY-MM-DD`` exactly."""
    text = str(value).strip()
    if not _ISO_DATE.fullmatch(text):
        raise BadRequest(f"{field}={shown(value)}: expected a date as YYYY-MM-DD")
    try:
        return date.fromisoformat(text)
    except ValueError as exc:
        raise BadRequest(f"{field}={shown(value)}: not a calendar date ({exc})") from exc


def plain_text(value: str, *, field: str, max_length: int) -> str:
    """``value`` if it is at most ``max_length`` characters and holds no control or
    format characters (newlines, escapes, bidi overrides); else :class:`BadRequest`."""
    if len(value) > max_length:
        raise BadRequest(f"{field}={shown(value)}: at most {max_length} characters")
    bad = [c for c in value if unicodedata.category(c) in ("Cc", "Cf", "Zl", "Zp")]
    if bad:
        raise BadRequest(f"{field}={shown(value)}: control characters are not allowed "
                         f"(found {bad[0]!r})")
    return value


def reason(value: str, *, field: str = "reason") -> str:
    return plain_text(value, field=field, max_length=REASON_MAX)


def run_id(value: str, *, field: str = "run_id") -> str:
    return plain_text(value, field=field, max_length=RUN_ID_MAX)


def region_id(value: str, *, field: str = "region") -> str:
    """A plain region id: letters, digits, ``._:-``, at most ``REGION_ID_MAX``."""
    if len(value) > REGION_ID_MAX or not _REGION_ID.fullmatch(value):
        raise BadRequest(f"{field}={shown(value)}: a region_id is 1-{REGION_ID_MAX} "
                         "letters, digits, '.', '_', ':' or '-'")
    return value
