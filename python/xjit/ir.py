"""The xjit graph IR from Python: parse and print IR text, build and verify graphs, query the op
registry, and run graphs (or single ops) on numpy arrays / torch CPU tensors with the reference
interpreter, or compile them for the CPU with the runtime (``compile``).

Tensors are exchanged zero-copy through DLPack: inputs are borrowed (kept alive while the run
needs them) and outputs wrap the interpreter's buffers, which are freed when the returned
objects die. Outputs are torch tensors if any input was a torch tensor, else numpy arrays (pass
``framework=`` to choose); bf16 outputs are always torch tensors since numpy has no bfloat16.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Any, Literal, TypedDict

from xjit import _xjit
from xjit._xjit import (
    Graph,
    InferenceError,
    KernelError,
    ParseError,
    Value,
    VerifyError,
    XjitError,
)

__all__ = [
    "Framework",
    "Graph",
    "InferenceError",
    "KernelError",
    "OpInfo",
    "ParseError",
    "Value",
    "VerifyError",
    "XjitError",
    "CompiledGraph",
    "backend_stats",
    "compile",
    "op_info",
    "ops",
    "parse",
    "parse_module",
    "profile",
    "profile_report",
    "run",
    "run_op",
    "verify",
    "verify_or_raise",
]

Framework = Literal["numpy", "torch"]
# A run-time value: torch.Tensor | numpy.ndarray | int | float | bool | str | None | list of
# these, or any other Python object (passed opaquely). Typed as Any so that neither numpy nor
# torch must be importable for type checking.
RtInput = Any


class OperandInfo(TypedDict):
    name: str
    variadic: bool
    optional: bool


class AttrInfo(TypedDict):
    name: str
    kind: str  # "int", "float", "bool", "str", "ints", "floats", "dtype", "type", "tensor", "any"
    default: Any
    required: bool


class OpInfo(TypedDict):
    name: str
    summary: str
    operands: list[OperandInfo]
    attrs: list[AttrInfo]
    traits: list[str]
    num_regions: int
    has_kernel: bool


def parse(text: str, filename: str = "<input>") -> Graph:
    """Parses one graph; malformed text raises ParseError (with .line and .col)."""
    return _xjit.parse(text, filename)


def parse_module(text: str, filename: str = "<input>") -> list[Graph]:
    """Parses every graph of a module text."""
    return _xjit.parse_module(text, filename)


def verify(graph: Graph) -> list[str]:
    """All problems of the graph (empty when valid); each names the op and its location."""
    return graph.verify()


def verify_or_raise(graph: Graph) -> None:
    """Raises VerifyError for the first problem."""
    graph.verify_or_raise()


def ops() -> list[str]:
    """Names of every registered op, sorted."""
    return _xjit.ops()


def op_info(name: str) -> OpInfo:
    """The registry row of an op: summary, operands, attributes, traits."""
    info: OpInfo = _xjit.op_info(name)
    return info


def _is_torch_tensor(x: object) -> bool:
    # torch is never imported here: if it is not loaded, x cannot be a torch tensor.
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(x, torch.Tensor)


def _prepare(x: RtInput) -> RtInput:
    """Makes a value exportable: torch tensors lose autograd and lazy neg/conj bits (DLPack
    refuses those; the data is shared), numpy scalars become Python scalars."""
    if _is_torch_tensor(x):
        t = x.detach()
        if t.is_conj():
            t = t.resolve_conj()
        if t.is_neg():
            t = t.resolve_neg()
        return t
    if isinstance(x, (list, tuple)):
        return [_prepare(e) for e in x]
    np = sys.modules.get("numpy")
    if np is not None and isinstance(x, np.generic):
        return x.item()
    return x


def _any_torch(values: Sequence[RtInput]) -> bool:
    return any(
        _is_torch_tensor(v) or (isinstance(v, (list, tuple)) and _any_torch(v)) for v in values
    )


def _framework(values: Sequence[RtInput], framework: Framework | None) -> Framework:
    if framework is not None:
        return framework
    return "torch" if _any_torch(values) else "numpy"


def run(
    graph: Graph, inputs: Sequence[RtInput], *, framework: Framework | None = None
) -> list[Any]:
    """Runs the graph on the inputs with the reference interpreter (GIL released)."""
    prepared = [_prepare(x) for x in inputs]
    return _xjit.run(graph, prepared, _framework(inputs, framework))


def run_op(
    op: str,
    operands: Sequence[RtInput],
    attrs: dict[str, Any] | None = None,
    *,
    framework: Framework | None = None,
) -> list[Any]:
    """Runs one op: builds a graph whose inputs are the operands (tensors get static shapes,
    Python numbers scalar types, None a `none` constant), infers result types, verifies and
    interprets it.

    Attribute values: bool, int, float, str, lists of ints / floats, torch.dtype, or a dtype name
    ("f32") for dtype attributes. Errors raise InferenceError (invalid operands/attributes),
    KernelError (the kernel refused its inputs) or XjitError."""
    prepared = [_prepare(x) for x in operands]
    return _xjit.run_op(op, prepared, attrs or {}, _framework(operands, framework))


class CompiledGraph:
    """A graph compiled for the CPU by the runtime (``compile``): fusion regions as native code,
    other ops through their reference kernels, If/Loop run natively, a static memory plan.
    Calling it runs the graph (GIL released; several threads may call it at once)."""

    def __init__(self, compiled: _xjit.CompiledGraph) -> None:
        self._compiled = compiled

    def __call__(self, *inputs: RtInput, framework: Framework | None = None) -> list[Any]:
        return self.run(inputs, framework=framework)

    def run(self, inputs: Sequence[RtInput], *, framework: Framework | None = None) -> list[Any]:
        """Runs on the inputs; outputs as in ``run`` (torch if any input is a torch tensor)."""
        prepared = [_prepare(x) for x in inputs]
        return self._compiled.run(prepared, _framework(inputs, framework))

    @property
    def graph(self) -> Graph:
        """A copy of the graph as compiled (after fuse and plan-memory, with mem.* annotations)."""
        return self._compiled.graph

    @property
    def stats(self) -> dict[str, Any]:
        """How the ops run: target_ops, reference_ops, external_ops, control_flow_ops,
        inlined_fusions, constants, arena_bytes, planned_results (of which planned_copies:
        reshape-like copies written into the arena), in_place_separated, fuse_skipped, not_compiled (reasons); docs/runtime.md."""
        stats: dict[str, Any] = self._compiled.stats
        return stats

    def dump_files(self) -> list[tuple[str, str]]:
        """(file name, text) of each native kernel: loop IR, LLVM IR, assembly (the latter two
        only when compiled with ``keep_text=True``)."""
        return [tuple(f) for f in self._compiled.dump_files()]  # type: ignore[misc]


def compile(  # noqa: A001 (xjit.ir.compile mirrors xjit.ir.run)
    graph: Graph,
    *,
    pipeline: str | None = None,
    use_target: bool = True,
    keep_text: bool = False,
) -> CompiledGraph:
    """Compiles a graph for the CPU: runs ``pipeline`` (the code-generation passes; default: the
    runtime's, docs/runtime.md) on a copy,
    then gives each op native code when the CPU target takes it, else its reference kernel.
    ``use_target=False`` runs reference kernels only; ``keep_text`` keeps LLVM IR and assembly
    for ``dump_files``."""
    return CompiledGraph(
        _xjit.compile(graph, pipeline=pipeline, use_target=use_target, keep_text=keep_text)
        if pipeline is not None
        else _xjit.compile(graph, use_target=use_target, keep_text=keep_text)
    )


def backend_stats() -> dict[str, float]:
    """Counters of the native backend in this process: ``llvm_compilations`` (kernels compiled
    by LLVM, i.e. not found in the persistent compile cache) and their wall time ``llvm_ms``,
    ``cache_links`` (kernels loaded from the cache) and their ``cache_link_ms``,
    ``general_versions`` (kernels' general strided versions compiled or linked because a call
    had non-contiguous inputs; docs/backend.md), ``batch_links`` and ``batched_objects``
    (compiled graphs whose kernels were linked together in one go, and how many kernels they
    held), ``kernels_shared`` (kernels found in the cache
    whose identical code was already linked in this process and still in use: that code is
    shared, not linked again; of those, ``kernel_executables_shared`` were identical whole
    loop-kernel ops sharing one executable, e.g. an unrolled loop's body at every step),
    ``library_kernels_shared`` (oneDNN calls identical to one already
    compiled and still in use, which share its executable and plans), ``library_plans``
    (oneDNN primitives made for one call shape), ``library_generic_plans`` (matmul primitives
    with run-time sizes, made once a call's sizes vary and used for every later shape) and
    ``library_gemm_plans`` (those of either kind on oneDNN's ``gemm:jit``), ``gemm_warm_ups``
    (1 once a frame's mark from an earlier process started making gemm's kernels ahead on a
    thread of their own, docs/runtime.md "Warm start"), ``gemm_warm_ups_at_plans`` (1 once a
    product planned on ``gemm:jit`` started that thread, no mark having done it),
    ``gemm_kernels_pending`` (1 while that thread is still making them),
    ``host_buffers_ahead`` (large buffers a frame's first call needed in an earlier process,
    faulted in on a thread during this one's capture) and ``host_buffers_ahead_used`` (those a
    run took), ``host_buffer_fresh_mb`` and ``host_buffer_reused_mb`` (what buffers of 1 MiB or
    more were made of: new pages, or pages of released buffers) and ``host_buffer_remaps``
    (mremap calls that moved released pages into a buffer of another size),
    ``host_buffer_mappings`` (mappings such buffers, live or kept, span now),
    ``host_buffer_lends`` (times a compiled graph's arena of 4 MiB or more lent its pages to
    other buffers after a call, docs/runtime.md "Memory plan"), the cache's
    ``cache_hits``, ``cache_misses``, ``cache_writes``, ``cache_invalid`` (damaged entries) and
    ``cache_evictions`` (entries deleted to keep ``XJIT_CACHE_MAX_MB``); for oneDNN conv/matmul
    weights that need a reorder into the primitive's layout, ``weight_packs`` (a module
    parameter reordered into a cached copy: new or changed), ``weight_pack_hits`` (calls that
    reused that copy), ``weight_reorders`` (untagged weights reordered for one call) and
    ``weights_in_place`` (calls of a weight-bound convolution that read its weights as they
    are, through im2col and a matmul, instead of reordering them; docs/backend.md);
    ``memory_releases`` (times the first run after a compile gave the compiler's code pages and
    malloc's free heap back), the RSS that gave back, ``memory_released_mb``, and its
    ``memory_release_ms`` (docs/perf.md, "Session 5: memory"); ``target_machines`` (LLVM
    target machines made for compiles: one per concurrently compiling thread, dropped by each
    release, made again by the next compile); ``llvm_engine_loads``, ``llvm_engine_unloads``
    and ``llvm_engine_load_ms`` (the LLVM engine, libxjit_llvm.so, is loaded by the first
    compile or cache link after a release and unloaded by the release, or ahead of that on a
    thread of its own while a frame with a tensor argument is captured:
    ``llvm_engine_preloads``; docs/backend.md)."""
    # One backend per process (libxjit_native.so, which both extensions load): its counters
    # cover xjit.jit's kernels and those of xjit.ir.compile.
    stats = {name: value for name, value in _xjit.backend_stats()}
    return {k: v if k.endswith("_ms") else int(v) for k, v in stats.items()}


def profile(level: int = 1) -> None:
    """Times the instructions of graphs compiled from now on, as ``XJIT_PROFILE`` does (1: by
    kind, 2: per instruction, 0: off) and zeroes the counters; ``profile_report`` gives the
    table (docs/runtime.md). Unlike ``XJIT_PROFILE``, nothing is printed at exit. Covers graphs
    of ``xjit.ir.compile`` and of ``xjit.jit`` (one runtime per process)."""
    _xjit.set_profile_level(level)
    _xjit.profile_reset()


def profile_report() -> str:
    """The time per instruction kind of compiled graphs since ``profile`` (or since start with
    ``XJIT_PROFILE``), largest first; "" when nothing was timed."""
    return str(_xjit.profile_report())
