"""Frozen dataclass instances built from a dict of their fields, for the per-request path.

A frozen dataclass's generated ``__init__`` sets every field through ``object.__setattr__``
(the class forbids plain assignment): ~0.1 us a field, so a 21-field breakdown costs ~2.4 us
to build, more than most of the model's arithmetic. ``from_fields`` gives the instance its
attribute dict in one step instead (~0.25 us), as pydantic builds its models. The instance is
the same as the constructor's (equal, hashable alike, still frozen: assignment raises).

It suits classes without ``__slots__`` or ``__post_init__`` whose caller holds every field by
name; ``tests/pdroute_core/test_frozen.py`` checks each class it builds against its
constructor.
"""

from __future__ import annotations

from typing import Any, TypeVar

T = TypeVar("T")

_new = object.__new__
_set = object.__setattr__


# A speed exception, kept because it pays: a tenth of the constructor's cost per breakdown.
def from_fields(cls: type[T], values: dict[str, Any]) -> T:
    """An instance of the frozen dataclass ``cls`` whose fields are ``values`` (every field, in
    field order, nothing else). ``values`` becomes the instance's dict: do not change it after."""
    obj: T = _new(cls)
    _set(obj, "__dict__", values)
    return obj
