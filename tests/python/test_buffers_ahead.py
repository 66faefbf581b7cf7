"""A warm start's first-call buffers made ahead (xjit/backend/host_buffers.h): a frame's first
call lists the large buffers it took (its arena, its results) in a note in the compile cache;
the next process that captures the frame faults buffers of those sizes in on a thread during the
capture, and its first run takes them. Results are eager's either way (docs/runtime.md "Warm
start")."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import run_cached_program

pytest.importorskip("torch")

# Results of 2 and 4.5 MiB and an arena for the intermediate: over the 2 MiB worth a note.
PROGRAM = """
import json, sys, torch, xjit
from xjit import ir

def fn(a, b):
    h = (a @ b) / 32
    return torch.relu(h) * 2, torch.tanh(h).sum(-1, keepdim=True) + a

torch.manual_seed(0)
a, b = torch.randn(512, 1024), torch.randn(1024, 1152)
with torch.no_grad():
    got = xjit.jit(fn, fullgraph=True)(a, b)
    want = fn(a.double(), b.double())
# Against float64: eager's own f32 tanh is off by up to 5e-5 in about one process in eight.
close = all(torch.allclose(g.double(), w, rtol=1e-5, atol=1e-4) for g, w in zip(got, want))
print(json.dumps({"close": close, **ir.backend_stats()}), flush=True)
"""


def _notes(tmp_path: Path) -> list[Path]:
    return sorted((tmp_path / "cache").glob("*.note"))


def test_second_process_takes_the_buffers_made_ahead(tmp_path: Path) -> None:
    wait = {"XJIT_TEST_BUFFERS_AHEAD_WAIT": "1"}
    first = run_cached_program(PROGRAM, tmp_path, **wait)
    assert first["close"] and first["host_buffers_ahead"] == 0
    notes = _notes(tmp_path)
    assert len(notes) == 1
    sizes = [int(n) for n in notes[0].read_text().split()]
    assert 512 * 1152 * 4 in sizes and 512 * 1024 * 4 in sizes  # the two results
    second = run_cached_program(PROGRAM, tmp_path, **wait)
    assert second["close"]
    assert second["host_buffers_ahead"] == len(sizes)
    assert second["host_buffers_ahead_used"] == len(sizes)
    assert _notes(tmp_path) == notes and notes[0].read_text().split() == [str(s) for s in sizes]


def test_switched_off_or_stale_note_changes_nothing(tmp_path: Path) -> None:
    run_cached_program(PROGRAM, tmp_path)
    off = run_cached_program(PROGRAM, tmp_path, XJIT_BUFFERS_AHEAD="0")
    assert off["close"] and off["host_buffers_ahead"] == 0
    # A note of sizes this frame no longer takes: made, not taken, freed; the note is rewritten.
    (note,) = _notes(tmp_path)
    note.write_text("1048576 3145728 ")
    stale = run_cached_program(PROGRAM, tmp_path, XJIT_TEST_BUFFERS_AHEAD_WAIT="1")
    assert stale["close"] and stale["host_buffers_ahead"] == 2
    assert stale["host_buffers_ahead_used"] == 0
    assert "3145728" not in note.read_text()


def test_small_first_calls_leave_no_note(tmp_path: Path) -> None:
    small = PROGRAM.replace("randn(512, 1024), torch.randn(1024, 1152)", "randn(8, 16), torch.randn(16, 24)")
    assert run_cached_program(small, tmp_path)["close"]
    assert _notes(tmp_path) == []
