"""The CPU target's linear resampling kernels (upsample_linear1d / bilinear2d / trilinear3d and
their _backward; src/ir/ops/resample.cpp) against ATen's ops, on 1 and 2 threads: gradients bit
for bit in f32 and f64 (each input element sums its contributions in output order with ATen's
products and multiply-adds), forwards bit for bit where eager runs its generic kernel (a
channels-first input with output H + W > 128) and within 1e-6 elsewhere (eager's channels-last
kernel sums the four products in another order); results in the input's memory order."""

from __future__ import annotations

from typing import Any

import pytest

torch = pytest.importorskip("torch")
x_ = pytest.importorskip("xjit._xjit")

OPS = {1: "upsample_linear1d", 2: "upsample_bilinear2d", 3: "upsample_trilinear3d"}

# (input shape, output spatial size, align_corners, scales ([] : none)); large enough for the
# target to split the work over 2 threads (a thread per 32K elements).
CASES = [
    ((1, 64, 32, 32), [128, 128], False, []),
    ((1, 64, 32, 32), [128, 128], True, []),
    ((2, 24, 17, 23), [40, 51], False, [2.4, 2.25]),  # odd sizes, non-integer scales
    ((2, 24, 40, 36), [17, 90], False, []),  # downsampling along H
    ((3, 20, 9, 70), [20, 31], True, []),
    ((2, 40, 700), [1500], False, [2.15]),
    ((1, 8, 10, 12, 14), [21, 25, 29], False, []),
    ((1, 8, 10, 12, 14), [5, 25, 29], True, []),
    # f64: the last row's source index 2.9999999999999996 is floored in float (ATen's floorf)
    ((1, 16, 4, 48), [48, 100], True, []),
]


def ids() -> list[str]:
    return [f"{len(s) - 2}d-{'x'.join(map(str, o))}-ac{int(ac)}-{'s' if sc else 'n'}" for s, o, ac, sc in CASES]


def eager_forward(x: Any, size: list[int], ac: bool, scales: list[float]) -> Any:
    sc = scales or [None] * len(size)
    return getattr(torch.ops.aten, OPS[len(size)])(x, size, ac, *sc)


def eager_backward(g: Any, shape: tuple[int, ...], ac: bool, scales: list[float]) -> Any:
    sc = scales or [None] * (len(shape) - 2)
    op = getattr(torch.ops.aten, OPS[len(shape) - 2] + "_backward")
    return op(g, list(g.shape[2:]), list(shape), ac, *sc)


def compiled(op: str, in_type: str, attrs: dict[str, Any]) -> Any:
    graph = x_.Graph("g")
    v = graph.add_input(in_type, "v")
    graph.set_outputs(graph.add_op(op, [v], attrs))
    return graph, x_.compile(graph)


def with_layout(t: Any, last: bool) -> Any:
    if not last:
        return t
    if t.dim() == 3:
        return t.transpose(1, 2).contiguous().transpose(1, 2)
    return t.contiguous(memory_format=torch.channels_last if t.dim() == 4 else torch.channels_last_3d)


def type_str(t: Any) -> str:
    return f"{'f32' if t.dtype == torch.float32 else 'f64'}[{','.join(map(str, t.shape))}]"


def run_threads(c: Any, inputs: list[Any], threads: int) -> Any:
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        (got,) = c.run(inputs, framework="torch")
    finally:
        torch.set_num_threads(before)
    return got


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("layout", ["channels_first", "channels_last"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=["f32", "f64"])
@pytest.mark.parametrize("shape,size,ac,scales", CASES, ids=ids())
def test_forward_and_gradient_match_eager(shape: tuple[int, ...], size: list[int], ac: bool,
                                          scales: list[float], dtype: Any, layout: str,
                                          threads: int) -> None:
    torch.manual_seed(0)
    nd = len(size)
    last = layout == "channels_last"
    x = with_layout(torch.randn(*shape, dtype=dtype), last)
    attrs = {"align_corners": ac, "scales": [float(s) for s in scales]}
    _, fwd = compiled(OPS[nd], type_str(x), {"output_size": size, **attrs})
    got = run_threads(fwd, [x], threads)
    want = eager_forward(x.contiguous(), size, ac, scales)  # eager's generic kernel
    generic = not (nd == 2 and sum(size) <= 128) and not (nd == 3 and sum(size) <= 256)
    tol = 0.0 if generic else 1e-6 if dtype == torch.float32 else 1e-12
    torch.testing.assert_close(got, want, rtol=tol, atol=tol)
    assert got.stride() == with_layout(want, last).stride()

    g = with_layout(torch.randn(*want.shape, dtype=dtype), last)
    _, bwd = compiled(OPS[nd] + "_backward", type_str(g), {"input_size": list(shape[2:]), **attrs})
    got_dx = run_threads(bwd, [g], threads)
    torch.testing.assert_close(got_dx, eager_backward(g, shape, ac, scales), rtol=0, atol=0)
    assert got_dx.stride() == x.stride()


@pytest.mark.parametrize("shape,size,ac,scales", CASES[2::3], ids=ids()[2::3])
def test_reference_interpreter_agrees(shape: tuple[int, ...], size: list[int], ac: bool,
                                      scales: list[float]) -> None:
    """The reference kernel (weighted sums in double) and the native one within f32 rounding."""
    torch.manual_seed(0)
    x = torch.randn(*shape)
    attrs = {"output_size": size, "align_corners": ac, "scales": [float(s) for s in scales]}
    graph, c = compiled(OPS[len(size)], type_str(x), attrs)
    (ref,) = x_.run(graph, [x], framework="torch")
    (got,) = c.run([x], framework="torch")
    torch.testing.assert_close(got, ref, rtol=1e-6, atol=1e-6)
