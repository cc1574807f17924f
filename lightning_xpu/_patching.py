"""Wrapping Lightning callables: the original always runs first or instead only where it cannot work on XPU.

Every patch goes through `wrap`, which keeps the original, is idempotent, copes with staticmethod/classmethod
descriptors, and records what it did, or why it could not, as an `Outcome`. Nothing is silent: a target that is
missing is recorded, and `lightning_xpu.versions` compares the outcomes with the patch manifest when an XPU
accelerator is first selected (and for `python -m lightning_xpu.versions`).

Patches are named below the Lightning package, the same for both namespaces: `pytorch.<module>[.<Class>]` for
`lightning.pytorch`/`pytorch_lightning`, `fabric.<module>[.<Class>]` for `lightning.fabric`/`lightning_fabric`.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from lightning_xpu._namespaced_classes import PACKAGES

_MARK = "__lightning_xpu_original__"


@dataclass(frozen=True)
class Patch:
    owner: Any
    name: str
    original: Any  # the attribute as stored on the owner (may be a staticmethod/classmethod object)


@dataclass(frozen=True)
class Outcome:
    """What one `wrap` call did in one Lightning package."""

    owner: str  # "pytorch.trainer.setup", "fabric.connector._Connector": the same in both namespaces
    name: str  # the attribute wrapped
    package: str  # the Lightning package it was looked for in ("lightning.pytorch", "lightning_fabric", ...)
    applied: bool
    by: str  # the lightning_xpu module that asked for it
    detail: str = ""


_applied: list[Patch] = []
_outcomes: dict[tuple[str, str, str], Outcome] = {}
_by: list[str] = []


@contextlib.contextmanager
def patching_by(module: str) -> Iterator[None]:
    """Outcomes recorded inside name `module` as the one that asked (set by `_apply` around each patch module)."""
    _by.append(module)
    try:
        yield
    finally:
        _by.pop()


def qualified_name(owner: Any) -> str:
    """`lightning.pytorch.trainer.setup` for a module, `<module>.<qualname>` for a class."""
    if inspect.ismodule(owner):
        return owner.__name__
    return f"{owner.__module__}.{owner.__qualname__}"


def split_owner(qualified: str) -> tuple[str, str]:
    """("lightning.pytorch", "pytorch.trainer.setup") from "lightning.pytorch.trainer.setup"."""
    for package in sorted(PACKAGES, key=len, reverse=True):
        if qualified == package or qualified.startswith(package + "."):
            side = "pytorch" if package in ("lightning.pytorch", "pytorch_lightning") else "fabric"
            return package, side + qualified[len(package):]
    return "", qualified


def record(qualified_owner: str, name: str, applied: bool | None, detail: str = "") -> None:
    """Record an outcome; `applied=None`: the target was wrapped already. The first outcome of a target wins."""
    package, owner = split_owner(qualified_owner)
    key = (package, owner, name)
    by = _by[-1] if _by else ""
    previous = _outcomes.get(key)
    if previous is None:
        _outcomes[key] = Outcome(owner, name, package, applied is not False, by, detail)
    elif applied is None and by and previous.by and previous.by != by:
        # Two of our modules wrapping one target: the second one's wrapper would silently not run.
        _outcomes[(package, owner, f"{name} (from {by})")] = Outcome(
            owner, name, package, False, by, f"already wrapped by {previous.by}"
        )


def wrap(owner: Any, name: str, make_wrapper: Callable[[Callable[..., Any]], Callable[..., Any]]) -> bool:
    """Replace `owner.name` by `make_wrapper(original_function)`; keep the descriptor kind.

    Returns False (and changes nothing) when `owner` has no such attribute (recorded as a missing target) or it is
    already wrapped, so one patch can be written for every Lightning version and applied any number of times.
    """
    try:
        stored = inspect.getattr_static(owner, name)
    except AttributeError:
        record(qualified_name(owner), name, False, f"{qualified_name(owner)} has no attribute {name!r}")
        return False
    if isinstance(stored, (staticmethod, classmethod)):
        function = stored.__func__
    else:
        function = stored
    if getattr(function, _MARK, None) is not None:
        record(qualified_name(owner), name, None)
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
    record(qualified_name(owner), name, True)
    return True


def is_wrapped(owner: Any, name: str) -> bool:
    stored = inspect.getattr_static(owner, name, None)
    function = getattr(stored, "__func__", stored)
    return getattr(function, _MARK, None) is not None


def applied() -> tuple[Patch, ...]:
    return tuple(_applied)


def outcomes() -> tuple[Outcome, ...]:
    return tuple(_outcomes.values())


def original_of(owner: Any, name: str) -> Callable[..., Any]:
    """The unpatched function behind `owner.name` (tests use it to show what Lightning alone would do)."""
    stored = inspect.getattr_static(owner, name)
    function = getattr(stored, "__func__", stored)
    return getattr(function, _MARK, function)
