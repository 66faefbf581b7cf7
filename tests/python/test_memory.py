"""Memory of compiled graphs: what a call allocates beyond its results.

Peak memory is the resident-set high-water mark (VmHWM), reset by writing 5 to
/proc/self/clear_refs, as bench/ measures it (docs/perf.md, memory section).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch
import xjit.ir as ir

ROWS, DIM = 65536, 256  # a 64 MiB f32 table, like a language model's word embeddings

EMBEDDING = f"""
graph @f(%w: f32[{ROWS},{DIM}], %i: i64[2,3]) -> (f32[2,3,{DIM}]) {{
  %y = embedding(%w, %i) : f32[2,3,{DIM}]
  return(%y)
}}"""


def _status_mb(field: str) -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) / 1024
    raise AssertionError(f"{field} not in /proc/self/status")


def _peak_growth_mb(fn) -> float:
    """How far the resident set's high-water mark rises above the current RSS while fn runs."""
    try:
        Path("/proc/self/clear_refs").write_text("5")
    except OSError:
        pytest.skip("cannot reset the peak RSS here")
    before = _status_mb("VmRSS")
    fn()
    return _status_mb("VmHWM") - before


def test_embedding_does_not_copy_the_table() -> None:
    weight = torch.randn(ROWS, DIM)
    indices = torch.tensor([[0, 5, ROWS - 1], [7, 7, 1234]])
    compiled = ir.compile(ir.parse(EMBEDDING))
    (first,) = compiled(weight, indices)  # compiles and allocates the frame
    results = []
    growth = _peak_growth_mb(lambda: results.append(compiled(weight, indices)))
    (y,) = results[0]
    torch.testing.assert_close(y, torch.nn.functional.embedding(indices, weight), rtol=0, atol=0)
    torch.testing.assert_close(first, y, rtol=0, atol=0)
    # A copy of the table would add 64 MiB; rows are read in place.
    assert growth < 16, f"peak RSS rose {growth:.1f} MB during one call"


def test_embedding_of_strided_weights_matches_torch() -> None:
    indices = torch.tensor([[3, 0, 9], [1, 1, 4]])
    g = ir.parse(
        """
graph @f(%w: f32[10,6], %i: i64[2,3]) -> (f32[2,3,6]) {
  %y = embedding(%w, %i) : f32[2,3,6]
  return(%y)
}"""
    )
    base = torch.randn(6, 10)
    cases = {
        "transposed (rows not contiguous)": base.t(),
        "every other row": torch.randn(20, 6)[::2],
        "broadcast rows": torch.randn(1, 6).expand(10, 6),
    }
    for name, weight in cases.items():
        want = torch.nn.functional.embedding(indices, weight)
        (interp,) = ir.run(g, [weight, indices])
        (native,) = ir.compile(g)(weight, indices)
        torch.testing.assert_close(interp, want, rtol=0, atol=0, msg=name)
        torch.testing.assert_close(native, want, rtol=0, atol=0, msg=name)


def _scaled_unary(n: int, op: str) -> ir.Graph:
    """`op(x * s)` on f32[n]: a fresh n gives kernels no earlier test compiled in this process."""
    return ir.parse(f"""
graph @f(%x: f32[{n}], %s: f32[{n}]) -> (f32[{n}]) {{
  %y = mul(%x, %s) : f32[{n}]
  %z = {op}(%y) : f32[{n}]
  return(%z)
}}""")


def _code_kb(library: str) -> tuple[int, int]:
    """(mapped, resident) kB of the executable mappings of the loaded object named `library`."""
    size = rss = 0
    in_text = False
    for line in Path("/proc/self/smaps").read_text().splitlines():
        fields = line.split()
        if fields and "-" in fields[0] and len(fields) >= 5 and ":" not in fields[0]:
            in_text = fields[1] == "r-xp" and Path(fields[-1]).name.startswith(library)
        elif in_text and fields[0] in ("Size:", "Rss:"):
            if fields[0] == "Size:":
                size += int(fields[1])
            else:
                rss += int(fields[1])
    return size, rss


def _compiler_code_resident_mb() -> float:
    """Resident MB of the executable mappings of libxjit_native.so and of the LLVM engine."""
    return (_code_kb("libxjit_native.so")[1] + _code_kb("libxjit_llvm.so")[1]) / 1024


def _engine_mapped() -> bool:
    return any("libxjit_llvm.so" in line for line in Path("/proc/self/maps").read_text().splitlines())


def test_first_call_gives_the_compilers_code_pages_back() -> None:
    import xjit

    if os.environ.get("XJIT_RELEASE_MEMORY") == "0":
        pytest.skip("XJIT_RELEASE_MEMORY=0")
    if not any("libxjit_native.so" in line for line in Path("/proc/self/maps").read_text().splitlines()):
        pytest.skip("LLVM is not linked into libxjit_native.so in this build")
    n = int(torch.randint(1000, 10**6, ()).item())  # new shapes: new kernels, no cache hit
    # ir.compile does not release (only the frontend's first call does): LLVM's code stays mapped.
    g = _scaled_unary(n, "tanh")
    x, s = torch.randn(n), torch.randn(n)
    (y,) = ir.compile(g)(x, s)
    torch.testing.assert_close(y, torch.tanh(x * s))
    mapped = _compiler_code_resident_mb()
    releases = ir.backend_stats()["memory_releases"]

    def f(x):
        return torch.sigmoid(x * 3) - 0.5

    compiled = xjit.jit(f)
    torch.testing.assert_close(compiled(x), f(x))  # compiles, runs, then releases...
    torch.testing.assert_close(compiled(x), f(x))  # ...or here, if the last release was < 1 s ago
    after = _compiler_code_resident_mb()
    done = ir.backend_stats()["memory_releases"]
    assert done >= releases + 1
    assert after < mapped / 2, f"compiler code resident: {mapped:.1f} MB before, {after:.1f} MB after"
    # Capture runs most of the frontend extension's code; a steady call runs its guards and driver.
    frontend_size, frontend_resident = _code_kb("_frontend.")
    assert frontend_resident < 0.75 * frontend_size, f"_frontend code: {frontend_resident} of {frontend_size} kB"
    torch.testing.assert_close(compiled(x), f(x))  # a steady call: no release
    assert ir.backend_stats()["memory_releases"] == done
    # The dropped pages come back from the page cache when a later compile runs them, and the
    # release freed this thread's LLVM target machine: the compile makes a new one.
    machines = ir.backend_stats()["target_machines"]
    x2 = torch.randn(n + 1)
    g2 = xjit.jit(lambda x: torch.cos(x * 2))
    torch.testing.assert_close(g2(x2), torch.cos(x2 * 2))
    assert ir.backend_stats()["target_machines"] == machines + 1


def test_the_llvm_engine_is_unloaded_after_a_compile_and_loaded_again_by_the_next() -> None:
    import xjit

    if os.environ.get("XJIT_RELEASE_MEMORY") == "0":
        pytest.skip("XJIT_RELEASE_MEMORY=0")
    n = int(torch.randint(1000, 10**6, ()).item())  # new shapes: new kernels, no cache hit
    x = torch.randn(n)

    def f(x):
        return torch.tanh(x * 1.5) + 0.25

    stats = ir.backend_stats()
    compiled = xjit.jit(f)
    torch.testing.assert_close(compiled(x), f(x))  # compiles (loading the engine), releases...
    torch.testing.assert_close(compiled(x), f(x))  # ...or here, if the last release was < 1 s ago
    after = ir.backend_stats()
    assert after["llvm_compilations"] > stats["llvm_compilations"]
    assert after["llvm_engine_unloads"] > stats["llvm_engine_unloads"]
    # Nothing of the engine stays mapped (a library that cannot be unloaded would), and the
    # kernel's code, placed by the engine in pages of xjit's, runs without it.
    assert not _engine_mapped(), "libxjit_llvm.so is still mapped after the release"
    torch.testing.assert_close(compiled(x), f(x))
    # A new compile loads it again.
    g = xjit.jit(lambda x: torch.sigmoid(x - 0.5) * 2)
    x2 = torch.randn(n + 3)
    torch.testing.assert_close(g(x2), torch.sigmoid(x2 - 0.5) * 2)
    assert ir.backend_stats()["llvm_engine_loads"] > after["llvm_engine_loads"]
    torch.testing.assert_close(g(x2), torch.sigmoid(x2 - 0.5) * 2)
    assert not _engine_mapped()
    torch.testing.assert_close(compiled(x), f(x))


def test_identical_kernels_share_their_code() -> None:
    # Also with XJIT_NO_CACHE=1: sharing is keyed like the cache but needs no cache directory.
    n = int(torch.randint(1000, 10**6, ()).item())  # kernels no earlier test has in the process
    g = _scaled_unary(n, "sigmoid")
    x, s = torch.randn(n), torch.randn(n)
    before = ir.backend_stats()
    first = ir.compile(g)
    mid = ir.backend_stats()
    assert mid["llvm_compilations"] + mid["cache_links"] > before["llvm_compilations"] + before["cache_links"]
    second = ir.compile(g)  # while `first` holds its kernels: shared, neither compiled nor linked
    after = ir.backend_stats()
    assert after["kernels_shared"] > mid["kernels_shared"]
    assert after["llvm_compilations"] == mid["llvm_compilations"]
    assert after["cache_links"] == mid["cache_links"]
    want = torch.sigmoid(x * s)
    torch.testing.assert_close(second(x, s)[0], want)
    del first  # the shared code lives on with `second`
    torch.testing.assert_close(second(x, s)[0], want)
    del second
    third = ir.compile(g)  # nothing holds the code any more: linked from the cache (or compiled) again
    end = ir.backend_stats()
    assert end["kernels_shared"] == after["kernels_shared"]
    assert end["cache_links"] + end["llvm_compilations"] > after["cache_links"] + after["llvm_compilations"]
    torch.testing.assert_close(third(x, s)[0], want)


_ONEDNN_ON_DEMAND = """
from pathlib import Path
import torch, xjit, xjit.ir

def mapped(name):
    return int(any(name in line for line in Path("/proc/self/maps").read_text().splitlines()))

f = xjit.jit(lambda x: torch.relu(x * 2) + 1)
x = torch.randn(37, 5)
torch.testing.assert_close(f(x), torch.relu(x * 2) + 1)
print(mapped("libxjit_native.so"), mapped("libdnnl.so"), mapped("libxjit_dnnl.so"))
g = xjit.jit(lambda a, b: torch.mm(a, b) + 1)
a, b = torch.randn(33, 17), torch.randn(17, 9)
torch.testing.assert_close(g(a, b), torch.mm(a, b) + 1)
print(mapped("libdnnl.so"), mapped("libxjit_dnnl.so"), int(xjit.ir.backend_stats()["library_plans"] > 0))
"""


def test_onednn_is_loaded_by_the_first_library_call() -> None:
    # A fresh process: another test may have compiled a library call in this one.
    import subprocess
    import sys

    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    r = subprocess.run([sys.executable, "-c", _ONEDNN_ON_DEMAND], capture_output=True, text=True, env=env)
    assert r.returncode == 0, r.stderr
    before, after = r.stdout.split("\n")[:2]
    if before.split()[0] == "0":
        pytest.skip("no libxjit_native.so in this build (the oneDNN path is linked in)")
    assert before.split()[1:] == ["0", "0"], "oneDNN is mapped before any library call"
    assert after.split() == ["1", "1", "1"], "the matmul did not load and run the oneDNN path"
