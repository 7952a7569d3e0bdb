"""GX's Data Docs page views, with their compiled Jinja templates kept for the process.

GX's views make a new Jinja ``Environment`` for each site build, so every gate compiled
GX's thirty-odd page templates again, the largest part of its Data Docs build. These
views are GX's own (same templates, same filters, same pages) with one in-memory
bytecode cache shared by the process: a template is compiled once per process, and a
task process forked from a warmed parent (``airflow_local_settings``) compiles none.
The cache holds only what Jinja compiled from GX's package templates; it is never read
from or written to disk (nothing under the data root is code that a library runs).
"""

from __future__ import annotations

import threading
from typing import Any

from great_expectations.render.view import DefaultJinjaIndexPageView, DefaultJinjaPageView
from jinja2.bccache import Bucket, BytecodeCache


class ProcessBytecodeCache(BytecodeCache):
    """Jinja's compiled templates by bucket key, in this process's memory. A bucket
    whose template source changed is compiled again (Jinja checks the source's
    checksum against the cached one)."""

    def __init__(self) -> None:
        self._code: dict[str, bytes] = {}
        self._lock = threading.Lock()

    def load_bytecode(self, bucket: Bucket) -> None:
        with self._lock:
            code = self._code.get(bucket.key)
        if code is not None:
            bucket.bytecode_from_string(code)

    def dump_bytecode(self, bucket: Bucket) -> None:
        code = bucket.bytecode_to_string()
        with self._lock:
            self._code[bucket.key] = code

    def clear(self) -> None:
        with self._lock:
            self._code.clear()

    def __len__(self) -> int:
        with self._lock:
            return len(self._code)


COMPILED = ProcessBytecodeCache()


class PageView(DefaultJinjaPageView):
    """GX's validation page view, compiling its templates once per process."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.env.bytecode_cache = COMPILED


class IndexPageView(DefaultJinjaIndexPageView):
    """GX's site index view, compiling its templates once per process."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.env.bytecode_cache = COMPILED
