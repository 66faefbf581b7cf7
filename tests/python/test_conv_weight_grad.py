"""conv{1,2,3}d_weight (a convolution's weight gradient, what the autodiff rule of conv emits) runs
as oneDNN's convolution_backward_weights primitive (docs/backend.md): values against eager's
weight gradient, channels-first and channels-last operands, groups, strides, dilation and a
window the forward's floor division cut short; and that the library kernel, not the reference
one, ran."""

from __future__ import annotations

import pytest
import torch

import xjit.ir as ir

# (input, weight, stride, padding, dilation, groups)
CASES = [
    ((8, 3, 32, 32), (32, 3, 3, 3), 1, 1, 1, 1),  # a stem on RGB
    ((4, 32, 16, 16), (64, 32, 3, 3), 2, 1, 1, 1),  # strided: its last window row is dropped
    ((4, 16, 9, 9), (16, 16, 3, 3), 1, 2, 2, 1),
    ((2, 8, 8, 8), (16, 2, 3, 3), 1, 1, 1, 4),
    ((4, 32, 8, 8), (64, 32, 1, 1), 2, 0, 1, 1),
]


def _dims(s: tuple[int, ...]) -> str:
    return ",".join(map(str, s))


def _compiled(x: torch.Tensor, gy: torch.Tensor, w: tuple[int, ...], stride: int, padding: int,
              dilation: int, groups: int) -> ir.CompiledGraph:
    dt = {torch.float32: "f32", torch.float64: "f64"}[x.dtype]
    text = f"""graph @f(%x: {dt}[{_dims(x.shape)}], %g: {dt}[{_dims(gy.shape)}]) -> ({dt}[{_dims(w)}]) {{
  %0 = conv2d_weight(%x, %g) {{weight_size = [{_dims(w)}], stride = [{stride}], padding = [{padding}], dilation = [{dilation}], groups = {groups}}} : {dt}[{_dims(w)}]
  return(%0)
}}"""
    return ir.compile(ir.parse(text))


# Which operands are channels-last views (the layout pass hands on strided views): neither,
# both, or one (a stem: the image channels-first, its gradient channels-last; both are then
# tried channels-last, the other reordered).
LAYOUTS = {"nchw": (False, False), "nhwc": (True, True), "x-nchw-g-nhwc": (False, True),
           "x-nhwc-g-nchw": (True, False)}


@pytest.mark.parametrize("layout", list(LAYOUTS))
@pytest.mark.parametrize("case", CASES, ids=lambda c: "x" + _dims(c[0]) + "-w" + _dims(c[1]))
def test_weight_gradient_matches_eager(case: tuple, layout: str) -> None:
    xs, ws, stride, padding, dilation, groups = case
    torch.manual_seed(0)
    x, w = torch.randn(xs), torch.randn(ws)
    gy = torch.randn_like(torch.nn.functional.conv2d(x, w, None, stride, padding, dilation, groups))
    x_last, gy_last = LAYOUTS[layout]
    if x_last:
        x = x.to(memory_format=torch.channels_last)
    if gy_last:
        gy = gy.to(memory_format=torch.channels_last)
    compiled = _compiled(x, gy, ws, stride, padding, dilation, groups)
    (got,) = compiled(x, gy)
    want = torch.ops.aten.convolution_backward(
        gy, x, w, None, [stride] * 2, [padding] * 2, [dilation] * 2, False, [0, 0], groups, [False, True, False]
    )[1]
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5 * want.abs().max().item())
    assert compiled.stats["target_ops"] == 1 and compiled.stats["reference_ops"] == 0, compiled.stats
    library = [text for name, text in compiled.dump_files() if name.endswith(".onednn")]
    assert library and "ref" not in library[0].split(":")[-1], library


def test_f64_runs_the_reference_kernel_and_matches() -> None:
    # oneDNN has no f64: the op's reference kernel (double) serves it.
    torch.manual_seed(1)
    x, w = torch.randn(2, 4, 7, 7, dtype=torch.float64), torch.randn(6, 4, 3, 3, dtype=torch.float64)
    gy = torch.randn(2, 6, 3, 3, dtype=torch.float64)
    (got,) = _compiled(x, gy, tuple(w.shape), 2, 0, 1, 1)(x, gy)
    torch.testing.assert_close(got, torch.nn.grad.conv2d_weight(x, w.shape, gy, stride=2))
