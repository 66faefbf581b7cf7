"""Every frontend test starts and ends with no compiled frames and recording off (test files
with more state to restore add their own fixture on top)."""

from __future__ import annotations

import importlib
from collections.abc import Iterator

import pytest


@pytest.fixture(autouse=True)
def fresh_frontend() -> Iterator[None]:
    try:
        fe = importlib.import_module("xjit._frontend")
    except ImportError:  # the test module skips itself (pytest.importorskip)
        yield
        return
    fe.reset()
    yield
    fe.set_recording(False)
    fe.reset()
