"""How the native code is loaded: both extensions share one copy of the compiler
(libxjit_native.so), whose LLVM engine (libxjit_llvm.so, LLVM linked statically) is loaded only
to compile or link, so a process maps neither Debian's 120 MB libLLVM.so nor a second backend,
nor LLVM at all after import (docs/decisions.md, docs/perf.md "Where the memory goes")."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import torch

import xjit
import xjit.ir as ir

MAPS_SCRIPT = textwrap.dedent("""
    import torch
    import xjit._xjit, xjit._frontend
    paths = {line.split()[-1] for line in open('/proc/self/maps') if '/' in line}
    names = sorted(os.path.basename(p) for p in paths)
    print(' '.join(names))
    """)


def _mapped_files() -> list[str]:
    path = [str(Path(xjit.__file__).parent.parent), os.environ.get("PYTHONPATH", "")]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in path if p))
    proc = subprocess.run(
        [sys.executable, "-c", "import os\n" + MAPS_SCRIPT],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.split()


def test_extensions_share_one_native_library_without_libllvm() -> None:
    names = _mapped_files()
    assert names.count("libxjit_native.so") == 1, names
    assert not [n for n in names if n.startswith("libLLVM")], names
    assert "libxjit_llvm.so" not in names, names  # loaded by the first compile, not by import


def test_one_backend_counts_kernels_of_both_extensions() -> None:
    # xjit.jit compiles through _frontend, xjit.ir.compile through _xjit: with one backend the
    # two modules report the same counters, and a compile through either moves them.
    from xjit import _frontend, _xjit

    def kernels(stats: dict[str, float]) -> float:
        # Compiled by LLVM, or linked from the persistent cache of an earlier run.
        return stats["llvm_compilations"] + stats["cache_links"]

    def kernels_of_both() -> tuple[float, float]:
        return kernels(dict(_xjit.backend_stats())), kernels(dict(_frontend.backend_stats()))

    before = kernels_of_both()
    assert before[0] == before[1]

    # A shape and constant of its own, so that no earlier test's kernel is in the process.
    @xjit.jit(fullgraph=True)
    def f(x: torch.Tensor) -> torch.Tensor:
        return torch.tanh(x * 1.8125 + 0.4375)

    x = torch.randn(37, 29)
    with torch.no_grad():
        out = f(x)
    torch.testing.assert_close(out, torch.tanh(x * 1.8125 + 0.4375))
    after = kernels_of_both()
    assert after[0] == after[1]
    assert after[0] > before[0]
    assert kernels(ir.backend_stats()) == after[0]


def test_profile_covers_graphs_of_xjit_jit() -> None:
    ir.profile(1)
    try:

        @xjit.jit(fullgraph=True)
        def g(x: torch.Tensor) -> torch.Tensor:
            return torch.relu(x @ x.T + 0.8125)

        x = torch.randn(11, 13)
        with torch.no_grad():
            out = g(x)
            g(x)
        torch.testing.assert_close(out, torch.relu(x @ x.T + 0.8125))
        assert ir.profile_report() != ""
    finally:
        ir.profile(0)
