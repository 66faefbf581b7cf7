"""bench/report.py's warm-start table: the raw warm first call next to its overhead over a later
call of the same process (docs/perf.md, "Session 5: warm start")."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

pytest.importorskip("matplotlib")
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench import report  # noqa: E402


def _row() -> dict:
    def first(first_s: float, later_s: float, cpu_overhead_s: float = 0.05) -> dict:
        return {
            "first_call_s": first_s,
            "later_call_s": later_s,
            "first_call_overhead_s": first_s - later_s,
            "first_call_cpu_overhead_s": cpu_overhead_s,
        }

    return {
        "case": "gpt2/b1",
        "backends": {
            "eager": {"cold": first(0.366, 0.180)},
            "inductor": {"cold": first(21.8, 0.2), "warm": {"error": "timed out"}},
            "xjit": {"cold": first(0.378, 0.176), "warm": first(0.285, 0.176, 0.12)},
        },
    }


def test_warm_rows_put_the_overhead_next_to_the_raw_first_call() -> None:
    (row,) = report.warm_rows([_row()])
    assert row[0] == "gpt2/b1"
    assert row[1:4] == ["366", "186", "50"]  # eager: first call, first - later, in CPU time
    assert row[4:8] == ["n/a"] * 4  # inductor warm failed: no numbers invented
    assert row[8:12] == ["285", "176", "109", "120"]  # xjit warm: first, later, overhead, CPU


def test_markdown_has_the_warm_table() -> None:
    machine = {"cpu": "x", "isa": [], "cores": 2, "memory_gib": 8, "torch": "t", "torch_threads": 2}
    machine |= {"transformers": "t", "python": "p", "loadavg_1m_at_start": 1.0}
    results = {
        "machine": machine,
        "xjit": {"available": True, "version": "0"},
        "loadavg_1m_at_end": 1.0,
        "command": "bench/run.py",
        "settings": {"repeats": 1},
        "cases": [_row()],
    }
    text = report.markdown(results)
    assert "## Warm start (ms)" in text
    assert "| gpt2/b1 | 366 | 186 | 50 | n/a | n/a | n/a | n/a | 285 | 176 | 109 | 120 |" in text


def test_training_rows_and_summary() -> None:
    training = {
        "cases": [
            {
                "case": "train-mlp/b64",
                "backends": {
                    "eager": {"median_s": 0.010, "first_step_s": 0.02},
                    "inductor": {"median_s": 0.008, "first_step_s": 9.5, "speedup_vs_eager": 1.25},
                    "xjit": {"median_s": 0.0075, "first_step_s": 0.4, "speedup_vs_eager": 1.333,
                             "ratio_vs_inductor": 1.0667, "max_loss_rel_diff": 2.5e-7},
                },
            },
            {"case": "train-gpt/b8", "backends": {"eager": {"median_s": 0.2, "first_step_s": 0.3},
                                                  "xjit": {"error": "RuntimeError: boom"}}},
        ]
    }
    mlp, gpt = report.training_rows(training)
    assert mlp == ["train-mlp/b64", "10", "8", "7.5", "1.25", "1.33", "1.07", "0.02", "9.5", "0.4",
                   "2.5e-07"]
    assert gpt[1:4] == ["200", "n/a", "n/a"]  # a failed backend: no numbers invented
    summary = report.training_summary(training)
    assert "train-mlp/b64 xjit 1.33x eager, 1.07x inductor" in summary and "xjit: RuntimeError: boom" in summary
    assert report.training_lines({}) == ["Not run (`--training`)."]
