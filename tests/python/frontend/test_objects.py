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
