"""``xjit.jit``: compile the frames a function (or an ``nn.Module``'s forward) runs.

The PEP 523 frame hook (``xjit._frontend``) is enabled for the duration of each call, in the
calling thread only. Every Python frame that call evaluates outside the standard library and
installed packages (and the ``forward`` of a library model called from Python) is captured whole
into the graph IR, compiled, cached per code object under guards, and run by the chosen
backend; a frame that cannot be captured runs in normal Python (its callees are still
captured). See docs/frontend.md.
"""

from __future__ import annotations

import contextlib
import functools
import os
import sys
import types
from collections.abc import Callable, Iterator
from typing import Any, TypeVar, overload

from xjit import _frontend

__all__ = ["XjitCompileError", "XjitWarning", "config", "jit"]

XjitWarning = _frontend.XjitWarning
XjitCompileError = _frontend.XjitCompileError

F = TypeVar("F", bound=Callable[..., Any])

BACKENDS = ("xjit", "interp", "eager")


def _env_int(name: str, default: int) -> int:
    value = os.environ.get(name)
    if not value:
        return default
    try:
        return int(value)
    except ValueError:
        raise ValueError(f"{name} must be an integer, got {value!r}") from None


def _skip_prefixes() -> list[str]:
    """Files whose frames are never compiled as roots: the standard library, installed
    packages (site-/dist-packages), torch and xjit itself."""
    # Not sysconfig.get_paths(): its build-variable tables stay in the process (~0.2 MB of
    # RSS, docs/perf.md session 12). The standard library is where `os` is (extension modules
    # in its lib-dynload); installed packages are site's directories and sys.path's.
    prefixes = {os.path.dirname(os.__file__)}
    site = sys.modules.get("site")
    if site is not None and hasattr(site, "getsitepackages"):
        prefixes.update(site.getsitepackages())
    prefixes.update(p for p in sys.path if p.endswith(("site-packages", "dist-packages")))
    prefixes.add(os.path.dirname(os.path.abspath(__file__)))  # xjit
    try:
        import importlib.util

        spec = importlib.util.find_spec("torch")
        if spec is not None and spec.submodule_search_locations:
            prefixes.update(spec.submodule_search_locations)
    except (ImportError, ValueError):
        pass
    # A trailing separator so /usr/lib/python3.11 does not also match /usr/lib/python3.11x.
    return sorted(
        {os.path.join(os.path.realpath(p), "") for p in prefixes if p}
        | {os.path.join(p, "") for p in prefixes if p}
    )


class Config:
    """Process-wide settings. Environment variables give the defaults:

    - ``recompile_limit`` (``XJIT_RECOMPILE_LIMIT``, default 8): recompilations of one frame
      before it compiles no more (its entries still serve the calls they match; the others run
      in Python), with one warning naming the guard that kept failing.
    - ``log`` (``XJIT_LOG``): comma list of graph_breaks, guards, recompiles, graphs, bytecode,
      dynamic (shape specializations) (or all), written to stderr.
    - ``strict`` (``XJIT_STRICT=1``): every graph break or fallback raises XjitCompileError.
    - ``dump_dir`` (``--dump``): each graph's IR before and after the pass pipeline.
    """

    _fields = ("recompile_limit", "log", "strict", "dump_dir")

    def __init__(self) -> None:
        object.__setattr__(self, "_values", {})
        self.recompile_limit = _env_int("XJIT_RECOMPILE_LIMIT", 8)
        self.log = os.environ.get("XJIT_LOG", "")
        self.strict = os.environ.get("XJIT_STRICT", "") not in ("", "0")
        self.dump_dir = ""
        # Test-only failure injection: "analyze", "compile" or "run" fail as an internal error;
        # "native": compiling to native code fails (the graph runs in the interpreter).
        _frontend.configure(
            inject=os.environ.get("XJIT_TEST_INJECT", ""), skip_prefixes=_skip_prefixes()
        )

    def __setattr__(self, name: str, value: Any) -> None:
        if name not in self._fields:
            raise AttributeError(f"xjit.config has no setting {name!r}")
        if name == "dump_dir" and value:  # as --dump does: the dumps need the folder
            os.makedirs(value, exist_ok=True)
            value = os.path.abspath(value)
        _frontend.configure(**{name: value})
        self._values[name] = value

    def __getattr__(self, name: str) -> Any:
        values = object.__getattribute__(self, "_values")
        if name in values:
            return values[name]
        raise AttributeError(f"xjit.config has no setting {name!r}")

    def __repr__(self) -> str:
        return "xjit.config(" + ", ".join(f"{k}={v!r}" for k, v in self._values.items()) + ")"


config = Config()


def _check_compare(compiled: Any, eager: Any) -> str | None:
    from xjit._backends import compare_outputs

    return compare_outputs(compiled, eager)


_frontend.configure(check_compare=_check_compare)


def _options(
    backend: str,
    device: str,
    fullgraph: bool,
    dynamic: bool | None,
    check: bool = False,
    weight_cache: bool = False,
) -> Any:
    if backend not in BACKENDS:
        raise ValueError(f"backend must be one of {', '.join(BACKENDS)}, not {backend!r}")
    return _frontend.Options(backend, device, fullgraph, dynamic, check, weight_cache)


def _function_code(fn: Any) -> types.CodeType | None:
    fn = getattr(fn, "__func__", fn)  # bound methods
    code = getattr(fn, "__code__", None)
    return code if isinstance(code, types.CodeType) else None


def _is_module(obj: Any) -> bool:
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(obj, torch.nn.Module)


@functools.lru_cache(maxsize=None)
def _jit_module_class() -> type:
    import torch

    class JitModule(torch.nn.Module):
        """Wraps a module so that calling it compiles its forward (and what forward calls).
        Attributes, parameters and submodules are the wrapped module's (``_orig_mod``)."""

        def __init__(self, mod: torch.nn.Module, opts: Any) -> None:
            super().__init__()
            self._orig_mod = mod
            object.__setattr__(self, "_xjit_opts", opts)

        def forward(self, *args: Any, **kwargs: Any) -> Any:
            return _frontend.call(self._xjit_opts, self._orig_mod, args, kwargs)

        def __getattr__(self, name: str) -> Any:
            if name == "_orig_mod":
                return self._modules["_orig_mod"]
            return getattr(self._orig_mod, name)

        def __repr__(self) -> str:
            return f"xjit.jit({self._orig_mod!r}, {self._xjit_opts!r})"

    return JitModule


# The options `python -m xjit` turned program mode on with (None when not under the CLI), so
# `paused()` can turn it back on.
_program_options: Any = None


@contextlib.contextmanager
def paused() -> Iterator[None]:
    """Program mode (``python -m xjit``) off for the body, in every thread: its frames run as
    plain Python, except calls of ``xjit.jit`` functions, which compile as always. Used to time
    an eager baseline inside a program run under the CLI (examples/_compare.py); a no-op
    otherwise."""
    options = _program_options
    if options is None:
        yield
        return
    _frontend.enable_program(None)
    try:
        yield
    finally:
        _frontend.enable_program(options)


@overload
def jit(
    fn: F,
    *,
    backend: str = ...,
    device: str = ...,
    fullgraph: bool = ...,
    dynamic: bool | None = ...,
    weight_cache: bool = ...,
) -> F: ...
@overload
def jit(
    fn: None = None,
    *,
    backend: str = ...,
    device: str = ...,
    fullgraph: bool = ...,
    dynamic: bool | None = ...,
    weight_cache: bool = ...,
) -> Callable[[F], F]: ...


def jit(
    fn: Any = None,
    *,
    backend: str = "xjit",
    device: str = "cpu",
    fullgraph: bool = False,
    dynamic: bool | None = None,
    weight_cache: bool = False,
) -> Any:
    """Compile ``fn`` (a function, method or ``nn.Module``) when it is called.

    ``backend``: "xjit" (optimizing pass pipeline, then the reference interpreter until the
    native backend lands), "interp" (the captured graph in the reference interpreter) or
    "eager" (PyTorch). ``fullgraph=True`` raises XjitCompileError instead of running a frame in
    Python. ``dynamic``: None compiles static shapes first and makes the dims that changed
    symbolic after a size-related recompile; True makes input dims symbolic from the start;
    False never does. ``weight_cache=True`` reorders a module's weights into oneDNN's layout
    once per parameter version instead of at every call: changes through PyTorch (in-place ops,
    ``load_state_dict``, optimizer steps, replacing ``.data``) are seen, writes through
    ``param.data`` or NumPy views are not (PyTorch's version counter misses them), hence
    opt-in. Usable as ``@xjit.jit`` or ``@xjit.jit(backend=...)``.
    """
    opts = _options(backend, device, fullgraph, dynamic, weight_cache=weight_cache)
    if fn is None:
        return functools.partial(
            jit,
            backend=backend,
            device=device,
            fullgraph=fullgraph,
            dynamic=dynamic,
            weight_cache=weight_cache,
        )
    if _is_module(fn):
        forward = getattr(type(fn), "forward", None)
        code = _function_code(forward)
        if code is not None:
            _frontend.mark_root(code)  # even for torch.nn layers, whose files are filtered
        return _jit_module_class()(fn, opts)
    if not callable(fn):
        raise TypeError(f"xjit.jit expects a function or an nn.Module, got {type(fn).__name__}")
    code = _function_code(fn)
    if code is not None:
        _frontend.mark_root(code)
    call = _frontend.call

    @functools.wraps(fn)
    def compiled(*args: Any, **kwargs: Any) -> Any:
        return call(opts, fn, args, kwargs)

    compiled._xjit_opts = opts  # type: ignore[attr-defined]
    compiled._xjit_fn = fn  # type: ignore[attr-defined]
    return compiled
