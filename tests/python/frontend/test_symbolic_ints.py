"""Symbolic Python int arguments ("automatic dynamic" for ints, docs/frontend.md "Symbolic int
arguments"): an int argument whose value changes between calls becomes a symbol (bound by an
IntSymbol guard and a u8[sym] carrier input), so one capture serves every value of at least 2;
0, 1, negative ints and bools stay specialized (floats become graph inputs instead,
test_float_inputs.py). Every result is checked against eager, and the number of compiles
against the frontend's counters."""

from __future__ import annotations

import copy
import sys
import warnings
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
fe = pytest.importorskip("xjit._frontend")
import xjit  # noqa: E402
from frontend_fixtures import clean, counters, run_values  # noqa: E402, F401 (autouse fixture)

REPO = Path(__file__).resolve().parents[3]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))
from bench import meta_decode  # noqa: E402


def x12() -> torch.Tensor:
    return torch.arange(48.0).reshape(4, 12)


def test_meta_style_decode_loop_compiles_twice() -> None:
    # Prompt at start_pos 0 (static), then every decoding step hits one symbolic capture:
    # the cache writes at [start_pos:start_pos+1] and attention over [:start_pos+1].
    torch.manual_seed(0)
    eager = meta_decode.Transformer(vocab=50, dim=16, n_layers=2, n_heads=2, max_seq=32).eval()
    compiled = xjit.jit(copy.deepcopy(eager))
    prompt = torch.randint(0, 50, (1, 4))
    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("error", xjit.XjitWarning)
        want, got = eager(prompt, 0), compiled(prompt, 0)
        torch.testing.assert_close(got, want)
        for pos in range(4, 24):
            token = want[:, -1].argmax(-1, keepdim=True)
            want, got = eager(token, pos), compiled(token, pos)
            torch.testing.assert_close(got, want, msg=f"start_pos {pos}")
    for a, b in zip(compiled._orig_mod.layers, eager.layers):
        torch.testing.assert_close(a.attention.cache_k, b.attention.cache_k)
    assert counters()["compiles"] == 2  # the prompt, then one symbolic step
    assert counters()["frames_in_python"] == 0
    assert counters()["cache_hits"] == 19


def test_guard_and_graph_name_the_int_symbol() -> None:
    def f(x: torch.Tensor, n: int) -> torch.Tensor:
        return x[:, : n + 1] * n

    compiled = xjit.jit(f)
    for n in (3, 5, 6, 7):
        torch.testing.assert_close(compiled(x12(), n), f(x12(), n))
    assert counters()["compiles"] == 2
    ev = fe.events()
    guards = ev["graphs"][-1]["guards"]
    assert any("L['n']: int i0 >= 2" in g for g in guards), guards
    assert any("i0+1 <= 12" in g for g in guards), guards  # the slice end within the dim
    # Past the dim Python clamps the slice: the guard fails, the new capture specializes.
    for n in (11, 12, 20):
        torch.testing.assert_close(compiled(x12(), n), f(x12(), n))


def test_arithmetic_slices_and_sizes() -> None:
    def f(x: torch.Tensor, n: int) -> tuple[torch.Tensor, ...]:
        a = x * n + n - 1
        b = x[:, n : n + 3] / n
        c = torch.arange(n) * 2
        d = x.new_zeros(n) + n
        e = x[:, :n].reshape(-1, n)
        g = x.flatten()[: 4 * n].view(-1, n)
        return a, b, c, d, e, g

    run_values(f, [2, 3, 5, 4, 6, 2], x12)
    assert counters()["compiles"] == 2  # 2 static, then symbolic


def test_int_index_reads_and_writes_stay_symbolic() -> None:
    # x[:, n] (narrow at a symbolic offset) and x[:, n] = v (index_put at arange(n, n+1)),
    # guarded 0 <= n < 12; n = 12 and 20 raise IndexError in eager: the guard fails and the
    # recompile raises it too.
    def f(x: torch.Tensor, n: int) -> tuple[torch.Tensor, torch.Tensor]:
        col = x[:, n] * 2
        x[:, n] = x[:, 0] + n
        return col, x

    run_values(f, [3, 5, 6, 11, 9, 4], x12)
    assert counters()["compiles"] == 2
    compiled = xjit.jit(f)
    for n in (12, 20):
        with pytest.raises(IndexError):
            f(x12(), n)
        with pytest.raises(IndexError):
            compiled(x12(), n)


def test_truth_value_of_a_symbolic_int() -> None:
    def f(x: torch.Tensor, n: int) -> torch.Tensor:
        y = x * 2 if n else x + 1  # decided: a symbolic int is at least 2
        return y - n

    run_values(f, [2, 3, 7, 0, 8, 1], x12)
    assert counters()["compiles"] == 4  # 2 static, symbolic, then 0 and 1 static


def test_int_returned_and_computed() -> None:
    def f(x: torch.Tensor, n: int) -> tuple[torch.Tensor, int, int]:
        m = n * 3 + 1
        return x.sum() + m, m, n // 2

    run_values(f, [4, 7, 9, 12, 5], x12)
    assert counters()["compiles"] == 2


def test_range_loop_specializes_per_value() -> None:
    # range(n) unrolls: like torch.compile, the loop specializes n (guarded by value): right
    # results for each value, a capture per value.
    def f(x: torch.Tensor, n: int) -> torch.Tensor:
        for i in range(n):
            x = x + i
        return x

    run_values(f, [3, 4, 5, 4, 3], x12)
    assert counters()["compiles"] == 3


def test_comparison_in_python_control_flow_is_guarded() -> None:
    def f(x: torch.Tensor, n: int) -> torch.Tensor:
        if n > 4:
            return x * n
        return x - n

    # 3: static; 5: symbolic, n > 4 guarded (5 <= i0); 6, 7 reuse it; 2: fails that guard and
    # recompiles (i0 <= 4); 4 reuses that one; 3 the first.
    run_values(f, [3, 5, 6, 7, 2, 4, 3, 9], x12)
    assert counters()["compiles"] == 3
    guards = [g for e in fe.events()["graphs"] for g in e["guards"]]
    assert any("5 <= i0" in g for g in guards), guards
    assert any("i0 <= 4" in g for g in guards), guards


def test_equality_test_specializes_when_false() -> None:
    def f(x: torch.Tensor, n: int) -> torch.Tensor:
        if n == 5:
            return x * 100
        return x + n

    run_values(f, [3, 4, 5, 6, 5, 7], x12)


@pytest.mark.parametrize("backend", ["xjit", "eager", "interp"])
def test_small_and_negative_values_after_the_symbolic_capture(backend: str) -> None:
    def f(x: torch.Tensor, n: int) -> torch.Tensor:
        return x[:, :n] * n + x[:, n:].sum()

    run_values(f, [3, 5, 6, 1, 0, -2, -5, 7, 1, 2], x12, backend=backend)
    assert counters()["frames_in_python"] == 0


def test_dynamic_false_specializes_every_value() -> None:
    def f(x: torch.Tensor, n: int) -> torch.Tensor:
        return x * n

    run_values(f, [2, 3, 4, 5], x12, dynamic=False)
    assert counters()["compiles"] == 4


def test_dynamic_true_symbolic_from_the_first_call() -> None:
    def f(x: torch.Tensor, n: int) -> torch.Tensor:
        return x[:, :n] * n

    run_values(f, [3, 4, 5, 6], x12, dynamic=True)
    assert counters()["compiles"] == 1
    run_values(f, [1, 0], x12, dynamic=True)  # (a new xjit.jit scope: same cache, 2 more)
    assert counters()["compiles"] == 3


def test_bools_stay_specialized_floats_become_inputs() -> None:
    def f(x: torch.Tensor, flag: bool) -> torch.Tensor:
        return x * 2 if flag else x - 1

    run_values(f, [True, False, True, False], x12)
    assert counters()["compiles"] == 2

    def g(x: torch.Tensor, s: float) -> torch.Tensor:
        return x * s

    # A float is a graph input after its first change (test_float_inputs.py).
    run_values(g, [0.5, 2.5, 3.5, 2.5], x12)
    assert counters()["compiles"] == 4  # 2 + 2


def test_int_in_a_list_argument() -> None:
    def f(x: torch.Tensor, bounds: list[int]) -> torch.Tensor:
        lo, hi = bounds
        return x[:, lo:hi] + hi

    run_values(f, [[1, 3], [1, 5], [1, 7], [1, 9]], x12)
    assert counters()["compiles"] == 2


def test_module_int_attribute_stays_static_with_dynamic_true() -> None:
    class M(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.k = 3

        def forward(self, x: torch.Tensor, n: int) -> torch.Tensor:
            return x[:, : self.k] * n

    m = M()
    compiled = xjit.jit(m, dynamic=True)
    for n in (2, 5, 9):
        torch.testing.assert_close(compiled(x12(), n), m(x12(), n))
    assert counters()["compiles"] == 1
    guards = fe.events()["graphs"][0]["guards"]
    assert any("L['self'].k == 3" in g for g in guards), guards


def test_counter_attribute_the_frame_increments() -> None:
    # self.step += 1 at every call: the int changes, so after one recompile it is symbolic and
    # the new value is stored back as a Python int (a graph output), as eager does.
    class Counter(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.step = 2

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            self.step += 1
            return x[: self.step] * self.step

    m, ref = Counter(), Counter()
    compiled = xjit.jit(m)
    with warnings.catch_warnings():
        warnings.simplefilter("error", xjit.XjitWarning)
        for _ in range(6):
            torch.testing.assert_close(compiled(torch.ones(12)), ref(torch.ones(12)))
            assert type(m.step) is int and m.step == ref.step
    assert counters()["compiles"] == 2


def test_int_attribute_of_a_plain_object() -> None:
    class Cfg:
        def __init__(self, n: int) -> None:
            self.n = n

    def f(x: torch.Tensor, cfg: Cfg) -> torch.Tensor:
        return x[:, : cfg.n] * cfg.n

    run_values(f, [Cfg(3), Cfg(4), Cfg(7), Cfg(5)], x12)
    assert counters()["compiles"] == 2
