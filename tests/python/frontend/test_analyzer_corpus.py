"""The analyzer corpus (corpus/*.py) through the frame hook: each case runs eagerly and compiled
(backend "interp": the captured graph in the reference interpreter) on copies of the same
inputs; outputs and input mutations must match, the first call must compile the expected number
of graphs and record the expected graph breaks, and a second call must hit the cache."""

from __future__ import annotations

import copy
import dataclasses
import functools
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
fe = pytest.importorskip("xjit._frontend")
import xjit  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from corpus import Case, all_cases  # noqa: E402

CASES = all_cases()


def assert_same(got, want, case: Case, path: str = "result") -> None:
    if isinstance(want, torch.Tensor):
        assert isinstance(got, torch.Tensor), f"{path}: {type(got).__name__}, expected a tensor"
        assert got.dtype == want.dtype, f"{path}: dtype {got.dtype} != {want.dtype}"
        assert got.shape == want.shape, f"{path}: shape {tuple(got.shape)} != {tuple(want.shape)}"
        if want.dtype.is_floating_point:
            torch.testing.assert_close(got, want, rtol=case.rtol, atol=case.atol, msg=path)
        else:
            assert torch.equal(got, want), f"{path}: values differ"
    elif isinstance(want, torch.nn.Module):
        gs, ws = got.state_dict(), want.state_dict()
        assert gs.keys() == ws.keys(), f"{path}: state_dict keys differ"
        for k in ws:
            assert_same(gs[k], ws[k], case, f"{path}.{k}")
    elif isinstance(want, (tuple, list)):
        assert type(got) is type(want), f"{path}: {type(got).__name__} != {type(want).__name__}"
        assert len(got) == len(want), f"{path}: length {len(got)} != {len(want)}"
        for i, (g, w) in enumerate(zip(got, want)):
            assert_same(g, w, case, f"{path}[{i}]")
    elif dataclasses.is_dataclass(want) and not isinstance(want, type):
        assert type(got) is type(want), f"{path}: {type(got).__name__} != {type(want).__name__}"
        for f in dataclasses.fields(want):
            assert_same(getattr(got, f.name), getattr(want, f.name), case, f"{path}.{f.name}")
    elif isinstance(want, functools.partial):
        assert isinstance(got, functools.partial) and got.func is want.func, (
            f"{path}: not the same partial")
        assert_same(got.args, want.args, case, f"{path}.args")
        assert_same(got.keywords, want.keywords, case, f"{path}.keywords")
    elif isinstance(want, (set, frozenset)):
        assert type(got) is type(want) and got == want, f"{path}: {got!r} != {want!r}"
    elif isinstance(want, dict):
        assert isinstance(got, dict) and got.keys() == want.keys(), f"{path}: dict keys differ"
        for k in want:
            assert_same(got[k], want[k], case, f"{path}[{k!r}]")
    elif (type(want).__eq__ is object.__eq__ and hasattr(want, "__dict__")
          and not callable(want) and type(want).__module__ != "builtins"):
        # Plain objects (compared by identity in Python): same class, same attributes.
        assert type(got) is type(want), f"{path}: {type(got).__name__} != {type(want).__name__}"
        assert_same(vars(got), vars(want), case, f"{path}.__dict__")
    else:
        assert got == want, f"{path}: {got!r} != {want!r}"


def call(case: Case, fn, args, kwargs):
    """Inference unless the case is about grad mode (the driver runs frames whose outputs need
    autograd in Python)."""
    if case.grad:
        return fn(*args, **kwargs)
    with torch.no_grad():
        return fn(*args, **kwargs)


def fresh(case: Case):
    torch.manual_seed(0)
    args = case.inputs()
    kwargs = case.kwargs()
    fn = case.fn
    return copy.deepcopy(fn) if isinstance(fn, torch.nn.Module) else fn, args, kwargs


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_corpus(case: Case) -> None:
    fe.reset()
    fe.set_recording(True)
    fn_e, args, kwargs = fresh(case)
    args_e, kwargs_e = copy.deepcopy(args), copy.deepcopy(kwargs)
    args_c, kwargs_c = copy.deepcopy(args), copy.deepcopy(kwargs)
    fn_c = copy.deepcopy(fn_e) if isinstance(fn_e, torch.nn.Module) else fn_e

    compiled = xjit.jit(fn_c, backend="interp", dynamic=case.dynamic)
    if case.raises:
        with pytest.raises(case.raises):
            call(case, fn_e, args_e, kwargs_e)
        with pytest.raises(case.raises):
            call(case, compiled, args_c, kwargs_c)
        want = got = None
    else:
        torch.manual_seed(1)
        want = call(case, fn_e, args_e, kwargs_e)
        torch.manual_seed(1)
        got = call(case, compiled, args_c, kwargs_c)
    ev = fe.events()
    breaks = [f"{b['reason']} ({b['file']}:{b['line']})" for b in ev["breaks"]]
    assert_same(got, want, case)
    assert_same(args_c, args_e, case, "inputs after the call")
    if isinstance(fn_e, torch.nn.Module):
        assert_same(fn_c, fn_e, case, "module state after the call")
    assert len(ev["breaks"]) == case.breaks, f"graph breaks: {breaks}"
    if case.reason:
        assert any(case.reason in b for b in breaks), f"no break mentions {case.reason!r}: {breaks}"
    assert len(ev["graphs"]) == case.graphs, f"graphs: {[g['ir'] for g in ev['graphs']]}; breaks: {breaks}"
    if case.graphs:
        ops = set()
        for g in ev["graphs"]:
            ops.update(g["ops"])
        for op in case.ops:
            assert op in ops, f"op {op} not in the graph: {sorted(ops)}"
        assert ("external_call" in ops) == case.fallback, f"fallback ops: {sorted(ops)}"

    # The second call with equal inputs reuses the compiled entries.
    hits = ev["counters"]["cache_hits"]
    if case.raises:
        return
    call(case, compiled, copy.deepcopy(args), copy.deepcopy(kwargs))
    ev2 = fe.events()
    if case.graphs:
        assert ev2["counters"]["cache_hits"] > hits, "the second call did not hit the cache"
    assert len(ev2["graphs"]) == len(ev["graphs"]), "the second call recompiled"

    # Other inputs: guards must send them to a new entry (or accept them, dynamic shapes).
    if case.second is not None:
        torch.manual_seed(0)
        args3 = case.second()
        torch.manual_seed(3)
        want3 = call(case, fn_e, copy.deepcopy(args3), copy.deepcopy(kwargs))
        torch.manual_seed(3)
        got3 = call(case, compiled, copy.deepcopy(args3), copy.deepcopy(kwargs))
        assert_same(got3, want3, case, "result of the call with other inputs")
        ev3 = fe.events()
        new = len(ev3["graphs"]) - len(ev2["graphs"])
        assert new == (1 if case.recompile else 0), (
            f"{new} new graphs for other inputs; recompiles: {ev3['recompiles']}")
