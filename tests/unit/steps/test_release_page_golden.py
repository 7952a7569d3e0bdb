"""The release page is rebuilt to the byte: pages written by the f-string renderer this
template replaced (``golden/release_page/<case>.html``, with the inputs it was given in
``<case>.json``), for both reports' releases from a run (mobility with a method update),
for hostile text in every field and for an empty manifest, are rendered again the same.
A release's page is checksummed in its manifest, so a rerun of an old release must give
the same bytes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dp_ops.reports.mobility.page import published_mobility
from dp_ops.reports.symptoms.page import published_symptoms
from dp_ops.steps.page import render_index

GOLDEN = Path(__file__).parent / "golden" / "release_page"
CASES = sorted(p.stem for p in GOLDEN.glob("*.json"))
SECTIONS = {"mobility": published_mobility, "symptoms": published_symptoms}


def test_there_are_cases() -> None:
    assert CASES == ["empty_mobility", "empty_symptoms", "hostile_mobility",
                     "hostile_symptoms", "mobility", "symptoms"]


@pytest.mark.parametrize("case", CASES)
def test_the_page_is_the_golden_one(case: str) -> None:
    given = json.loads((GOLDEN / f"{case}.json").read_text(encoding="utf-8"))
    expected = (GOLDEN / f"{case}.html").read_bytes()
    page = render_index(given["manifest"], given["charts"], title=given["title"],
                        published=SECTIONS[given["report"]],
                        data_docs_href=given["data_docs_href"],
                        data_docs_path=given["data_docs_path"],
                        uncharted_levels=given["uncharted_levels"],
                        statement=given["statement"])
    assert page.encode("utf-8") == expected


def test_hostile_text_never_becomes_markup() -> None:
    page = (GOLDEN / "hostile_mobility.html").read_text(encoding="utf-8")
    assert "<script" not in page and "&lt;script&gt;" in page
