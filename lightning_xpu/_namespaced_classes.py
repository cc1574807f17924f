"""Subclasses of Lightning classes built once per Lightning package, findable by name for pickle.

`lightning.pytorch`, `pytorch_lightning`, `lightning.fabric` and `lightning_fabric` have distinct base classes, so
our subclasses are made at run time with `type()`. Pickle (the `ddp_spawn` launcher pickles the Trainer with its
plugins) stores a class as "module + qualified name". Each class built here gets a qualified name that encodes the
package of its base (`XPUMixedPrecision__lightning__pytorch`), and the owning module's `__getattr__` rebuilds the
class from that name in a process that has not built it yet (a spawned worker).
"""

from __future__ import annotations

from collections.abc import Callable

# The Lightning packages a class may be built for; nothing else is imported through a pickled name.
PACKAGES = ("lightning.pytorch", "pytorch_lightning", "lightning.fabric", "lightning_fabric")
_SEPARATOR = "__"


class NamespacedClasses:
    """The classes of one module of ours: `name -> bases(package)` makers and the classes built from them."""

    def __init__(self, module: str) -> None:
        self._module = module
        self._makers: dict[str, Callable[[str], tuple[type, ...]]] = {}
        self._built: dict[str, type] = {}

    def define(self, name: str, bases: Callable[[str], tuple[type, ...]]) -> None:
        """`bases(package)` returns the bases of `name` for one Lightning package (e.g. our mixin + its class)."""
        self._makers[name] = bases

    def get(self, name: str, package: str) -> type:
        if package not in PACKAGES:
            raise ValueError(f"not a Lightning package: {package!r} (expected one of {', '.join(PACKAGES)})")
        qualname = name + _SEPARATOR + package.replace(".", _SEPARATOR)
        if qualname not in self._built:
            namespace = {"__module__": self._module, "__qualname__": qualname, "_lightning_package": package}
            self._built[qualname] = type(name, self._makers[name](package), namespace)
        return self._built[qualname]

    def resolve(self, qualname: str) -> type:
        """For the owning module's `__getattr__`: the class a pickled qualified name refers to."""
        name, _, encoded = qualname.partition(_SEPARATOR)
        package = encoded.replace(_SEPARATOR, ".")
        if name not in self._makers or package not in PACKAGES:
            raise AttributeError(f"module {self._module!r} has no attribute {qualname!r}")
        return self.get(name, package)
