"""``xjit.explain(fn)(*args, **kwargs)``: run ``fn`` under ``xjit.jit`` from a clean cache and
report what the frontend did: graphs with their op counts, graph breaks with reason and
file:line, guards, recompilations, cache hits, capture and compile times."""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from xjit import _frontend

__all__ = ["ExplainReport", "GraphBreakInfo", "GraphInfo", "RecompileInfo", "explain"]


def _frame_of(qualname: str) -> str:
    """The user's function of a (possibly generated) frame: resume functions of graph breaks are
    named "<qualname>.<resume at line N>" (src/frontend/bytecode_311.cpp)."""
    while qualname.endswith(">") and ".<resume at line " in qualname:
        qualname = qualname[: qualname.rindex(".<resume at line ")]
    return qualname


def _loc(file: str, line: int) -> str:
    return f"{os.path.basename(file)}:{line}" if file else "<unknown>"


@dataclass
class GraphInfo:
    """One compiled graph: the frame it replaces, its ops and the guards it runs under."""

    function: str
    file: str
    line: int
    op_count: int
    ops: dict[str, int]
    guards: list[str]
    inputs: list[str]
    capture_ms: float
    compile_ms: float
    backend: str
    runs_in_python: bool = False
    note: str = ""
    ir: str = ""

    @property
    def where(self) -> str:
        return _loc(self.file, self.line)


@dataclass
class GraphBreakInfo:
    """A graph break, and why: either the frame runs in Python, or (``resumed``) the graph
    before the break is compiled and a generated resume function continues after it."""

    function: str  # the frame that broke
    file: str  # where the analyzer stopped (the user's line)
    line: int
    reason: str
    internal: bool = False
    error_id: str = ""
    resumed: bool = False

    @property
    def where(self) -> str:
        return _loc(self.file, self.line)


@dataclass
class RecompileInfo:
    function: str
    file: str
    line: int
    guard: str  # the guard that failed

    @property
    def where(self) -> str:
        return _loc(self.file, self.line)


@dataclass
class ExplainReport:
    graphs: list[GraphInfo] = field(default_factory=list)
    graph_breaks: list[GraphBreakInfo] = field(default_factory=list)
    recompiles: list[RecompileInfo] = field(default_factory=list)
    cache_hits: int = 0
    cache_misses: int = 0
    output: Any = None  # what fn returned

    @property
    def graph_count(self) -> int:
        return len(self.graphs)

    @property
    def graph_break_count(self) -> int:
        return len(self.graph_breaks)

    @property
    def graphs_per_frame(self) -> dict[str, int]:
        """Graphs per user function: a frame's resume functions ("f.<resume at line 12>")
        count for the frame ("f")."""
        counts: dict[str, int] = {}
        for g in self.graphs:
            name = _frame_of(g.function)
            counts[name] = counts.get(name, 0) + 1
        return counts

    @property
    def guards(self) -> list[str]:
        return [g for graph in self.graphs for g in graph.guards]

    @property
    def op_count(self) -> int:
        return sum(g.op_count for g in self.graphs)

    @property
    def capture_ms(self) -> float:
        return sum(g.capture_ms for g in self.graphs)

    @property
    def compile_ms(self) -> float:
        return sum(g.compile_ms for g in self.graphs)

    def __str__(self) -> str:
        lines = [
            f"xjit explain: {self.graph_count} graph(s), {self.graph_break_count} graph "
            f"break(s), {len(self.recompiles)} recompile(s), {self.cache_hits} cache hit(s); "
            f"capture {self.capture_ms:.1f} ms, compile {self.compile_ms:.1f} ms"
        ]
        for i, g in enumerate(self.graphs):
            ops = ", ".join(
                f"{name} x{n}" for name, n in sorted(g.ops.items(), key=lambda x: -x[1])
            )
            lines.append(
                f"  graph {i}: {g.function} at {g.where}: {g.op_count} op(s) ({ops or 'none'}); "
                f"{len(g.inputs)} input(s); backend {g.backend}; capture {g.capture_ms:.1f} ms, "
                f"compile {g.compile_ms:.1f} ms"
            )
            if g.runs_in_python:
                lines.append(f"    runs in Python: {g.note}")
            elif g.note:  # a compiled training step: its forward and backward graphs
                lines.append(f"    {g.note}")
            for guard in g.guards:
                lines.append(f"    guard: {guard}")
        for b in self.graph_breaks:
            kind = f"internal error {b.error_id}" if b.internal else "graph break"
            then = "; resumed after it" if b.resumed else "; the frame runs in Python"
            lines.append(f"  {kind} in {b.function} at {b.where}: {b.reason}{then}")
        if any(n > 1 for n in self.graphs_per_frame.values()):
            per = ", ".join(f"{f} {n}" for f, n in self.graphs_per_frame.items())
            lines.append(f"  graphs per frame: {per}")
        for r in self.recompiles:
            lines.append(f"  recompile of {r.function} at {r.where}: guard failed: {r.guard}")
        return "\n".join(lines)

    __repr__ = __str__

    @classmethod
    def from_events(cls, events: dict[str, Any], output: Any = None) -> ExplainReport:
        graphs = [
            GraphInfo(
                function=g["function"],
                file=g["file"],
                line=g["line"],
                op_count=g["op_count"],
                ops=dict(g["ops"]),
                guards=list(g["guards"]),
                inputs=list(g["inputs"]),
                capture_ms=g["capture_ms"],
                compile_ms=g["compile_ms"],
                backend=g["backend"],
                runs_in_python=g["runs_in_python"],
                note=g["note"],
                ir=g["ir"],
            )
            for g in events["graphs"]
        ]
        breaks = [
            GraphBreakInfo(
                function=b["frame"]["function"],
                file=b["file"],
                line=b["line"],
                reason=b["reason"],
                internal=b["internal"],
                error_id=b["error_id"],
                resumed=b.get("resumed", False),
            )
            for b in events["breaks"]
        ]
        recompiles = [
            RecompileInfo(function=r["function"], file=r["file"], line=r["line"], guard=r["guard"])
            for r in events["recompiles"]
        ]
        c = events["counters"]
        return cls(graphs, breaks, recompiles, c["cache_hits"], c["cache_misses"], output)


def explain(fn: Any, **jit_kwargs: Any) -> Callable[..., ExplainReport]:
    """``explain(fn)(*args, **kwargs)`` runs ``fn`` once under ``xjit.jit(fn, **jit_kwargs)``
    after forgetting every compiled entry, and returns an ExplainReport (``str()`` of it is
    readable). Repeated calls of the returned function keep accumulating into fresh reports of
    each call; pass ``fn`` already wrapped by xjit.jit to reuse its options."""
    from xjit.jit import jit

    compiled = fn if getattr(fn, "_xjit_opts", None) is not None else jit(fn, **jit_kwargs)

    def run(*args: Any, **kwargs: Any) -> ExplainReport:
        _frontend.reset()
        _frontend.set_recording(True)
        try:
            out = compiled(*args, **kwargs)
        finally:
            _frontend.set_recording(False)
        return ExplainReport.from_events(_frontend.events(), out)

    return run
