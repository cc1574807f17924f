"""Wrapping Lightning callables: the original always runs first or instead only where it cannot work on XPU.

Every patch goes through `wrap`, which keeps the original, is idempotent, copes with staticmethod/classmethod
descriptors, and records what it did so tests can list (and undo) the patches.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

_MARK = "__lightning_xpu_original__"


@dataclass(frozen=True)
class Patch:
    owner: Any
    name: str
    original: Any  # the attribute as stored on the owner (may be a staticmethod/classmethod object)


_applied: list[Patch] = []


def wrap(owner: Any, name: str, make_wrapper: Callable[[Callable[..., Any]], Callable[..., Any]]) -> bool:
    """Replace `owner.name` by `make_wrapper(original_function)`; keep the descriptor kind.

    Returns False (and changes nothing) when `owner` has no such attribute or it is already wrapped, so one patch
    can be written for every Lightning version and applied any number of times.
    """
    try:
        stored = inspect.getattr_static(owner, name)
    except AttributeError:
        return False
    if isinstance(stored, (staticmethod, classmethod)):
        function = stored.__func__
    else:
        function = stored
    if getattr(function, _MARK, None) is not None:
        return False
    wrapper = functools.wraps(function)(make_wrapper(function))
    setattr(wrapper, _MARK, function)
    if isinstance(stored, staticmethod):
        setattr(owner, name, staticmethod(wrapper))
    elif isinstance(stored, classmethod):
        setattr(owner, name, classmethod(wrapper))
    else:
        setattr(owner, name, wrapper)
    _applied.append(Patch(owner, name, stored))
    return True


def is_wrapped(owner: Any, name: str) -> bool:
    stored = inspect.getattr_static(owner, name, None)
    function = getattr(stored, "__func__", stored)
    return getattr(function, _MARK, None) is not None


def applied() -> tuple[Patch, ...]:
    return tuple(_applied)


def original_of(owner: Any, name: str) -> Callable[..., Any]:
    """The unpatched function behind `owner.name` (tests use it to show what Lightning alone would do)."""
    stored = inspect.getattr_static(owner, name)
    function = getattr(stored, "__func__", stored)
    return getattr(function, _MARK, function)
