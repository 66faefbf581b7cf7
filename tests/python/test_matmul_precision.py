"""PyTorch's f32 matmul precision (torch.set_float32_matmul_precision("medium"), i.e. the mkldnn
matmul precision "bf16"): eager then runs f32 matmul, mm, bmm, linear, addmm, baddbmm and
attention on operands rounded to bf16 with f32 accumulation. A frame captured under it runs its
products so too (the bf16-products pass marks them, the oneDNN kernels convert their operands),
and only while the setting holds: back at "highest" it recompiles and is exact again. Values are
checked against eager under the same setting and against a float64 reference."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
xjit = pytest.importorskip("xjit")
nn = torch.nn
F = torch.nn.functional

pytestmark = pytest.mark.usefixtures("fresh_frontend")  # (conftest.py)


@pytest.fixture(autouse=True)
def restore_precision() -> Iterator[None]:
    before = torch.get_float32_matmul_precision()
    yield
    torch.set_float32_matmul_precision(before)


def _rel_err(got: torch.Tensor, ref: torch.Tensor) -> float:
    return float((got.double() - ref).abs().max() / ref.abs().max())


def _eager_uses_bf16() -> bool:
    """Whether this CPU's eager matmul rounds to bf16 under "medium" (it needs AVX-512 or AMX)."""
    torch.manual_seed(0)
    a, b = torch.randn(64, 256), torch.randn(256, 64)
    return _rel_err(a @ b, a.double() @ b.double()) > 1e-4


class Block(nn.Module):
    """Every marked product kind: linear (+ GELU epilogue), matmul, bmm, baddbmm, addmm, sdpa."""

    def __init__(self) -> None:
        super().__init__()
        self.up, self.down = nn.Linear(64, 256), nn.Linear(256, 64)
        self.w = nn.Parameter(torch.randn(64, 64) / 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.down(F.gelu(self.up(x)))  # [2, 32, 64]
        q = h.view(2, 32, 4, 16).transpose(1, 2)
        a = F.scaled_dot_product_attention(q, q, q).transpose(1, 2).reshape(2, 32, 64)
        s = torch.bmm(a, a.transpose(1, 2))  # [2, 32, 32]
        s = torch.baddbmm(s, a, a.transpose(1, 2), alpha=0.5)
        y = torch.matmul(s, a) + torch.addmm(self.w[0], a[0], self.w)
        return y


def _medium_case(model: nn.Module, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, float]:
    """xjit's and eager's results under "medium", and eager's error against float64."""
    ref = model.double()(x.double())
    model.float()
    torch.set_float32_matmul_precision("medium")
    compiled = xjit.jit(model)
    got, want = compiled(x), model(x)
    return got, want, _rel_err(want, ref.detach())


def test_medium_matches_eager_products_in_bf16(tmp_path: Path) -> None:
    torch.manual_seed(0)
    model, x = Block().eval(), torch.randn(2, 32, 64)
    xjit.config.dump_dir = str(tmp_path)
    try:
        with torch.no_grad():
            ref = model.double()(x.double())
            got, want, eager_err = _medium_case(model, x)
    finally:
        xjit.config.dump_dir = None
    text = "".join(p.read_text() for p in tmp_path.glob("*.runtime.xir"))
    assert text.count('fpmath = "bf16"') >= 6, text
    # Both round the same operands to bf16 (attention and chained products amplify the
    # difference in accumulation order to ~2e-3 here).
    scale = float(want.abs().max())
    assert float((got - want).abs().max()) <= 1e-2 * scale
    err = _rel_err(got, ref)
    assert err <= 2 * eager_err + 1e-6
    if _eager_uses_bf16():
        assert eager_err > 1e-4 and err > 1e-4  # really bf16 on both sides, not f32


@pytest.mark.parametrize(
    "first, then",
    [
        # Back at "highest", an entry captured under "medium" is skipped: recompiled, exact.
        ("medium", "highest"),
        # An entry captured at "highest" may serve "medium" (never less precise than eager's).
        ("highest", "medium"),
    ],
)
def test_a_changed_precision_never_gives_bf16_at_highest_or_wrong_values(
    first: str, then: str
) -> None:
    torch.manual_seed(0)
    model, x = Block().eval(), torch.randn(2, 32, 64)
    with torch.no_grad():
        ref = model.double()(x.double())
        model.float()
        compiled = xjit.jit(model)
        torch.set_float32_matmul_precision(first)
        compiled(x)
        torch.set_float32_matmul_precision(then)
        err = _rel_err(compiled(x), ref)
    assert err < 1e-5


@pytest.mark.parametrize(
    "shape",
    [(4, 16, 16), (16, 16, 16)],  # <= 16^3 multiply-adds: eager stays f32 (ATen's checksize)
)
def test_small_products_stay_f32(shape: tuple[int, int, int]) -> None:
    m, k, n = shape
    torch.manual_seed(0)
    a, b = torch.randn(m, k), torch.randn(k, n)
    torch.set_float32_matmul_precision("medium")
    fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor] = lambda p, q: torch.mm(p, q) * 2
    got = xjit.jit(fn)(a, b)
    assert _rel_err(got, (a.double() @ b.double()) * 2) < 1e-5


def test_training_step_under_medium_matches_eager() -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(64, 256), nn.Tanh(), nn.Linear(256, 8))
    twin = nn.Sequential(nn.Linear(64, 256), nn.Tanh(), nn.Linear(256, 8))
    twin.load_state_dict(model.state_dict())
    x = torch.randn(32, 64)
    torch.set_float32_matmul_precision("medium")

    def step(m: nn.Module, inp: torch.Tensor) -> torch.Tensor:
        loss = m(inp).square().mean()
        loss.backward()
        return loss

    got = xjit.jit(step)(model, x)
    want = step(twin, x)
    torch.testing.assert_close(got, want, rtol=2e-2, atol=1e-5)
    for p, q in zip(model.parameters(), twin.parameters()):
        assert p.grad is not None and q.grad is not None
        scale = float(q.grad.abs().max())
        assert float((p.grad - q.grad).abs().max()) <= 2e-2 * scale


def _linear_and_reference(rows: int) -> tuple[nn.Module, torch.Tensor, torch.Tensor]:
    """A 256x256 linear (f32), an input of `rows` rows and its float64 result."""
    torch.manual_seed(0)
    model, x = nn.Linear(256, 256).eval(), torch.randn(rows, 256)
    with torch.no_grad():
        ref = model.double()(x.double())
    return model.float(), x, ref


@pytest.mark.parametrize("weight_cache", [False, True])
def test_few_rows_convert_weights_only_when_cached(weight_cache: bool) -> None:
    # 8 rows per weight: converting an untagged weight at every call costs more than bf16 saves
    # (exact f32 instead); a cached weight is converted once per version, so bf16 pays.
    model, x, ref = _linear_and_reference(8)
    with torch.no_grad():
        torch.set_float32_matmul_precision("medium")
        got = xjit.jit(model, weight_cache=weight_cache)(x)
        want = model(x)
    err = _rel_err(got, ref)
    if weight_cache and _eager_uses_bf16():
        assert err > 1e-4
        assert float((got - want).abs().max()) <= 1e-2 * float(want.abs().max())
    if not weight_cache:
        assert err < 1e-5


def test_mkldnn_disabled_keeps_f32() -> None:
    # Eager's bf16 products go through mkldnn: with it disabled, "medium" leaves them exact.
    model, x, ref = _linear_and_reference(128)
    with torch.no_grad():
        torch.set_float32_matmul_precision("medium")
        torch.backends.mkldnn.enabled = False  # (flags() also sets allow_tf32: a warning)
        try:
            got = xjit.jit(model)(x)
            want = model(x)
        finally:
            torch.backends.mkldnn.enabled = True
    assert _rel_err(want, ref) < 1e-5
    assert _rel_err(got, ref) < 1e-5
