"""A fusion whose outputs share values (an unrolled recurrence: each state is an output and the
next state's operand, as Mamba's selective scan written as a Python loop) computes each shared
value once per element: the stores of one loop body share the code generator's values
(src/backend/llvm_codegen.cpp `stmts`), where each output used to recompute its whole
expression (T outputs: ~T^2/2 multiplications; Mamba's scan kernel 2.6 -> 0.5 ms)."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
from xjit import ir  # noqa: E402

STEPS = 16
SHAPE = [4, 64]


def _recurrence_graph(in_place: bool) -> str:
    t = f"f32[{SHAPE[0]},{SHAPE[1]}]"
    args = ", ".join(f"%a{i}: {t}, %b{i}: {t}" for i in range(STEPS))
    lines, outs = [], []
    h = "%h"
    for i in range(STEPS):
        lines.append(f"  %m{i} = mul({h}, %a{i}) : {t}")
        lines.append(f"  %s{i} = add(%m{i}, %b{i}) : {t}")
        h = f"%s{i}"
        outs.append(h)
    if in_place:  # the first input overwritten too: the kernel computes in place of %h
        lines.append(f"  %w = mul(%h, %h) : {t}")
        outs.append("%w")
    results = ", ".join([t] * len(outs))
    body = "\n".join(lines)
    return f"graph @f(%h: {t}, {args}) -> ({results}) {{\n{body}\n  return({', '.join(outs)})\n}}"


@pytest.mark.parametrize("in_place", [False, True])
def test_shared_states_computed_once(in_place: bool) -> None:
    g = torch.Generator().manual_seed(7)
    h = torch.randn(SHAPE, generator=g)
    ab = [torch.randn(SHAPE, generator=g) for _ in range(2 * STEPS)]
    cg = ir.compile(ir.parse(_recurrence_graph(in_place)), keep_text=True)
    got = cg.run([h, *ab], framework="torch")
    want, state = [], h
    for i in range(STEPS):
        state = state * ab[2 * i] + ab[2 * i + 1]
        want.append(state)
    if in_place:
        want.append(h * h)
    assert len(got) == len(want)
    for x, y in zip(got, want):
        torch.testing.assert_close(torch.as_tensor(x), y, rtol=0, atol=0)  # same operations, same order
    llvm = [text for name, text in cg.dump_files() if name.endswith(".ll")]
    assert llvm, [name for name, _ in cg.dump_files()]
    fmuls = sum(text.count(" fmul ") for text in llvm)
    # Once per step per code path (vector body, remainder): a few times STEPS, against
    # STEPS * (STEPS + 1) / 2 per path when each output recomputed its chain.
    assert fmuls <= 4 * (STEPS + 1), fmuls
