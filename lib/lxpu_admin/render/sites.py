"""Site profiles (recipes/sites/<site>.toml): scheduler headers, default prefix and variant, modules, the site
environment and per-site package-source overrides."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .envnames import KnownNames
from .errors import RecipeError
from .matrix import URL, Version
from .tomldata import Table, load_toml

SCHEDULERS = ("slurm", "pbs", "none")
SITE_VARIANTS = ("xpu", "cpu", "cuda", "auto")
ENV_MANAGERS = ("conda", "venv")
_SITE_NAME = re.compile(r"^[a-z0-9][a-z0-9_-]*$")
_MODULE = re.compile(r"^[A-Za-z0-9._+-]+(/[A-Za-z0-9._+-]+)*$")
# A prefix is absolute or starts with $HOME/ (the engine expands only a leading $HOME); no other expansion.
_PREFIX = re.compile(r"^(/|\$HOME/)[^$`\"'\\\n]*$")
# Characters a value may hold inside export NAME="${NAME:-value}": no quotes, $, `, \ or }
# (a } would end the ${...} expansion).
_ENV_VALUE = re.compile(r"^[A-Za-z0-9 _.,:;/=+@%*-]*$")
# Options that would pin a job to one project's allocation: never in the repository.
_ACCOUNT_OPTION = re.compile(r"^(--account\b|-A\b|--wckey\b)")


@dataclass(frozen=True)
class EnvSetting:
    name: str
    value: str
    source: str

    @property
    def export_line(self) -> str:
        return f'export {self.name}="${{{self.name}:-{self.value}}}"'


@dataclass(frozen=True)
class Headers:
    """Scheduler directives for one scheduler family (the text after `#SBATCH ` or `#PBS `)."""

    common: tuple[str, ...]
    install: tuple[str, ...]


@dataclass(frozen=True)
class Validation:
    """The site validation job (<prefix>/validate_lightning.sh, written by the install: lxpu_admin/install/tagfiles.py):
    its directives (after `#SBATCH ` or `#PBS `), the launchers its launched checks try, and how to submit it."""

    marker: str  # "#SBATCH" or "#PBS"
    directives: tuple[str, ...]
    launchers: tuple[str, ...]
    hint: str
    # The communication check's nominal link figures, Gbit/s (between nodes, between a node's devices), 0: none.
    link_gbps: float = 0.0
    node_link_gbps: float = 0.0

    def job_data(self) -> dict[str, Any]:
        """What lxpu_admin/install/tagfiles.py writes the job from (with the site's name and default prefix)."""
        return {
            "marker": self.marker,
            "directives": list(self.directives),
            "launchers": list(self.launchers),
            "hint": self.hint,
            **({"link_gbps": self.link_gbps} if self.link_gbps else {}),
            **({"node_link_gbps": self.node_link_gbps} if self.node_link_gbps else {}),
        }


@dataclass(frozen=True)
class Site:
    name: str
    file: str
    description: str
    scheduler: str
    default_variant: str
    default_prefix: str
    env_manager: str
    modules: tuple[str, ...]
    python_module: str  # the module providing Python for a venv ("" = Python from PATH)
    oneapi_modules: dict[str, str]  # site module -> the oneAPI year it brings (see the oneAPI rule)
    oneccl_modules: dict[str, str]  # site module -> the oneCCL version it brings (see the oneCCL rule)
    submit_hint: str
    headers: dict[str, Headers]
    env: tuple[EnvSetting, ...]
    source_urls: dict[str, str]
    validation: Validation
    raw: dict[str, Any]

    def submit(self, script: str) -> str:
        return self.submit_hint.replace("{script}", script)

    def modules_for(self, version: Version) -> tuple[list[str], list[str]]:
        """The oneAPI and oneCCL rules (recipes/matrix.toml): the site modules loaded with `version`, and one line
        per module left out because it brings another oneAPI year than the version's wheels bundle, or a oneCCL
        where they bundle their own."""
        kept, left_out = [], []
        for name in self.modules:
            year, oneccl = self.oneapi_modules.get(name), self.oneccl_modules.get(name)
            if year is not None and not version.admits_oneapi(year):
                bundled = version.oneapi_generation or "an unverified generation"
                left_out.append(
                    f"{name} (brings oneAPI {year}; the XPU wheels of PyTorch {version.minor} bundle oneAPI {bundled})"
                )
            elif oneccl is not None and version.bundles_oneccl:
                left_out.append(
                    f"{name} (brings oneCCL {oneccl}; the XPU wheels of PyTorch {version.minor} bundle their own)"
                )
            else:
                kept.append(name)
        return kept, left_out


# What a directive of each scheduler looks like: sbatch takes options (`--time=...`, `-N 1`); qsub takes only
# single-letter options (`-l select=1`, `-q debug`: PBS Pro's qsub has no long options).
_DIRECTIVE = {
    "slurm": re.compile(r"^-(-[a-z][a-z-]*(=.*)?|[A-Za-z]( .*|=.*)?)$"),
    "pbs": re.compile(r"^-[A-Za-z]( .*)?$"),
}
_DIRECTIVE_HINT = {
    "slurm": "an sbatch option such as --time=01:00:00",
    "pbs": "a qsub option such as -l walltime=01:00:00",
}


def _read_headers(table: Table, scheduler: str) -> dict[str, Headers]:
    """The job directives: only the site's own scheduler's (a slurm site's job carries no #PBS line; a site
    without a scheduler may carry one family, for users who submit the job anyway), each one an option of that
    scheduler's submit command."""
    headers = {}
    for kind, section in table.tables():
        if kind not in ("slurm", "pbs"):
            raise section.error(None, f"unknown scheduler '{kind}' (headers exist for: slurm, pbs)")
        if scheduler != "none" and kind != scheduler:
            raise section.error(
                None, f"a site with scheduler '{scheduler}' cannot have {kind} directives: remove [headers.{kind}] "
                "or change scheduler"
            )
        section.only({"common", "install"})
        lists = {key: _directives(section, key, kind) for key in ("common", "install")}
        headers[kind] = Headers(**lists)
    return headers


def _directives(section: Table, key: str, kind: str) -> tuple[str, ...]:
    """The list `key` of `section`, each one an option of `kind`'s submit command and none an account."""
    directives = tuple(section.texts(key, []))
    for directive in directives:
        if "\n" in directive or directive.lstrip().startswith("#"):
            raise section.error(key, f"'{directive}' must be one directive without '#'")
        if not _DIRECTIVE[kind].match(directive.strip()):
            raise section.error(key, f"'{directive}' is not a {kind} directive: write {_DIRECTIVE_HINT[kind]}")
        if _ACCOUNT_OPTION.match(directive.strip()):
            raise section.error(
                key, f"'{directive}' hard-codes an account: users give it when they submit the job"
            )
    return directives


VALIDATION_JOB = "validate_lightning.sh"
# The launchers the validation's launched checks know (lightning_xpu/validation/checks.py).
VALIDATION_LAUNCHERS = ("srun", "mpiexec")
# Every validation job's name and log, whatever the site: the site file gives only its resources.
_VALIDATION_NAMING = {
    "slurm": ("--job-name=lxpu-validate", "--output=lxpu-validate-%j.log"),
    "pbs": ("-N lxpu-validate", "-j oe"),
}
_MARKER = {"slurm": "#SBATCH", "pbs": "#PBS"}


def _read_validation(table: Table, scheduler: str, headers: dict[str, Headers], submit_hint: str) -> Validation:
    """[validation] (every key optional): `directives`, checked like the install job's against the site's
    scheduler (a site without one: its headers' family, else slurm), default the site's common directives;
    `launchers`, default mpiexec under PBS (PALS) and srun then mpiexec elsewhere; `hint`, default the site's
    submit_hint for this job; `link_gbps`/`node_link_gbps`, the nominal bandwidth (Gbit/s) between nodes and between
    a node's devices that the communication check compares with, and `link_source`, where they come from."""
    table.only({"directives", "launchers", "hint", "link_gbps", "node_link_gbps", "link_source"})
    kind = scheduler if scheduler != "none" else next(iter(headers), "slurm")
    if table.has("directives"):
        resources = _directives(table, "directives", kind)
    else:
        resources = headers[kind].common if kind in headers else ()
    launchers = tuple(table.texts("launchers", ["mpiexec"] if kind == "pbs" else list(VALIDATION_LAUNCHERS)))
    unknown = [name for name in launchers if name not in VALIDATION_LAUNCHERS]
    if unknown or not launchers:
        raise table.error("launchers", f"{launchers!r}: give one or more of {', '.join(VALIDATION_LAUNCHERS)}")
    # qsub passes a job's arguments with -F; sbatch and bash take them after the script.
    call = f'-F "--tag <tag>" {VALIDATION_JOB}' if kind == "pbs" else f"{VALIDATION_JOB} --tag <tag>"
    hint = table.text_or("hint", submit_hint.replace("{script}", call))
    if "\n" in hint:
        raise table.error("hint", "must be one line (it is a comment in the job)")
    links = [_link_figure(table, key) for key in ("link_gbps", "node_link_gbps")]
    if any(links) and not table.has("link_source"):
        raise table.error("link_source", "a link figure needs its source: link_source = \"<where it is stated>\"")
    return Validation(_MARKER[kind], _VALIDATION_NAMING[kind] + resources, launchers, hint, *links)


def _link_figure(table: Table, key: str) -> float:
    """A nominal link figure in Gbit/s (0 when not given)."""
    value = table.data.get(key, 0)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
        raise table.error(key, f"must be a positive number of Gbit/s, got {value!r}")
    return float(value)


def _read_env(table: Table, known: KnownNames) -> tuple[EnvSetting, ...]:
    settings = []
    for name, entry in table.tables():
        known.check(name, table.where(name))
        entry.only({"value", "source"})
        value = entry.any_text("value")
        if not _ENV_VALUE.match(value):
            raise entry.error(
                "value", f"'{value}' holds characters the site file cannot quote (\" $ ` \\ }})"
            )
        settings.append(EnvSetting(name, value, entry.text("source")))
    return tuple(settings)


def _read_source_urls(table: Table, source_names: set[str]) -> dict[str, str]:
    urls = {}
    for name in table.keys():
        if name not in source_names:
            raise table.error(
                name, f"unknown source (known in recipes/matrix.toml: {', '.join(sorted(source_names))})"
            )
        url = table.text(name)
        if not URL.match(url):
            raise table.error(name, f"'{url}' is not an http(s):// or file:// URL")
        urls[name] = url
    return urls


def _read_oneapi_modules(table: Table, modules: list[str]) -> tuple[dict[str, str], dict[str, str]]:
    """(module -> oneAPI year, module -> oneCCL version) of the site modules that bring oneAPI."""
    years, oneccl = {}, {}
    for name, entry in table.tables():
        if name not in modules:
            raise table.error(
                name, f"'{name}' is not one of this site's modules ({', '.join(modules) or 'none'})"
            )
        entry.only({"generation", "oneccl", "source"})
        year = entry.text("generation")
        if not re.match(r"^20[0-9]{2}$", year):
            raise entry.error("generation", f"'{year}' must be the oneAPI year the module brings, e.g. 2025")
        if entry.has("oneccl"):
            oneccl[name] = entry.text("oneccl")
            if not re.match(r"^20[0-9]{2}\.[0-9]+(\.[0-9]+)?$", oneccl[name]):
                raise entry.error("oneccl", f"'{oneccl[name]}' must be the oneCCL version the module brings, e.g."
                                  " 2021.15.0")
        entry.text("source")
        years[name] = year
    return years, oneccl


def load_site(path: Path, shown_as: str, known: KnownNames, source_names: set[str]) -> Site:
    name = path.stem
    root = Table(load_toml(path, shown_as), shown_as)
    if not _SITE_NAME.match(name):
        raise root.error(None, f"'{name}' is not a valid site name (lower case letters, digits, - and _)")
    root.only(
        {
            "description",
            "scheduler",
            "default_variant",
            "default_prefix",
            "prefix_source",
            "env_manager",
            "env_manager_source",
            "modules",
            "modules_source",
            "python_module",
            "oneapi_modules",
            "submit_hint",
            "headers",
            "env",
            "sources",
            "validation",
        }
    )
    scheduler = root.text("scheduler")
    if scheduler not in SCHEDULERS:
        raise root.error("scheduler", f"unknown scheduler '{scheduler}' (known: {', '.join(SCHEDULERS)})")
    variant = root.text("default_variant")
    if variant not in SITE_VARIANTS:
        raise root.error(
            "default_variant", f"unknown variant '{variant}' (known: {', '.join(SITE_VARIANTS)})"
        )
    prefix = root.text("default_prefix")
    if not _PREFIX.match(prefix):
        raise root.error("default_prefix", f"'{prefix}' must be an absolute path or start with $HOME/")
    manager = root.text("env_manager")
    if manager not in ENV_MANAGERS:
        raise root.error("env_manager", f"unknown environment manager '{manager}' (known: conda, venv)")
    modules = root.texts("modules")
    for module in modules:
        if not _MODULE.match(module):
            raise root.error("modules", f"'{module}' is not a module name")
    python_module = root.text_or("python_module", "")
    if python_module and not _MODULE.match(python_module):
        raise root.error("python_module", f"'{python_module}' is not a module name")
    for key in ("prefix_source", "env_manager_source", "modules_source"):
        root.text(key)
    hint = root.text("submit_hint")
    if "{script}" not in hint:
        raise root.error("submit_hint", "must contain {script} (replaced by the job script's name)")
    oneapi_modules, oneccl_modules = _read_oneapi_modules(root.table_or_empty("oneapi_modules"), modules)
    headers = _read_headers(root.table_or_empty("headers"), scheduler)
    if scheduler != "none" and scheduler not in headers:
        raise root.error("headers", f"a {scheduler} site needs a [headers.{scheduler}] table")
    return Site(
        name=name,
        file=shown_as,
        description=root.text("description"),
        scheduler=scheduler,
        default_variant=variant,
        default_prefix=prefix,
        env_manager=manager,
        modules=tuple(modules),
        python_module=python_module,
        oneapi_modules=oneapi_modules,
        oneccl_modules=oneccl_modules,
        submit_hint=hint,
        headers=headers,
        env=_read_env(root.table_or_empty("env"), known),
        source_urls=_read_source_urls(root.table_or_empty("sources"), source_names),
        validation=_read_validation(root.table_or_empty("validation"), scheduler, headers, hint),
        raw=root.data,
    )


def load_sites(directory: Path, shown_dir: str, known: KnownNames, source_names: set[str]) -> dict[str, Site]:
    paths = sorted(directory.glob("*.toml"))
    if not paths:
        raise RecipeError(f"{shown_dir}: no site profiles (*.toml)")
    return {path.stem: load_site(path, f"{shown_dir}/{path.name}", known, source_names) for path in paths}
