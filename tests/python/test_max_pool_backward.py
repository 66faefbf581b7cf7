"""max_pool{1,2,3}d_backward (the gradient of max pooling whose windows do not tile the input:
overlapping, padded, dilated, ceil_mode) against PyTorch eager, bit for bit in f32 and f64: the
gradient goes to each window's first maximum (ties), a window holding NaN gives it to its last
NaN, -inf windows to their first in-bounds position, and an input element that is the argmax of
several windows gets their gradients added in output order, as eager's backward adds them."""

from __future__ import annotations

from typing import Any

import pytest

torch = pytest.importorskip("torch")
x_ = pytest.importorskip("xjit._xjit")
xjit = pytest.importorskip("xjit")

F = torch.nn.functional

# (spatial shape of the input, max_pool kwargs)
WINDOWS = [
    ((9, 9), {"kernel_size": 3, "stride": 2, "padding": 1}),  # the ResNet stem
    ((8, 7), {"kernel_size": 3, "stride": 1, "padding": 1}),  # every element in 9 windows
    ((10, 9), {"kernel_size": (3, 2), "stride": (2, 1), "dilation": (2, 3)}),
    ((9, 8), {"kernel_size": 3, "stride": 2, "padding": 1, "ceil_mode": True}),
    ((7, 6), {"kernel_size": 2, "ceil_mode": True}),  # tiles but for the ragged last window
    ((12,), {"kernel_size": 4, "stride": 3, "padding": 2}),
    ((5, 6, 7), {"kernel_size": 3, "stride": 2, "padding": 1}),
]


def attrs_of(kw: dict[str, Any]) -> dict[str, Any]:
    def ints(v: Any) -> list[int]:
        return list(v) if isinstance(v, tuple) else [v]

    out: dict[str, Any] = {k: ints(v) for k, v in kw.items() if k != "ceil_mode"}
    if kw.get("ceil_mode"):
        out["ceil_mode"] = True
    return out


def pool_fn(nd: int) -> Any:
    return {1: F.max_pool1d, 2: F.max_pool2d, 3: F.max_pool3d}[nd]


def make_input(shape: tuple[int, ...], dtype: Any, kind: str) -> Any:
    if kind == "ties":  # small integers: many equal maxima per window
        return torch.randint(-2, 3, shape).to(dtype)
    x = torch.randn(*shape, dtype=dtype)
    if kind == "nonfinite":  # NaN and -inf, and windows of -inf only
        flat = x.view(-1)
        flat[torch.randperm(flat.numel())[: flat.numel() // 6]] = float("nan")
        flat[torch.randperm(flat.numel())[: flat.numel() // 4]] = float("-inf")
        x.view(x.shape[0], x.shape[1], -1)[:, 0, :] = float("-inf")  # a whole plane
    return x


def eager(x: Any, g: Any, kw: dict[str, Any]) -> tuple[Any, Any]:
    leaf = x.detach().clone().requires_grad_()
    out = pool_fn(x.dim() - 2)(leaf, **kw)
    (dx,) = torch.autograd.grad(out, leaf, g)
    return out.detach(), dx


def same(a: Any, b: Any) -> None:
    torch.testing.assert_close(a, b, rtol=0, atol=0, equal_nan=True)


@pytest.mark.parametrize("kind", ["random", "ties", "nonfinite"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=["f32", "f64"])
@pytest.mark.parametrize("spatial,kw", WINDOWS, ids=[str(i) for i in range(len(WINDOWS))])
def test_joint_graph_matches_eager_bitwise(spatial: tuple[int, ...], kw: dict[str, Any],
                                           dtype: Any, kind: str) -> None:
    torch.manual_seed(0)
    nd = len(spatial)
    shape = (2, 3, *spatial)
    x = make_input(shape, dtype, kind)
    want_out = pool_fn(nd)(x, **kw)
    g = torch.randn(want_out.shape, dtype=dtype)
    want_out, want_dx = eager(x, g, kw)
    dt = "f32" if dtype == torch.float32 else "f64"
    graph = x_.Graph("g")
    xin = graph.add_input(f"{dt}[{','.join(map(str, shape))}]", "x")
    graph.set_outputs([graph.add_op(f"max_pool{nd}d", [xin], attrs_of(kw))[0]])
    compiled = x_.compile(graph, pipeline="autodiff{wrt=all part=joint}")
    text = compiled.graph.print(locations=False)
    got_out, got_dx = compiled.run([x, g], framework="torch")
    same(got_out, want_out)
    same(got_dx, want_dx)
    assert f"max_pool{nd}d_backward" in text, text  # none of WINDOWS tiles its input


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=["f32", "f64"])
def test_channels_last_input(dtype: Any) -> None:
    # A channels-last x (a conv net's activations): the kernel walks channels innermost and
    # returns dx channels-last; values as eager's.
    torch.manual_seed(0)
    graph = x_.Graph("g")
    dt = "f32" if dtype == torch.float32 else "f64"
    xin = graph.add_input(f"{dt}[2,5,9,9]", "x")
    kw = {"kernel_size": 3, "stride": 2, "padding": 1}
    graph.set_outputs([graph.add_op("max_pool2d", [xin], attrs_of(kw))[0]])
    compiled = x_.compile(graph, pipeline="autodiff{wrt=all part=joint}")
    x = torch.randint(-2, 3, (2, 5, 9, 9)).to(dtype).to(memory_format=torch.channels_last)
    g = torch.randn(2, 5, 5, 5, dtype=dtype)
    want_out, want_dx = eager(x, g, kw)
    got_out, got_dx = compiled.run([x, g], framework="torch")
    same(got_out, want_out)
    same(got_dx, want_dx)


def test_resnet_stem_trains_like_eager() -> None:
    # conv + batch norm + relu + MaxPool2d(3, 2, 1) under xjit.jit, forward and backward.
    torch.manual_seed(0)

    def stem() -> Any:
        return torch.nn.Sequential(
            torch.nn.Conv2d(3, 8, 7, 2, 3, bias=False), torch.nn.BatchNorm2d(8),
            torch.nn.ReLU(), torch.nn.MaxPool2d(3, 2, 1))

    ref = stem()
    mine = stem()
    mine.load_state_dict(ref.state_dict())
    compiled = xjit.jit(mine)
    x = torch.randn(2, 3, 32, 32)
    g = torch.randn(2, 8, 8, 8)
    for _ in range(2):
        want = ref(x)
        want.backward(g)
        got = compiled(x)
        got.backward(g)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    for (name, a), b in zip(mine.named_parameters(), ref.parameters(), strict=True):
        torch.testing.assert_close(a.grad, b.grad, rtol=1e-4, atol=1e-4, msg=name)


def test_max_pool_backward_infers_and_rejects() -> None:
    graph = x_.Graph("g")
    g = graph.add_input("f32[2,3,5,5]", "g")
    x = graph.add_input("f32[2,3,9,9]", "x")
    attrs = {"kernel_size": [3], "stride": [2], "padding": [1]}
    (dx,) = graph.add_op("max_pool2d_backward", [g, x], attrs)
    graph.set_outputs([dx])
    assert "f32[2,3,9,9]" in graph.print(locations=False)
    with pytest.raises(Exception, match="is not max_pool's output shape"):
        graph.add_op("max_pool2d_backward", [g, x], {"kernel_size": [3], "stride": [1]})
    xi = graph.add_input("f16[2,3,9,9]", "xh")
    gi = graph.add_input("f16[2,3,5,5]", "gh")
    with pytest.raises(Exception, match="f32 or f64"):
        graph.add_op("max_pool2d_backward", [gi, xi], attrs)


# Shapes large enough for the CPU target to split the kernel over 2 threads (a thread per 32K
# elements of x): units of a batch element's block of channels. Channel counts that leave
# vectors of 4, 1 and single channels (f32 vectors hold 16, f64 8) in each unit.
THREADED = [
    ((1, 64, 40, 40), {"kernel_size": 3, "stride": 2, "padding": 1}),  # 2 blocks of 32
    ((3, 80, 20, 18), {"kernel_size": 3, "stride": 1, "padding": 1}),  # 3 images: 6 blocks
    ((2, 70, 25, 23), {"kernel_size": 3, "stride": 2, "padding": 1, "ceil_mode": True}),
    ((1, 64, 10, 12, 12), {"kernel_size": 3, "stride": 2, "padding": 1}),
    # channels-first rows of 16+ interior windows taken as vectors: stride 3 with dilation (an
    # element by element load), and 1-d (stride 2: two loads and a shuffle)
    ((1, 40, 30, 70), {"kernel_size": (2, 3), "stride": (2, 3), "padding": 1,
                       "dilation": (1, 2)}),
    ((4, 32, 600), {"kernel_size": 3, "stride": 2, "padding": 1}),
]


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("kind", ["random", "ties", "nonfinite"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=["f32", "f64"])
@pytest.mark.parametrize("layout", ["channels_last", "channels_first"])
@pytest.mark.parametrize("shape,kw", THREADED, ids=[str(i) for i in range(len(THREADED))])
def test_threaded_units_match_eager_bitwise(shape: tuple[int, ...], kw: dict[str, Any],
                                            layout: str, dtype: Any, kind: str,
                                            threads: int) -> None:
    torch.manual_seed(0)
    nd = len(shape) - 2
    x = make_input(shape, dtype, kind)
    if layout == "channels_last" and nd == 1:
        x = x.transpose(1, 2).contiguous().transpose(1, 2)
    elif layout == "channels_last":
        x = x.to(memory_format=torch.channels_last if nd == 2 else torch.channels_last_3d)
    g = torch.randn(pool_fn(nd)(x, **kw).shape, dtype=dtype)
    dt = "f32" if dtype == torch.float32 else "f64"
    graph = x_.Graph("g")
    gin = graph.add_input(f"{dt}[{','.join(map(str, g.shape))}]", "g")
    xin = graph.add_input(f"{dt}[{','.join(map(str, shape))}]", "x")
    graph.set_outputs(graph.add_op(f"max_pool{nd}d_backward", [gin, xin], attrs_of(kw)))
    compiled = x_.compile(graph)
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        (got,) = compiled.run([g, x], framework="torch")
        _, want = eager(x, g, kw)
    finally:
        torch.set_num_threads(before)
    same(got, want)
    # dx keeps x's layout: the kernel reads and writes channels innermost in both.
    assert got.stride() == x.stride()
