"""The version matrix (recipes/matrix.toml): PyTorch minor releases, their pins with sources, and variants."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.version import InvalidVersion
from packaging.version import Version as PepVersion

from ..install.tagfiles import (
    MODULEFILE_BODY,
    MODULEFILE_BODY_NAME,
    SETUP_LIBRARY,
    SETUP_LIBRARY_NAME,
    module_name,
    modulefile_name,
    setup_name,
)
from ..lockbind import LIGHTNING_PACKAGES
from .errors import RecipeError
from .lightning_range import check_lightning_pin
from .tomldata import Table, load_toml

VARIANT_NAMES = ("xpu", "cpu", "cuda")
BACKENDS = ("ccl", "xccl")
# Where each backend's XPU wheels carry their own oneCCL (the oneCCL rule, recipes/matrix.toml): a site module that
# brings oneCCL is never loaded with them.
BUNDLED_ONECCL = {
    "ccl": "the oneccl_bind_pt wheel's lib/ (intel/torch-ccl setup.py package_data@v2.5.0+xpu..v2.8.0+xpu)",
    "xccl": "the oneccl wheel the torch XPU wheel requires (intel/torch-xpu-ops .github/scripts/build.sh"
    "@release/2.8..release/2.13)",
}
_MINOR = re.compile(r"^[0-9]+\.[0-9]+$")
_PYTHON = re.compile(r"^3\.[0-9]+$")
_GENERATION = re.compile(r"^20[0-9]{2}$")
_DIST_NAME = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9._-]*[A-Za-z0-9])?$")
_LABEL = re.compile(r"^([a-z0-9]+(\.[a-z0-9]+)*)?$")
URL = re.compile(r"^(https?|file)://\S+$")


def tag_of(minor: str, variant: str) -> str:
    """The install tag: `<ver>` for the xpu variant, `<ver>-<variant>` otherwise (docs/architecture.md). The
    one place the rule lives: the install jobs get the tag and every name below as data."""
    return minor if variant == "xpu" else f"{minor}-{variant}"



@dataclass(frozen=True)
class TagNames:
    """Every name derived from a tag: in the repository, in an install prefix and for Lmod."""

    tag: str

    @property
    def module(self) -> str:
        return module_name(self.tag)

    @property
    def modulefile(self) -> str:
        """Relative to the repository, and to an install prefix."""
        return modulefile_name(self.tag)

    @property
    def setup(self) -> str:
        """The setup script's file name (in an install prefix)."""
        return setup_name(self.tag)

    @property
    def conda_env(self) -> str:
        return f"lightning-xpu-{self.tag}"

    # The shared code that the thin modulefile and setup script call (the same for every tag; the install job
    # copies it next to them).
    @property
    def modulefile_body(self) -> str:
        """The modulefile body, relative to the repository and to an install prefix."""
        return MODULEFILE_BODY

    @property
    def modulefile_body_name(self) -> str:
        return MODULEFILE_BODY_NAME

    @property
    def setup_library(self) -> str:
        """The setup scripts' library in the repository."""
        return SETUP_LIBRARY

    @property
    def setup_library_name(self) -> str:
        """Its file name in an install prefix, next to the setup scripts."""
        return SETUP_LIBRARY_NAME


def minor_key(minor: str) -> PepVersion:
    return PepVersion(minor)


@dataclass(frozen=True)
class Source:
    name: str
    url: str
    source: str


@dataclass(frozen=True)
class Pin:
    """One package of a recipe. An unverified pin has no version: pip and torch's metadata choose it."""

    name: str
    version: str
    source: str
    why: str
    labelled: bool

    @property
    def verified(self) -> bool:
        return not self.why

    def requirement(self, label: str) -> str:
        if not self.verified:
            return self.name
        version = self.version
        if self.labelled and label and "+" not in version:
            version = f"{version}+{label}"
        return f"{self.name}=={version}"


@dataclass(frozen=True)
class Variant:
    name: str
    description: str
    source: str
    sources: tuple[Source, ...]
    label: str
    pins: tuple[Pin, ...]
    omitted: tuple[str, ...]
    omit_why: str

    def requirements(self) -> list[str]:
        return [pin.requirement(self.label) for pin in self.pins]


@dataclass(frozen=True)
class Version:
    minor: str
    released: str
    python: str
    python_supported: str
    python_source: str
    backend: str
    backend_source: str
    oneapi_runtime: str
    oneapi_generation: str  # the year of the oneAPI runtime the XPU wheels bundle; "" when unverified
    oneapi_source: str
    oneapi_why: str
    notes: str
    variants: dict[str, Variant]
    raw: dict[str, Any]

    def pin(self, name: str) -> Pin:
        for variant in self.variants.values():
            for pin in variant.pins:
                if pin.name == name:
                    return pin
        raise KeyError(name)

    @property
    def torch(self) -> str:
        return self.pin("torch").version

    @property
    def lightning(self) -> str:
        return self.pin("lightning").version

    def tag(self, variant: str) -> str:
        return tag_of(self.minor, variant)

    def names(self, variant: str) -> TagNames:
        return TagNames(self.tag(variant))

    def admits_oneapi(self, generation: str) -> bool:
        """The oneAPI rule: a site module that brings oneAPI `generation` is loaded with this version only when
        its wheels bundle the same generation (never when that is unverified)."""
        return bool(self.oneapi_generation) and generation == self.oneapi_generation

    @property
    def bundles_oneccl(self) -> bool:
        """The oneCCL rule: this version's XPU wheels carry their own oneCCL (BUNDLED_ONECCL)."""
        return self.backend in BUNDLED_ONECCL

    def unverified(self) -> list[str]:
        """One line per fact of this entry that has no source."""
        lines = [f"oneAPI runtime: {self.oneapi_why}"] if self.oneapi_why else []
        seen: set[str] = set()
        for variant in self.variants.values():
            for pin in variant.pins:
                if not pin.verified and pin.name not in seen:
                    seen.add(pin.name)
                    lines.append(f"{pin.name}: {pin.why}")
        return lines


@dataclass(frozen=True)
class Discontinued:
    """A package upstream stopped releasing ([discontinued.<name>]): a recipe pinning it is legacy."""

    name: str
    short: str
    status: str
    last: str
    source: str

    def describe(self, pinned: str) -> str:
        return f"{self.short} {pinned} ({self.status}, last release {self.last})"


@dataclass(frozen=True)
class Matrix:
    file: str
    versions: dict[str, Version]
    sources: dict[str, Source]
    conda_channels: tuple[str, ...]
    conda_source: str
    tools: tuple[Pin, ...]  # install-time tools (the wheel build's setuptools), pinned for every recipe
    discontinued: dict[str, Discontinued]
    raw: dict[str, Any]

    def discontinued_pins(self, version: Version) -> list[str]:
        """What `version` pins that upstream discontinued, one description each (empty: not legacy)."""
        found: dict[str, str] = {}
        for variant in version.variants.values():
            for pin in variant.pins:
                if pin.name in self.discontinued and pin.name not in found:
                    found[pin.name] = self.discontinued[pin.name].describe(pin.version or "unpinned")
        return list(found.values())

    def newest_current(self) -> Version | None:
        """The newest version that pins nothing discontinued: where a legacy recipe's users should move."""
        current = [v for v in self.versions.values() if not self.discontinued_pins(v)]
        return current[-1] if current else None

    def legacy_line(self, version: Version) -> str:
        """The one line a legacy recipe's install job and module print; empty for a current recipe."""
        pins = self.discontinued_pins(version)
        if not pins:
            return ""
        newest = self.newest_current()
        move = f"move to the PyTorch {newest.minor} recipe" if newest else "no current recipe exists yet"
        return (
            f"lightning-xpu {version.minor} is a legacy recipe: its XPU build needs {' and '.join(pins)}; "
            f"it stays buildable, but {move}"
        )

    def known(self) -> str:
        return ", ".join(self.versions)

    def version(self, minor: str) -> Version:
        if minor not in self.versions:
            raise RecipeError(f"unknown PyTorch version '{minor}' (known: {self.known()})")
        return self.versions[minor]

    def hash_input(self, version: Version) -> dict[str, Any]:
        """The parts of the matrix one version's artifacts depend on (for LXPU_RECIPE_HASH)."""
        return {
            "schema": self.raw.get("schema"),
            "version": version.raw,
            "sources": self.raw.get("sources"),
            "variants": self.raw.get("variants"),
            "conda": self.raw.get("conda"),
            "tools": self.raw.get("tools"),
            "discontinued": self.raw.get("discontinued"),
        }


def _check_version_text(table: Table, key: str, text: str) -> None:
    try:
        PepVersion(text)
    except InvalidVersion:
        raise table.error(
            key, f"malformed version '{text}' (expected a PEP 440 version, e.g. 2.7.0)"
        ) from None


def _read_pin(name: str, table: Table, labelled: bool, required: bool) -> Pin:
    if not _DIST_NAME.match(name):
        raise table.error(None, f"'{name}' is not a valid package name")
    if not table.flag("verified", True):
        if required:
            raise table.error("verified", f"{name} must be pinned with a source (it cannot be left to pip)")
        table.only({"verified", "why"})
        return Pin(name, "", "", table.text("why"), labelled)
    table.only({"version", "source", "verified"})
    version = table.text("version")
    _check_version_text(table, "version", version)
    return Pin(name, version, table.text("source"), "", labelled)


def _read_pins(
    table: Table, labelled: list[str], omitted: list[str], required: tuple[str, ...], local_ok: str
) -> list[Pin]:
    """The pins of `table`. Local version labels (`+xpu`): the variant adds its own label to the packages it
    lists in `labelled`, so a pin never writes one there; any other pin may carry one only where `local_ok` is
    empty, i.e. in a variant's own pins whose sources include an index that is not PyPI (PyPI holds no local
    versions, PEP 440), such as IPEX's `2.5.10+xpu` from the Intel index."""
    pins = []
    for name, pin_table in table.tables():
        if name in omitted:
            continue
        pin = _read_pin(name, pin_table, name in labelled, name in required)
        local = PepVersion(pin.version).local if pin.verified else None
        if local and (pin.labelled or local_ok):
            why = "the variant adds its build label itself (`labelled`)" if pin.labelled else local_ok
            raise pin_table.error("version", f"'{pin.version}' carries a local label (+{local}): {why}")
        pins.append(pin)
    return pins


def _pin_lightning_together(pins: list[Pin], table: Table) -> list[Pin]:
    """`lightning`, `pytorch-lightning` and `lightning-fabric` are one release: `lightning` requires
    `pytorch-lightning` unpinned (lightning's wheel metadata), so the recipe pins it to the same version (added
    here when the recipe leaves it out); a recipe that pins them apart is refused."""
    lightning = next(pin for pin in pins if pin.name == "lightning")
    for pin in pins:
        if pin.name in LIGHTNING_PACKAGES and pin.version != lightning.version:
            raise table.error(
                pin.name,
                f"{pin.name} {pin.version or 'unpinned'} with lightning {lightning.version}: Lightning's packages "
                f"are one release, pin {pin.name} to {lightning.version} (or leave it out: it follows lightning)",
            )
    if any(pin.name == "pytorch-lightning" for pin in pins):
        return pins
    source = f"pinned with lightning ({lightning.source}): lightning's Requires-Dist names pytorch-lightning unpinned"
    follower = Pin("pytorch-lightning", lightning.version, source, "", False)
    at = pins.index(lightning) + 1
    return [*pins[:at], follower, *pins[at:]]


def _read_sources(root: Table) -> dict[str, Source]:
    sources = {}
    for name, table in root.table("sources").tables():
        table.only({"url", "source"})
        url = table.text("url")
        if not URL.match(url):
            raise table.error("url", f"'{url}' is not an http(s):// or file:// URL")
        sources[name] = Source(name, url, table.text("source"))
    return sources


def _source_list(table: Table, sources: dict[str, Source]) -> tuple[Source, ...]:
    names = table.texts("sources")
    if not names:
        raise table.error("sources", "needs at least one package source")
    for name in names:
        if name not in sources:
            raise table.error("sources", f"unknown source '{name}' (known: {', '.join(sources)})")
    return tuple(sources[name] for name in names)


def _read_variant(
    name: str, defaults: Table, override: Table, sources: dict[str, Source], version_pins: Table, minor: str
) -> Variant:
    """A variant of one version: the [variants.<name>] defaults, overridden by [versions."X.Y".<name>]."""
    override.only({"sources", "label", "labelled", "omit", "omit_why", "pins"})

    def pick(key: str) -> Table:
        return override if override.has(key) else defaults

    label = pick("label").any_text("label")
    if not _LABEL.match(label):
        raise pick("label").error("label", f"'{label}' is not a valid local version label (e.g. xpu, cpu)")
    labelled = pick("labelled").texts("labelled", [])
    omitted = pick("omit").texts("omit", [])
    omit_why = pick("omit_why").text("omit_why") if pick("omit_why").has("omit_why") else ""
    if omitted and not omit_why:
        raise pick("omit").error("omit", "omits packages without saying why: add omit_why")
    shared = "a pin shared by every variant has none: pin a labelled build under the variant's own pins"
    pins = _read_pins(version_pins, labelled, omitted, ("torch", "lightning"), shared)
    sources_of = _source_list(pick("sources"), sources)
    pypi_only = all(source.name == "pypi" for source in sources_of)
    no_local = "PyPI, this variant's only source, has no local versions" if pypi_only else ""
    pins += _read_pins(override.table_or_empty("pins"), labelled, [], (), no_local)
    names = [pin.name for pin in pins]
    for required in ("torch", "lightning"):
        if required not in names:
            raise version_pins.error(None, f"missing field '{required}'")
    torch = pins[names.index("torch")]
    if PepVersion(torch.version).release[:2] != PepVersion(minor).release[:2]:
        raise version_pins.error("torch", f"torch {torch.version} is not a {minor} release")
    pins = _pin_lightning_together(pins, version_pins)
    for pin in pins:
        if pin.verified:
            _check_version_text(version_pins, pin.name, pin.requirement(label).split("==", 1)[1])
        if pin.name in LIGHTNING_PACKAGES and pin.verified:
            check_lightning_pin(version_pins, pin.name, pin.version)
    return Variant(
        name=name,
        description=defaults.text("description"),
        source=defaults.text("source"),
        sources=sources_of,
        label=label,
        pins=tuple(pins),
        omitted=tuple(omitted),
        omit_why=omit_why,
    )


def _read_fact(table: Table, fields: tuple[str, ...], may_be_unverified: bool) -> tuple[dict[str, str], str]:
    """The fields of a sourced fact plus its source, or ({}, why) for a fact marked verified = false."""
    if not table.flag("verified", True):
        if not may_be_unverified:
            raise table.error("verified", "this fact is needed to render the recipe: give it with a source")
        table.only({"verified", "why"})
        return {}, table.text("why")
    table.only({*fields, "source", "verified"})
    values = {field: table.text(field) for field in fields}
    return {**values, "source": table.text("source")}, ""


def _read_version(
    minor: str, table: Table, variant_defaults: dict[str, Table], sources: dict[str, Source]
) -> Version:
    if not _MINOR.match(minor):
        raise table.error(None, f"malformed PyTorch version '{minor}' (expected MAJOR.MINOR, e.g. 2.7)")
    declared = table.texts("variants")
    for name in declared:
        if name not in variant_defaults:
            raise table.error("variants", f"unknown variant '{name}' (known: {', '.join(variant_defaults)})")
    if "xpu" not in declared:
        raise table.error("variants", "every version needs the xpu variant (the default)")
    table.only({"released", "variants", "python", "backend", "oneapi", "notes", "pins", *declared})
    python, _ = _read_fact(table.table("python"), ("version", "supported"), False)
    if not _PYTHON.match(python["version"]):
        raise table.error(
            "python", f"malformed Python version '{python['version']}' (expected 3.N, e.g. 3.11)"
        )
    try:
        supported = SpecifierSet(python["supported"])
    except InvalidSpecifier:
        raise table.error(
            "python", f"supported '{python['supported']}' is not a version range (e.g. >=3.10,<=3.14)"
        ) from None
    if python["version"] not in supported:
        raise table.error(
            "python", f"Python {python['version']} is outside torch's supported range {supported}: pick one inside it"
        )
    backend, _ = _read_fact(table.table("backend"), ("name",), False)
    if backend["name"] not in BACKENDS:
        raise table.error("backend", f"unknown backend '{backend['name']}' (known: {', '.join(BACKENDS)})")
    oneapi, oneapi_why = _read_fact(table.table("oneapi"), ("runtime", "generation"), True)
    if oneapi and not _GENERATION.match(oneapi["generation"]):
        raise table.error("oneapi", f"generation '{oneapi['generation']}' must be the oneAPI year, e.g. 2025")
    pins = table.table("pins")
    variants = {
        name: _read_variant(name, variant_defaults[name], table.table_or_empty(name), sources, pins, minor)
        for name in declared
    }
    return Version(
        minor=minor,
        released=table.text("released"),
        python=python["version"],
        python_supported=python["supported"],
        python_source=python["source"],
        backend=backend["name"],
        backend_source=backend["source"],
        oneapi_runtime=oneapi.get("runtime", ""),
        oneapi_generation=oneapi.get("generation", ""),
        oneapi_source=oneapi.get("source", ""),
        oneapi_why=oneapi_why,
        notes=table.text_or("notes", ""),
        variants=variants,
        raw=table.data,
    )


def load_matrix(path: Path, shown_as: str) -> Matrix:
    root = Table(load_toml(path, shown_as), shown_as)
    root.only({"schema", "sources", "conda", "tools", "discontinued", "variants", "versions"})
    if root.data.get("schema") != 1:
        raise root.error("schema", "must be 1 (the only schema this renderer reads)")
    sources = _read_sources(root)
    conda = root.table("conda")
    conda.only({"channels", "source"})
    tool_table = root.table("tools")
    every_tool = tuple(name for name, _ in tool_table.tables())
    tools = tuple(_read_pins(tool_table, [], [], every_tool, "install-time tools come from PyPI, which has none"))
    discontinued = {}
    for name, table in root.table_or_empty("discontinued").tables():
        table.only({"short", "status", "last", "source"})
        discontinued[name] = Discontinued(
            name, table.text("short"), table.text("status"), table.text("last"), table.text("source")
        )
    variant_defaults = {}
    for name, table in root.table("variants").tables():
        if name not in VARIANT_NAMES:
            raise table.error(None, f"unknown variant '{name}' (known: {', '.join(VARIANT_NAMES)})")
        table.only({"description", "source", "sources", "label", "labelled", "omit", "omit_why"})
        variant_defaults[name] = table
    versions = {}
    for minor, table in root.table("versions").tables():
        versions[minor] = _read_version(minor, table, variant_defaults, sources)
    if not versions:
        raise root.error("versions", "no version entries")
    ordered = dict(sorted(versions.items(), key=lambda item: minor_key(item[0])))
    return Matrix(
        file=shown_as,
        versions=ordered,
        sources=sources,
        conda_channels=tuple(conda.texts("channels")),
        conda_source=conda.text("source"),
        tools=tools,
        discontinued=discontinued,
        raw=root.data,
    )
