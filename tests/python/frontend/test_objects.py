"""Objects and Python state that a corpus case cannot check (state shared between the eager and
the compiled run): class attributes changed by the captured code between calls."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
fe = pytest.importorskip("xjit._frontend")
import xjit  # noqa: E402


class Counted:
    made = 0

    def __init__(self):
        type(self).made += 1  # a class attribute: read through the class, not a constant
        self.index = self.made


def make_one(x):
    c = Counted()
    return x * c.index


def bump(obj, x):
    type(obj).made += 1
    return x + obj.made


@pytest.fixture(autouse=True)
def clean():
    fe.reset()
    Counted.made = 0
    yield
    fe.reset()


def test_class_counter_of_objects_made_in_the_frame() -> None:
    compiled = xjit.jit(make_one, backend="interp")
    x = torch.ones(2)
    with torch.no_grad():
        for i in range(1, 4):
            torch.testing.assert_close(compiled(x), x * i)
            assert Counted.made == i


def test_class_attribute_assigned_through_type_of_an_argument() -> None:
    compiled = xjit.jit(bump, backend="interp")
    obj, x = Counted.__new__(Counted), torch.zeros(2)
    with torch.no_grad():
        for i in range(1, 4):
            torch.testing.assert_close(compiled(obj, x), x + i)
            assert Counted.made == i


# ---- an object made in the frame that is both stored and returned: one object ----------------


class Record:
    def __init__(self, value, step):
        self.value = value
        self.step = step
        self.history = [step]


class Tracker:
    """A plain object the caller holds; the compiled frame stores a new Record on it."""

    def __init__(self):
        self.last = None
        self.log = []


SEEN = []


def record_on_attribute(tracker, x):
    r = Record(x * 2, 1)
    tracker.last = r
    r.value = r.value + 1  # after the store: the stored object sees it too
    r.history.append(2)
    return r


def record_in_list_and_global(tracker, x):
    global LAST_RECORD
    r = Record(x.sin(), 3)
    tracker.log.append(r)
    SEEN.append(r)
    LAST_RECORD = r
    return r, r, {"again": r}


LAST_RECORD = None


def _run_twice(fn, *args):
    compiled = xjit.jit(fn, backend="interp")
    with torch.no_grad():
        first = compiled(*args)
        second = compiled(*args)
    return first, second


def test_object_stored_on_an_attribute_and_returned_is_one_object() -> None:
    fe.set_recording(True)
    x = torch.randn(3)
    want_tracker = Tracker()
    want = record_on_attribute(want_tracker, x)
    tracker = Tracker()
    first, second = _run_twice(record_on_attribute, tracker, x)
    ev = fe.events()
    assert len(ev["graphs"]) == 1 and not ev["breaks"], ev["breaks"]
    assert ev["counters"]["cache_hits"] >= 1
    for out in (first, second):
        assert type(out) is Record
        torch.testing.assert_close(out.value, want.value)
        assert out.step == want.step and out.history == want.history == [1, 2]
    assert tracker.last is second and first is not second  # a new object per call, as in Python
    assert list(vars(tracker.last)) == list(vars(want_tracker.last))


def test_object_appended_to_a_list_set_as_a_global_and_returned_twice() -> None:
    # (The lists start empty on both calls: their lengths are guarded, docs/frontend.md.)
    fe.set_recording(True)
    x = torch.randn(4)
    compiled = xjit.jit(record_in_list_and_global, backend="interp")
    for call in range(2):
        SEEN.clear()
        tracker = Tracker()
        with torch.no_grad():
            a, b, d = compiled(tracker, x)
        assert type(a) is Record and a is b is d["again"]
        assert tracker.log[0] is a and SEEN[0] is a and LAST_RECORD is a
        assert len(tracker.log) == len(SEEN) == 1
        torch.testing.assert_close(a.value, x.sin())
        assert a.step == 3 and a.history == [3]
    ev = fe.events()
    assert len(ev["graphs"]) == 1 and not ev["breaks"], ev["breaks"]
    assert ev["counters"]["cache_hits"] >= 1
