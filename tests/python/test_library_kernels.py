"""oneDNN library kernels through the runtime (xjit.ir.compile) against PyTorch eager:
matmul / linear / conv / pooling alone, as epilogue groups, and a channels-last conv chain made
by the layout pass. Each graph must run on the CPU target (no reference kernels)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import xjit.ir as ir


def ty(t: torch.Tensor) -> str:
    name = {torch.float32: "f32", torch.bfloat16: "bf16"}[t.dtype]
    return f"{name}[{','.join(str(s) for s in t.shape)}]"


def compile_graph(body: str, args: list[torch.Tensor], out: torch.Tensor, pipeline: str):
    params = ", ".join(f"%a{i}: {ty(a)}" for i, a in enumerate(args))
    text = f"graph @g({params}) -> ({ty(out)}) {{\n{body.replace('OUT', ty(out))}\n}}"
    return ir.compile(ir.parse(text), pipeline=pipeline)


CASES = [
    (
        "linear + bias + gelu",
        "  %l = linear(%a0, %a1, %a2) : OUT\n  %y = gelu(%l) : OUT\n  return(%y)",
        lambda: [torch.randn(3, 5, 24), torch.randn(40, 24), torch.randn(40)],
        lambda x, w, b: F.gelu(F.linear(x, w, b)),
    ),
    (
        "matmul * scalar + mask",
        "  %m = matmul(%a0, %a1) : OUT\n  %c = constant() {value = 0.125} : float\n"
        "  %s = mul(%m, %c) : OUT\n  %y = add(%s, %a2) : OUT\n  return(%y)",
        lambda: [torch.randn(2, 3, 7, 16), torch.randn(2, 3, 16, 7), torch.randn(2, 1, 1, 7)],
        lambda q, k, m: q @ k * 0.125 + m,
    ),
    (
        "conv2d + bias + relu",
        "  %c = conv2d(%a0, %a1, %a2) {padding = [1], stride = [2]} : OUT\n"
        "  %y = relu(%c) : OUT\n  return(%y)",
        lambda: [torch.randn(2, 16, 13, 11), torch.randn(32, 16, 3, 3), torch.randn(32)],
        lambda x, w, b: F.relu(F.conv2d(x, w, b, stride=2, padding=1)),
    ),
    (
        "conv1d grouped + residual",
        "  %c = conv1d(%a0, %a1) {padding = [1], groups = 2} : OUT\n"
        "  %y = add(%c, %a2) : OUT\n  return(%y)",
        lambda: [torch.randn(3, 8, 21), torch.randn(8, 4, 3), torch.randn(3, 8, 21)],
        lambda x, w, r: F.conv1d(x, w, padding=1, groups=2) + r,
    ),
    (
        "max_pool2d ceil_mode",
        "  %y = max_pool2d(%a0) {kernel_size = [3], stride = [2], ceil_mode = true} : OUT\n"
        "  return(%y)",
        lambda: [torch.randn(2, 5, 10, 9)],
        lambda x: F.max_pool2d(x, 3, 2, ceil_mode=True),
    ),
]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["f32", "bf16"])
@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_library_kernel_matches_torch(case, dtype):
    torch.manual_seed(0)
    _, body, make_args, fn = case
    args = [a.to(dtype) for a in make_args()]
    ref = fn(*args)
    g = compile_graph(body, args, ref, "fuse,plan-memory")
    assert g.stats["reference_ops"] == 0, g.stats["not_compiled"]
    (got,) = g(*args)
    tol = 1e-4 if dtype == torch.float32 else 2e-2
    scale = ref.float().abs().max().item()
    assert (got.float() - ref.float()).abs().max().item() <= tol * scale


def test_channels_last_conv_chain():
    # The layout pass converts a chain of two convs to NHWC; both run on oneDNN's NHWC kernels.
    torch.manual_seed(0)
    x, w1, b1, w2 = (
        torch.randn(2, 8, 12, 12),
        torch.randn(16, 8, 3, 3),
        torch.randn(16),
        torch.randn(8, 16, 1, 1),
    )
    ref = F.conv2d(F.relu(F.conv2d(x, w1, b1, padding=1)), w2)
    body = (
        "  %c = conv2d(%a0, %a1, %a2) {padding = [1]} : f32[2,16,12,12]\n"
        "  %r = relu(%c) : f32[2,16,12,12]\n"
        "  %y = conv2d(%r, %a3) : OUT\n  return(%y)"
    )
    g = compile_graph(body, [x, w1, b1, w2], ref, "layout,fuse,plan-memory")
    assert str(g.graph).count('layout = "nhwc"') == 2
    # Both convs (the first as an epilogue group with its relu) run on the target; the layout
    # conversions around the chain (permute, contiguous) are not library calls.
    assert g.stats["target_ops"] == 2, g.stats
    (got,) = g(x, w1, b1, w2)
    torch.testing.assert_close(got, ref, rtol=1e-4, atol=1e-4)
