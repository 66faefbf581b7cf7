"""The analyzer corpus: small functions and modules with example inputs and the expected number
of compiled graphs and graph breaks. Each corpus module defines CASES (a list of Case)."""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from typing import Any, Callable

MODULES = ["core", "tensors", "nn_modules", "fallbacks", "breaks", "mutation", "guards",
           "inlining", "programs", "objects"]


@dataclass
class Case:
    name: str
    fn: Callable[..., Any]
    inputs: Callable[[], tuple]  # fresh example inputs (called under torch.manual_seed(0))
    graphs: int = 1  # graphs compiled by the first call
    breaks: int = 0  # graph breaks recorded by the first call
    reason: str = ""  # a substring of the (first) break reason
    kwargs: Callable[[], dict] = field(default_factory=lambda: dict)
    rtol: float = 1e-4
    atol: float = 1e-5
    ops: tuple[str, ...] = ()  # IR ops the (first) graph must contain
    fallback: bool = False  # the graph holds an external_call (PyTorch fallback)
    second: Callable[[], tuple] | None = None  # inputs for another call after the first two
    recompile: bool = True  # ... which compiles a new entry (False: reuses the first)
    dynamic: bool | None = None
    raises: type | None = None  # the call raises this (eagerly and compiled)
    grad: bool = False  # run with grad mode on (default: under torch.no_grad())


def all_cases() -> list[Case]:
    cases: list[Case] = []
    for m in MODULES:
        cases.extend(importlib.import_module(f"corpus.{m}").CASES)
    names = [c.name for c in cases]
    dup = {n for n in names if names.count(n) > 1}
    assert not dup, f"duplicate corpus case names: {sorted(dup)}"
    return cases
