"""xjit.ir.compile: graphs compiled by the runtime for the CPU, run on numpy arrays and torch
tensors, against the reference interpreter (xjit.ir.run) and PyTorch."""

from __future__ import annotations

import threading

import numpy as np
import pytest

ir = pytest.importorskip("xjit.ir")

TEXT = """
graph @f(%x: f32[4,8], %y: f32[4,8], %w: f32[8,3]) -> (f32[4,3], f32[4,8]) {
  %a = add(%x, %y) : f32[4,8]
  %b = relu(%a) : f32[4,8]
  %c = cumsum(%b) {dim = 1} : f32[4,8]
  %d = exp(%c) : f32[4,8]
  %s = sum(%d) {dims = [1], keepdim = true} : f32[4,1]
  %p = div(%d, %s) : f32[4,8]
  %m = matmul(%p, %w) : f32[4,3]
  return(%m, %a)
}"""


def inputs(rng: np.random.Generator) -> list[np.ndarray]:
    return [
        rng.standard_normal((4, 8), dtype=np.float32),
        rng.standard_normal((4, 8), dtype=np.float32),
        rng.standard_normal((8, 3), dtype=np.float32),
    ]


def test_compiled_matches_the_interpreter_on_numpy() -> None:
    g = ir.parse(TEXT)
    cg = ir.compile(g)
    assert cg.stats["target_ops"] >= 1
    rng = np.random.default_rng(0)
    for _ in range(3):  # later calls reuse the arena
        xs = inputs(rng)
        got = cg(*xs)
        want = ir.run(g, xs)
        assert all(isinstance(o, np.ndarray) for o in got)
        for a, b in zip(got, want):
            np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


def test_compiled_on_torch_tensors_matches_torch() -> None:
    torch = pytest.importorskip("torch")
    cg = ir.compile(ir.parse(TEXT))
    x, y, w = torch.randn(4, 8), torch.randn(4, 8), torch.randn(8, 3)
    m, a = cg(x, y, w)
    assert isinstance(m, torch.Tensor)
    d = torch.exp(torch.cumsum(torch.relu(x + y), dim=1))
    torch.testing.assert_close(a, x + y)
    torch.testing.assert_close(m, (d / d.sum(dim=1, keepdim=True)) @ w, rtol=1e-5, atol=1e-6)


def test_outputs_survive_later_calls() -> None:
    cg = ir.compile(ir.parse(TEXT))
    rng = np.random.default_rng(1)
    first_in = inputs(rng)
    first = [o.copy() for o in cg(*first_in)]
    kept = cg(*first_in)
    for _ in range(3):
        cg(*inputs(rng))
    for a, b in zip(kept, first):
        np.testing.assert_array_equal(a, b)


def test_several_threads_share_one_compiled_graph() -> None:
    g = ir.parse(TEXT)
    cg = ir.compile(g)
    errors: list[str] = []

    def worker(seed: int) -> None:
        rng = np.random.default_rng(seed)
        try:
            for _ in range(20):
                xs = inputs(rng)
                for a, b in zip(cg(*xs), ir.run(g, xs)):
                    np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
        except Exception as e:  # noqa: BLE001 (reported below)
            errors.append(repr(e))

    threads = [threading.Thread(target=worker, args=(s,)) for s in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []


def test_control_flow_runs_natively() -> None:
    g = ir.parse("""
graph @f(%n: int, %x: f32[3]) -> (f32[3]) {
  %t = constant() {value = true} : bool
  %l = loop(%n, %t, %x) : f32[3] {
  ^(%i: int, %a: f32[3]):
    %e = tanh(%a) : f32[3]
    %s = add(%e, %a) : f32[3]
    yield(%t, %s)
  }
  return(%l)
}""")
    cg = ir.compile(g)
    assert cg.stats["control_flow_ops"] == 1
    x = np.linspace(-1, 1, 3, dtype=np.float32)
    for n in (0, 1, 4):
        np.testing.assert_allclose(cg(n, x)[0], ir.run(g, [n, x])[0], rtol=1e-5, atol=1e-6)


def test_reference_kernels_only_are_exact() -> None:
    g = ir.parse(TEXT)
    cg = ir.compile(g, use_target=False)
    assert cg.stats["target_ops"] == 0
    xs = inputs(np.random.default_rng(2))
    for a, b in zip(cg(*xs), ir.run(g, xs)):
        np.testing.assert_array_equal(a, b)


def test_errors_name_the_input() -> None:
    cg = ir.compile(ir.parse(TEXT))
    with pytest.raises(ir.XjitError, match="input 0"):
        cg(np.zeros((5, 8), np.float32), np.zeros((4, 8), np.float32), np.zeros((8, 3), np.float32))


def test_dump_files_hold_llvm_ir_and_assembly() -> None:
    cg = ir.compile(ir.parse(TEXT), keep_text=True)
    names = [n for n, _ in cg.dump_files()]
    assert any(n.endswith(".ll") for n in names) and any(n.endswith(".s") for n in names), names
    assert "mem.arena" in str(cg.graph)
