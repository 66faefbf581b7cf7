"""gather, repeat, tile and pad (reflect, replicate, circular) as native loop kernels (docs/backend.md "Loop kernels"): a repeated
dim reads index i mod its size, gather loads its index and checks it per element. Values against
PyTorch on contiguous and non-contiguous operands; an out-of-bounds index raises the op's error,
as the reference kernel does, and never reads outside self."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
ir = pytest.importorskip("xjit.ir")


def _ty(t: torch.Tensor) -> str:
    dt = {torch.float32: "f32", torch.int64: "i64", torch.int32: "i32"}[t.dtype]
    return f"{dt}[{','.join(map(str, t.shape))}]"


def _compile(text: str, native: bool = True) -> object:
    cg = ir.compile(ir.parse(text), keep_text=True)
    loops = [n for n, _ in cg.dump_files() if n.endswith(".loops")]  # type: ignore[attr-defined]
    assert bool(loops) == native, loops
    return cg


def _gather(x: torch.Tensor, index: torch.Tensor, dim: int) -> object:
    out = _ty(torch.empty(index.shape, dtype=x.dtype))
    return _compile(f"""
graph @f(%x: {_ty(x)}, %i: {_ty(index)}) -> ({out}) {{
  %y = gather(%x, %i) {{dim = {dim}}} : {out}
  return(%y)
}}""")


@pytest.mark.parametrize("dim", [0, 1, -1])
@pytest.mark.parametrize("layout", ["contiguous", "transposed"])
@pytest.mark.parametrize("index_dtype", [torch.int64, torch.int32], ids=["i64", "i32"])
def test_gather_matches_torch(dim: int, layout: str, index_dtype: torch.dtype) -> None:
    g = torch.Generator().manual_seed(3 + dim)
    x = torch.randn(4, 9, 33, generator=g)
    if layout == "transposed":  # same values, another memory order
        x = x.transpose(0, 2).contiguous().transpose(0, 2)
    size = x.shape[dim]
    index = torch.randint(0, size, (3, 7, 20), generator=g)
    if layout == "transposed":
        index = index.transpose(1, 2).contiguous().transpose(1, 2)
    index = index.to(index_dtype)
    (got,) = _gather(x, index, dim)(x, index)  # type: ignore[operator]
    torch.testing.assert_close(got, torch.gather(x, dim, index.long()), rtol=0, atol=0)


@pytest.mark.parametrize("bad", [-1, 33, 1 << 40], ids=["negative", "size", "huge"])
def test_gather_out_of_bounds_raises(bad: int) -> None:
    x = torch.randn(4, 9, 33)
    index = torch.randint(0, 33, (4, 9, 10))
    index[2, 5, 7] = bad
    with pytest.raises(RuntimeError, match="out of bounds"):
        torch.gather(x, 2, index)
    with pytest.raises(Exception, match="gather.*out of bounds for dimension 2 with size 33") as err:
        _gather(x, index, 2)(x, index)  # type: ignore[operator]
    assert str(err.value).count("'gather'") == 1, err.value  # named once


def _index(x: torch.Tensor, index: torch.Tensor) -> object:
    out = _ty(torch.empty(tuple(index.shape) + tuple(x.shape[1:]), dtype=x.dtype))
    return _compile(f"""
graph @f(%x: {_ty(x)}, %i: {_ty(index)}) -> ({out}) {{
  %y = index(%x, %i) : {out}
  return(%y)
}}""")


@pytest.mark.parametrize("index_shape", [(7,), (2, 5), ()])
@pytest.mark.parametrize("layout", ["contiguous", "transposed"])
@pytest.mark.parametrize("index_dtype", [torch.int64, torch.int32], ids=["i64", "i32"])
def test_index_with_one_tensor_matches_torch(
    index_shape: tuple[int, ...], layout: str, index_dtype: torch.dtype
) -> None:
    # x[idx] (MoE token gathers): rows of self at the loaded index, negative ones wrapped.
    g = torch.Generator().manual_seed(5)
    x = torch.randn(6, 9, 17, generator=g)
    if layout == "transposed":
        x = x.transpose(0, 2).contiguous().transpose(0, 2)
    index = torch.randint(-6, 6, index_shape, generator=g).to(index_dtype)
    (got,) = _index(x, index)(x, index)  # type: ignore[operator]
    torch.testing.assert_close(got, x[index.long()], rtol=0, atol=0)


@pytest.mark.parametrize("bad", [-7, 6, 1 << 40], ids=["negative", "size", "huge"])
def test_index_out_of_bounds_raises(bad: int) -> None:
    x = torch.randn(6, 9)
    index = torch.randint(0, 6, (8,))
    index[3] = bad
    with pytest.raises(IndexError, match="out of bounds"):
        x[index]
    with pytest.raises(Exception, match="index.*out of bounds for dimension 0 with size 6"):
        _index(x, index)(x, index)  # type: ignore[operator]


@pytest.mark.parametrize(
    "shape,repeats",
    [
        ((3, 5), (2, 3)),
        ((3, 5), (4, 1, 2)),  # a new leading dim
        ((1, 5, 1), (3, 1, 7)),  # size-1 dims tiled
        ((2, 3, 4, 5), (1, 2, 1, 3)),
        ((6,), (5,)),
    ],
)
@pytest.mark.parametrize("layout", ["contiguous", "transposed"])
def test_repeat_matches_torch(shape: tuple[int, ...], repeats: tuple[int, ...], layout: str) -> None:
    x = torch.randn(shape)
    if layout == "transposed" and x.dim() >= 2:
        x = x.transpose(0, 1).contiguous().transpose(0, 1)
    want = x.repeat(repeats)
    cg = _compile(f"""
graph @f(%x: {_ty(x)}) -> ({_ty(want)}) {{
  %y = repeat(%x) {{repeats = [{", ".join(map(str, repeats))}]}} : {_ty(want)}
  %z = add(%y, %y) : {_ty(want)}
  return(%y, %z)
}}""".replace(f"-> ({_ty(want)})", f"-> ({_ty(want)}, {_ty(want)})"))
    y, z = cg(x)  # type: ignore[operator]
    torch.testing.assert_close(y, want, rtol=0, atol=0)
    torch.testing.assert_close(z, want + want, rtol=0, atol=0)


def test_tile_pads_its_dims() -> None:
    x = torch.randn(2, 3, 4)
    want = x.tile((2, 3))  # dims (1, 2, 3)
    cg = _compile(f"""
graph @f(%x: {_ty(x)}) -> ({_ty(want)}) {{
  %y = tile(%x) {{dims = [2, 3]}} : {_ty(want)}
  return(%y)
}}""")
    (got,) = cg(x)  # type: ignore[operator]
    torch.testing.assert_close(got, want, rtol=0, atol=0)


@pytest.mark.parametrize("mode", ["constant", "reflect", "replicate", "circular"])
@pytest.mark.parametrize(
    "shape,pad",
    [((2, 3, 9, 11), (1, 2, 3, 0)), ((2, 5, 7), (3, 3)), ((1, 4, 6, 6), (0, 1, 0, 1))],
)
@pytest.mark.parametrize("layout", ["contiguous", "transposed"])
def test_pad_matches_torch(mode: str, shape: tuple[int, ...], pad: tuple[int, ...], layout: str) -> None:
    x = torch.randn(shape)
    if layout == "transposed":
        x = x.transpose(1, -1).contiguous().transpose(1, -1)
    F = torch.nn.functional
    want = F.pad(x, pad, mode=mode, value=1.5) if mode == "constant" else F.pad(x, pad, mode=mode)
    cg = _compile(f"""
graph @f(%x: {_ty(x)}) -> ({_ty(want)}) {{
  %y = pad(%x) {{pad = [{", ".join(map(str, pad))}], mode = "{mode}", value = 1.5}} : {_ty(want)}
  return(%y)
}}""", native=mode != "constant")  # a constant pad is a fill and a copy
    (got,) = cg(x)  # type: ignore[operator]
    torch.testing.assert_close(got, want, rtol=0, atol=0)


def test_constant_pad_crops_with_negative_amounts() -> None:
    x = torch.randn(3, 8, 10)
    want = torch.nn.functional.pad(x, (-2, 3, 1, -3), value=-4.0)
    cg = _compile(f"""
graph @f(%x: {_ty(x)}) -> ({_ty(want)}) {{
  %y = pad(%x) {{pad = [-2, 3, 1, -3], value = -4.0}} : {_ty(want)}
  return(%y)
}}""", native=False)
    (got,) = cg(x)  # type: ignore[operator]
    torch.testing.assert_close(got, want, rtol=0, atol=0)


def _heads(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    # Falcon's multi-query split: x[..., [-2], :] and friends (canonicalize's index-slice).
    return x[..., :-2, :] * 2, x[..., [-2], :] + 1, x[..., [-1], :] * x[:, [1, 2, 3]].sum()


def test_constant_index_lists_run_as_slices() -> None:
    xjit = pytest.importorskip("xjit")
    x = torch.randn(2, 5, 6, 4)
    ir.profile(1)
    try:
        got = xjit.jit(_heads)(x)
        report = ir.profile_report()
    finally:
        ir.profile(0)
    for g, w in zip(got, _heads(x)):
        torch.testing.assert_close(g, w, rtol=1e-6, atol=1e-6)
    assert "reference index" not in report, report
