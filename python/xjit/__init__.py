"""xjit: an AI compiler for PyTorch programs.

Importing the package is cheap: the C++ extensions (and with them `xjit.ir`, `xjit.jit`) load on
first use, and torch is never imported by xjit unless a torch tensor or module is passed in.
"""

from __future__ import annotations

import importlib
import sys
import types
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from xjit import ir as ir
    from xjit.explain import ExplainReport as ExplainReport
    from xjit.explain import explain as explain
    from xjit.jit import XjitCompileError as XjitCompileError
    from xjit.jit import XjitWarning as XjitWarning
    from xjit.jit import config as config
    from xjit.jit import jit as jit

__all__ = [
    "ExplainReport",
    "XjitCompileError",
    "XjitWarning",
    "__version__",
    "config",
    "explain",
    "ir",
    "jit",
]

# Lazily imported names -> the module that defines them.
_LAZY = {
    "jit": "xjit.jit",
    "config": "xjit.jit",
    "XjitWarning": "xjit.jit",
    "XjitCompileError": "xjit.jit",
    "explain": "xjit.explain",
    "ExplainReport": "xjit.explain",
}


def __getattr__(name: str) -> Any:
    # The version lives in CMakeLists.txt (project VERSION) and is compiled into the extension.
    if name == "__version__":
        from xjit._xjit import __version__

        return __version__
    if name == "ir":
        return importlib.import_module("xjit.ir")
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'xjit' has no attribute {name!r}")


class _Package(types.ModuleType):
    """Importing the submodules xjit.jit / xjit.explain would bind their module objects to the
    package attributes `jit` / `explain`, hiding the functions of the same names: those
    bindings are dropped, so `xjit.jit` is always the function (the modules stay importable
    as `from xjit.jit import ...`)."""

    def __setattr__(self, name: str, value: Any) -> None:
        if name in _LAZY and isinstance(value, types.ModuleType):
            return
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Package
