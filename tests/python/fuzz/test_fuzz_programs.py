"""A fixed range of seeds of the differential program fuzzer (python -m fuzz runs many more):
each generated program must give eager's results, dtypes, shapes and mutated inputs under
xjit.jit, static and dynamic, with no internal-error warning; with its floating inputs requiring
grad ("grad" mode), eager's outputs, requires_grad flags and gradients. Stride-only differences are not
checked here (output strides are being made to follow eager's separately)."""

from __future__ import annotations

import os

import pytest

pytest.importorskip("xjit._frontend")

from .differential import check, serious  # noqa: E402
from .programs import generate  # noqa: E402

# Seeds known to hit a bug not fixed yet: seed -> the finding's first words. Remove an entry
# when its bug is fixed (the test then checks the seed like any other).
KNOWN: dict[int, str] = {}
KNOWN_GRAD: dict[int, str] = {}  # the same for grad mode

N_SEEDS = int(os.environ.get("XJIT_FUZZ_SEEDS", "80"))


@pytest.mark.parametrize("chunk", range(4))
def test_generated_programs_match_eager(chunk: int) -> None:
    failures = []
    for seed in range(chunk, N_SEEDS, 4):
        if seed in KNOWN:
            continue
        prog = generate(seed)
        src = prog.source()
        for f in serious(check(src, prog)):
            failures.append(f"seed {seed} ({f.mode}, B={f.batch}): {f.kind}: {f.detail}\n{src}")
    assert not failures, "\n\n".join(failures[:3])


@pytest.mark.parametrize("chunk", range(2))
def test_generated_programs_train_like_eager(chunk: int) -> None:
    failures = []
    for seed in range(chunk, N_SEEDS, 2):
        prog = generate(seed)
        src = prog.source()
        found = serious(check(src, prog, ("grad",)))
        if seed in KNOWN_GRAD:
            assert found, f"seed {seed} passes now: remove it from KNOWN_GRAD"
            continue
        for f in found:
            failures.append(f"seed {seed} (B={f.batch}): {f.kind}: {f.detail}\n{src}")
    assert not failures, "\n\n".join(failures[:3])


def test_generator_is_deterministic() -> None:
    assert generate(7).source() == generate(7).source()
    assert generate(7).source() != generate(8).source()
