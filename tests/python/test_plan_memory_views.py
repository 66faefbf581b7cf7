"""plan-memory and reshapes that the runtime runs as views: a reshape of an expanded tensor
([1,1,4,S,D] -> [1,4,S,D], multi-query attention's repeat_kv) is a view at run time although
plan-memory plans it as a copy of a strided value. The expanded value's buffer must stay alive
while the reshape's result is used; it died at the reshape, and a later result overwrote it
(Gemma with one key/value head gave rel. error 0.14 vs eager; BLOOM 1.1). Values are compared
with the reference interpreter, which runs no memory plan."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
ir = pytest.importorskip("xjit.ir")

# %v dies at the reshape if the reshape is taken for a copy; %n and %s, computed after it, are
# the same size and would take %v's slot before %m reads %v through %r.
REPEAT_KV = """
graph @f(%q: f32[1,4,8,16], %k: f32[1,1,8,16]) -> (f32[1,4,8,16]) {
  %v = exp(%k) : f32[1,1,8,16]
  %u = unsqueeze(%v) {dim = 2} : f32[1,1,1,8,16]
  %e = expand(%u) {shape = [1, 1, 4, 8, 16]} : f32[1,1,4,8,16]
  %r = reshape(%e) {shape = [1, 4, 8, 16]} : f32[1,4,8,16]
  %n = neg(%k) : f32[1,1,8,16]
  %s = sin(%n) : f32[1,1,8,16]
  %a = add(%q, %s) : f32[1,4,8,16]
  %m = mul(%a, %r) : f32[1,4,8,16]
  return(%m)
}"""


@pytest.mark.parametrize("pipeline", [None, "plan-memory{in-place=false}", "plan-memory"])
def test_reshape_view_of_expanded_value_keeps_its_base_alive(pipeline: str | None) -> None:
    g = ir.parse(REPEAT_KV)
    q, k = torch.randn(1, 4, 8, 16), torch.randn(1, 1, 8, 16)
    (ref,) = ir.run(g, [q, k])
    torch.testing.assert_close(ref, (q + torch.sin(-k)) * torch.exp(k).expand(1, 4, 8, 16))
    compiled = ir.compile(g) if pipeline is None else ir.compile(g, pipeline=pipeline)
    # Planned as a copy into a slot (the runtime's CopyInto), a view at run time.
    assert compiled.stats["planned_copies"] == 1
    for _ in range(2):
        (out,) = compiled.run([q, k])
        torch.testing.assert_close(out, ref, rtol=1e-6, atol=1e-6)
