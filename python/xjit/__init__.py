"""xjit: an AI compiler for PyTorch programs.

Importing the package is cheap: the C++ extension (and with it `xjit.ir`) loads on first use,
and torch is never imported by xjit unless a torch tensor is passed in.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from xjit import ir as ir

__all__ = ["__version__", "ir"]


def __getattr__(name: str) -> Any:
    # The version lives in CMakeLists.txt (project VERSION) and is compiled into the extension.
    if name == "__version__":
        from xjit._xjit import __version__

        return __version__
    if name == "ir":
        return importlib.import_module("xjit.ir")
    raise AttributeError(f"module 'xjit' has no attribute {name!r}")
