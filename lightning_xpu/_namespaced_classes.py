"""Subclasses of Lightning classes built once per Lightning package, and picklable.

`lightning.pytorch`, `pytorch_lightning`, `lightning.fabric` and `lightning_fabric` have distinct base classes, so
our subclasses are made at run time with `type()`. Pickle (the `ddp_spawn` launcher pickles the Trainer with its
accelerator and plugins) normally stores an instance's class as "module + qualified name", which cannot tell the
packages apart. So each class built here registers a reducer (`copyreg`) that stores (owning module, class name,
package) instead, and a process that has not built the class yet (a spawned worker) rebuilds it from those. The
class keeps its plain name (`XPUAccelerator`), which is what Lightning shows users in its messages.
"""

from __future__ import annotations

import copyreg
import importlib
from collections.abc import Callable
from typing import Any

# The Lightning packages a class may be built for; nothing else is imported through a pickled reference.
PACKAGES = ("lightning.pytorch", "pytorch_lightning", "lightning.fabric", "lightning_fabric")


class NamespacedClasses:
    """The classes of one module of ours: `name -> bases(package)` makers and the classes built from them.

    The owning module must keep the instance in a module attribute named `_CLASSES` (the unpickler looks there).
    """

    def __init__(self, module: str) -> None:
        self._module = module
        self._makers: dict[str, Callable[[str], tuple[type, ...]]] = {}
        self._attributes: dict[str, Callable[[str], dict[str, Any]]] = {}
        self._built: dict[tuple[str, str], type] = {}

    def define(
        self,
        name: str,
        bases: Callable[[str], tuple[type, ...]],
        attributes: Callable[[str], dict[str, Any]] | None = None,
    ) -> None:
        """`bases(package)` returns the bases of `name` for one Lightning package (e.g. our mixin + its class);
        `attributes(package)`, if given, extra class attributes (a docstring, constants)."""
        self._makers[name] = bases
        if attributes is not None:
            self._attributes[name] = attributes

    def get(self, name: str, package: str) -> type:
        if package not in PACKAGES:
            raise ValueError(f"not a Lightning package: {package!r} (expected one of {', '.join(PACKAGES)})")
        key = (name, package)
        if key not in self._built:
            namespace = {"__module__": self._module, "_lightning_package": package}
            namespace.update(self._attributes.get(name, lambda _: {})(package))
            cls = type(name, self._makers[name](package), namespace)
            copyreg.pickle(cls, _reducer(self._module, name, package))
            self._built[key] = cls
        return self._built[key]


def _reducer(module: str, name: str, package: str) -> Callable[[Any], tuple[Any, ...]]:
    def reduce(instance: Any) -> tuple[Any, ...]:
        # A class may shape its state with __getstate__/__setstate__ (pickle calls __setstate__ when present).
        getstate = getattr(type(instance), "__getstate__", None)
        state = getstate(instance) if getstate is not None else instance.__dict__
        return _rebuild, (module, name, package), state

    return reduce


def _rebuild(module: str, name: str, package: str) -> Any:
    """Unpickling: an empty instance of the class; pickle then restores its `__dict__`."""
    if package not in PACKAGES or not module.startswith("lightning_xpu."):
        raise ValueError(f"refusing to rebuild {module}.{name} for {package!r}")
    cls = importlib.import_module(module)._CLASSES.get(name, package)
    return cls.__new__(cls)
