"""Python-side pieces of the execution paths: the output comparison behind ``--check``.

The graph runs on copies of its tensor inputs, the frame then runs in Python (its result is
what the program gets) and ``compare_outputs`` reports the first output that differs.
"""

from __future__ import annotations

from typing import Any

# Per-dtype tolerances: the reference interpreter computes in double and rounds to the result
# dtype, PyTorch's CPU kernels accumulate in the dtype (or float for f16/bf16).
_TOLERANCES = {
    "torch.float64": (1e-7, 1e-7),
    "torch.float32": (1.3e-5, 1e-5),
    "torch.float16": (1e-3, 1e-3),
    "torch.bfloat16": (1.6e-2, 1e-2),
}


def _first_difference(a: Any, b: Any, path: str) -> str | None:
    import torch

    if isinstance(b, torch.Tensor):
        if not isinstance(a, torch.Tensor):
            return f"{path}: expected a tensor, the graph gave {type(a).__name__}"
        if a.dtype != b.dtype or a.shape != b.shape:
            return (
                f"{path}: expected {b.dtype} {tuple(b.shape)}, the graph gave "
                f"{a.dtype} {tuple(a.shape)}"
            )
        if b.dtype.is_floating_point:
            rtol, atol = _TOLERANCES.get(str(b.dtype), (1e-5, 1e-5))
            if not torch.allclose(a, b, rtol=rtol, atol=atol, equal_nan=True):
                diff = (a.double() - b.double()).abs()
                diff = torch.nan_to_num(diff, nan=float("inf"))
                return (
                    f"{path}: max abs difference {diff.max().item():.3g} (rtol {rtol}, atol {atol})"
                )
            return None
        if not torch.equal(a, b):
            return f"{path}: values differ"
        return None
    if isinstance(b, (tuple, list)):
        if not isinstance(a, (tuple, list)) or len(a) != len(b):
            return f"{path}: expected a {type(b).__name__} of {len(b)}, the graph gave {a!r:.60}"
        for i, (x, y) in enumerate(zip(a, b)):
            d = _first_difference(x, y, f"{path}[{i}]")
            if d:
                return d
        return None
    if isinstance(b, dict):
        if not isinstance(a, dict) or list(a) != list(b):
            return f"{path}: dict keys differ"
        for k in b:
            d = _first_difference(a[k], b[k], f"{path}[{k!r}]")
            if d:
                return d
        return None
    if isinstance(b, float) and isinstance(a, float):
        return None if abs(a - b) <= 1e-6 * max(1.0, abs(b)) else f"{path}: {a} != {b}"
    if a is b:
        return None
    # Objects the frame made are rebuilt after the graph (docs/frontend.md): a function, a
    # functools.partial or a plain instance compares by what it holds, not by identity (each
    # once: an object reached again, e.g. through a cycle, is taken as compared).
    parts = _made_object_parts(b)
    if parts is not None and id(b) not in _comparing:
        if type(a) is not type(b):
            return f"{path}: expected a {type(b).__name__}, the graph gave {type(a).__name__}"
        _comparing.add(id(b))
        try:
            got = _made_object_parts(a) or {}
            for name, want in parts.items():
                d = _first_difference(got.get(name), want, f"{path}.{name}")
                if d:
                    return d
        finally:
            _comparing.discard(id(b))
        return None
    if parts is not None:
        return None
    try:
        same = bool(a == b)
    except Exception:  # noqa: BLE001 - objects without a usable ==
        same = False
    return None if same else f"{path}: {a!r:.60} != {b!r:.60}"


_comparing: set[int] = set()  # ids of the eager objects being compared (cycles)


def _made_object_parts(o: Any) -> dict[str, Any] | None:
    """What a function, functools.partial or plain instance holds (None for other objects)."""
    import functools
    import types

    if isinstance(o, types.FunctionType):
        cells = tuple(c.cell_contents for c in o.__closure__ or ())
        return {
            "__code__": o.__code__,
            "__defaults__": o.__defaults__,
            "__kwdefaults__": o.__kwdefaults__,
            "__closure__": cells,
        }
    if type(o) is functools.partial:
        return {"func": o.func, "args": o.args, "keywords": o.keywords}
    if (
        getattr(type(o), "__eq__") is getattr(object, "__eq__")  # (no __eq__ of its own)
        and hasattr(o, "__dict__")
        and not callable(o)
        and type(o).__module__ != "builtins"
    ):
        return {"__dict__": vars(o)}
    return None


def compare_outputs(compiled: Any, eager: Any) -> str | None:
    """None if the compiled result matches eager's, else where and how they first differ."""
    return _first_difference(compiled, eager, "output")
