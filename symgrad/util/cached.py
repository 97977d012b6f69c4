"""``cached_property`` as Python 3.12 has it, for 3.11: the value computed on first use and kept in the
instance, with no lock. Python 3.11's holds one lock per class attribute while the value is computed: a
function's compile (``Trace.compiled``) in one thread held up every other thread's first call, and a
process forked meanwhile kept that lock held in the child, whose first call then waited for ever."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Generic, TypeVar

T = TypeVar("T")


class cached_property(Generic[T]):  # noqa: N801 (named as the functools one it stands in for)
    """A property computed once per instance (two threads asking at once may both compute it; both get
    the value stored first).

    >>> class Circle:
    ...     def __init__(self, r):
    ...         self.r = r
    ...     @cached_property
    ...     def area(self):
    ...         print("computed")
    ...         return 3.14159 * self.r ** 2
    >>> c = Circle(2.0)
    >>> round(c.area, 3)
    computed
    12.566
    >>> round(c.area, 3)
    12.566
    """

    def __init__(self, fn: Callable[[Any], T]) -> None:
        self.fn, self.name, self.__doc__ = fn, fn.__name__, fn.__doc__

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    def __get__(self, instance: Any, owner: type | None = None) -> Any:
        if instance is None:
            return self
        return instance.__dict__.setdefault(self.name, self.fn(instance))
