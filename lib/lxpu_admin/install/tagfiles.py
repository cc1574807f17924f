"""The per-tag entry points and the site validation job, written into an install prefix from the recipe's data.

A tag's modulefile (<prefix>/modulefiles/lightning-xpu/<tag>.lua) and setup script (<prefix>/lightning-setup-<tag>.sh)
are data only: they call the hand-written modulefile body and setup library that the install copies next to them.
Like EasyBuild's module generator (easybuild/tools/module_generator.py), the install writes them at install time,
so nothing per tag is committed. Each file is written to a temporary name and renamed: a reader sees the old file
or the new one, never half of one. Standard library only (it runs on the Python that builds the environment).
"""

from __future__ import annotations

import os
import shlex
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lxpu_admin import paths

# The code behind every thin modulefile and setup script, written by hand (a dot file: Lmod offers no module for
# it; in a prefix the library is hidden too, since users source the setup scripts). Their one home: the renderer
# and the engine import these names (the job data does not carry them).
MODULE_DIR = "modulefiles/lightning-xpu"
MODULEFILE_BODY_NAME = ".lightning-xpu.lua"
MODULEFILE_BODY = f"{MODULE_DIR}/{MODULEFILE_BODY_NAME}"  # in the repository, and in an install prefix
SETUP_LIBRARY = "scripts/common/setup/lightning-setup.lib.sh"  # in the repository
SETUP_LIBRARY_NAME = ".lightning-setup.lib.sh"  # in an install prefix
# The setup library's Python half (in the repository; in a prefix next to the library, which runs
# "${BASH_SOURCE[0]%.sh}.py"): the install writes both, from the same checkout.
SETUP_HELPER = "lib/lxpu_admin/envside/setup_lib.py"
SETUP_HELPER_NAME = SETUP_LIBRARY_NAME.removesuffix(".sh") + ".py"
VALIDATION_JOB = "validate_lightning.sh"
# The common validation script, copied next to the site's job (it is the code; the job only holds defaults).
VALIDATION_LIBRARY_NAME = ".validate_lightning.common.sh"
_REPOSITORY_VALIDATION = paths.REPOSITORY / "scripts" / "common" / "validate_lightning.sh"


class TagDataError(ValueError):
    """The recipe data lacks a field or has one of the wrong type (one line naming it)."""


@dataclass(frozen=True)
class TagData:
    """What a tag's modulefile and setup script hold: the recipe's per-variant data, nothing derived later."""

    tag: str
    minor: str
    torch: str
    lightning: str
    python: str
    variant: str
    backend: str
    notes: str
    siblings: tuple[str, ...]
    install_job: str
    variant_description: str
    body_contract: int  # the modulefile body's `local CONTRACT`; the modulefile refuses another body
    setup_contract: int  # the setup library's `local contract`; the setup script refuses another library
    legacy: str = ""

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any]) -> TagData:
        def text(key: str, default: str | None = None) -> str:
            value = data.get(key, default)
            if not isinstance(value, str) or (default is None and not value):
                raise TagDataError(f"tag data: '{key}' must be a non-empty string (got {value!r})")
            return value

        def number(key: str) -> int:
            value = data.get(key)
            if isinstance(value, bool) or not isinstance(value, (int, str)) or not str(value).isdigit():
                raise TagDataError(f"tag data: '{key}' must be a contract number (got {value!r})")
            return int(value)

        siblings = data.get("siblings")
        if not isinstance(siblings, (list, tuple)) or not all(isinstance(s, str) and s for s in siblings):
            raise TagDataError(f"tag data: 'siblings' must be a list of tags (got {siblings!r})")
        return cls(
            tag=text("tag"),
            minor=text("minor"),
            torch=text("torch"),
            lightning=text("lightning"),
            python=text("python"),
            variant=text("variant"),
            backend=text("backend"),
            notes=text("notes", ""),
            siblings=tuple(siblings),
            install_job=text("install_job"),
            variant_description=text("variant_description"),
            body_contract=number("body_contract"),
            setup_contract=number("setup_contract"),
            legacy=text("legacy", ""),
        )

    @property
    def module(self) -> str:
        return module_name(self.tag)

    @property
    def modulefile_name(self) -> str:
        return modulefile_name(self.tag)

    @property
    def setup_name(self) -> str:
        return setup_name(self.tag)


# The names of a tag's entry points, the one place for them (the renderer's TagNames reads them here too).
def module_name(tag: str) -> str:
    return f"lightning-xpu/{tag}"


def modulefile_name(tag: str) -> str:
    """Relative to the prefix (and to the repository)."""
    return f"{MODULE_DIR}/{tag}.lua"


def setup_name(tag: str) -> str:
    """Relative to the prefix."""
    return f"lightning-setup-{tag}.sh"


def lua_string(value: object) -> str:
    text = str(value)
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def modulefile_text(tag: TagData) -> str:
    """The thin modulefile: load the body next to it and hand it this tag's data. When the body does not load it
    shows Lua's own error (a syntax error in the body), not "missing"."""
    module = tag.module
    rerun = f"' is missing or unreadable: rerun {tag.install_job} --variant {tag.variant} --prefix '"
    fields = [
        f"  contract = {tag.body_contract},",
        f"  tag = {lua_string(tag.tag)},",
        f"  minor = {lua_string(tag.minor)},",
        f"  torch = {lua_string(tag.torch)},",
        f"  lightning = {lua_string(tag.lightning)},",
        f"  python = {lua_string(tag.python)},",
        f"  variant = {lua_string(tag.variant)},",
        f"  backend = {lua_string(tag.backend)},",
        f"  notes = {lua_string(tag.notes)},",
        *([f"  legacy = {lua_string(tag.legacy)},"] if tag.legacy else []),
        "  siblings = { " + ", ".join(lua_string(s) for s in tag.siblings) + " },",
        f"  install_job = {lua_string(tag.install_job)},",
        f"  variant_description = {lua_string(tag.variant_description)},",
    ]
    return "\n".join(
        [
            f"-- {module}: PyTorch {tag.torch} ({tag.variant}) with Lightning {tag.lightning} and lightning_xpu.",
            "-- written by the install (lxpu_admin/install/tagfiles.py) from the recipe's data; do not edit.",
            "--",
            f"-- Data only: the code is the modulefile body {MODULEFILE_BODY_NAME} next to this file, the same for "
            "every tag; the install writes both.",
            'local here = myFileName():match("^(.*/)")',
            f"local body = here .. {lua_string(MODULEFILE_BODY_NAME)}",
            'local run, why = loadfile(body, "t", _ENV) -- in this modulefile\'s sandbox (Lua 5.1: the global one)',
            "if not run then",
            '  local present = io.open(body) -- there but not valid Lua: show Lua\'s own error, not "missing"',
            "  if present then",
            "    present:close()",
            f"    LmodError({lua_string(module + ': the modulefile body does not load: ')} .. tostring(why))",
            "  end",
            f"  LmodError({lua_string(module + ': the modulefile body ' + chr(39))} .. body .. {lua_string(rerun)}"
            ' .. (here:match("^(.*)/modulefiles/lightning%-xpu/$") or "<prefix>")',
            '    .. "\' (it writes the body next to the modulefile)")',
            "end",
            "run({",
            *fields,
            "})",
            "",
        ]
    )


def setup_text(tag: TagData) -> str:
    """The thin setup script: refuse a shell other than bash, then source the library next to it with the tag's
    data. Relocatable: it finds everything next to itself."""
    name, lib, here = tag.setup_name, SETUP_LIBRARY_NAME, '"$(dirname -- "${BASH_SOURCE[0]}")"'
    args = " ".join(shlex.quote(str(a)) for a in (tag.setup_contract, tag.tag, tag.install_job, tag.variant))
    exit_if_run = [
        "  # shellcheck disable=SC2317  # exit is reached when the file is run instead of sourced",
        "  return 1 2>/dev/null || exit 1",
        "fi",
    ]
    return "\n".join(
        [
            "# shellcheck shell=bash",
            f"# {name}: sets up lightning-xpu {tag.tag} (PyTorch {tag.torch}, {tag.variant}, Lightning "
            f"{tag.lightning}) in this shell.",
            "# written by the install (lxpu_admin/install/tagfiles.py) from the recipe's data; do not edit.",
            "#",
            f"# Usage (bash):  source {name}",
            f"# Relocatable: the environment is the directory {tag.tag} next to this file. Sourcing it twice is "
            "harmless.",
            f"# It sets what `module load {tag.module}` sets: PATH, VIRTUAL_ENV or CONDA_PREFIX, PYTHONUSERBASE,",
            "# LIGHTNING_XPU_ROOT and the site variables (only where you have not set them). It never changes shell "
            "options.",
            f"# Data only: the code is {lib} next to this file, the same for every tag; the install writes both.",
            "",
            'if [ -z "${BASH_VERSION:-}" ]; then',
            f"  echo \"{name}: needs bash: run 'source {name}' from bash\" >&2",
            *exit_if_run,
            f'if [ ! -f {here[:-1]}/{lib}" ]; then',
            f'  echo "{name}: {lib} is missing next to it: rerun {tag.install_job}" \\',
            f'    "--variant {tag.variant} --prefix $(cd -- {here} && pwd) (it writes the library)" >&2',
            *exit_if_run,
            "# Contract, tag, install job, variant.",
            "# shellcheck source=/dev/null  # the library is checked on its own",
            f'. {here[:-1]}/{lib}" {args}',
            "",
        ]
    )


def write_atomic(path: Path, text: str, mode: int) -> None:
    """Temporary file in the same directory, then rename: readers never see half a file."""
    try:
        if path.read_text() == text and (path.stat().st_mode & 0o7777) == mode:
            return  # unchanged: a no-op rerun rewrites nothing
    except OSError:
        pass
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, temporary = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as handle:
            handle.write(text)
        os.chmod(temporary, mode)
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


def _wanted(prefix: Path, tag: TagData) -> dict[Path, tuple[str, int]]:
    return {
        prefix / tag.modulefile_name: (modulefile_text(tag), 0o644),
        prefix / tag.setup_name: (setup_text(tag), 0o755),
    }


def write_tag_files(prefix: Path, tag: TagData) -> list[Path]:
    """Write the tag's modulefile and setup script into `prefix`; return their paths."""
    written = []
    for path, (text, mode) in _wanted(Path(prefix), tag).items():
        write_atomic(path, text, mode)
        written.append(path)
    return written


def tag_files_current(prefix: Path, tag: TagData) -> bool:
    """Whether both files are there with the content this data writes (a no-op rerun restores them otherwise)."""
    return _all_current(_wanted(Path(prefix), tag))


def _all_current(wanted: Mapping[Path, tuple[str, int]]) -> bool:
    for path, (text, _mode) in wanted.items():
        try:
            if path.read_text() != text:
                return False
        except OSError:
            return False
    return True


def _site_field(site: Mapping[str, Any], key: str, kind: type = str) -> Any:
    value = site.get(key)
    if not isinstance(value, kind) or not value or (kind is list and not all(isinstance(v, str) for v in value)):
        raise TagDataError(f"site data: '{key}' is missing or not a {kind.__name__} (recipes/sites/<site>.toml)")
    return value


def _shell_path(path: str) -> str:
    """One shell word for `path`; a leading $HOME/ (a site's default prefix) expands, nothing else does."""
    if path.startswith("$HOME/"):
        return '"$HOME"/' + shlex.quote(path[len("$HOME/") :])
    return shlex.quote(path)


def _link_defaults(site: Mapping[str, Any]) -> str:
    """The site's nominal link figures for the communication check (lightning_xpu/validation/comms.py), if any."""
    found = ""
    for key in ("link_gbps", "node_link_gbps"):
        value = site.get(key)
        if value is not None:
            if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
                raise TagDataError(f"site data: {key!r} must be a positive number (got {value!r})")
            found += f" --site-{key.replace('_', '-')} {float(value):g}"
    return found


def validation_job_text(prefix: Path, site: Mapping[str, Any]) -> str:
    """The site's validation job, from the site's "validation" data (lib/lxpu_admin/render/sites.py Validation):
    the scheduler's directives, the site's defaults, and a call of the common validation script written next to
    it. Under a scheduler the job runs from a spool copy, so it also looks in the submit directory and in the
    prefix it was written for."""
    name, marker = _site_field(site, "site"), _site_field(site, "marker")
    if marker not in ("#SBATCH", "#PBS"):
        raise TagDataError(f"site data: 'marker' must be #SBATCH or #PBS (got {marker!r})")
    directives = [] if site.get("directives") == [] else _site_field(site, "directives", list)
    launchers = ",".join(_site_field(site, "launchers", list))
    prefix_word = _shell_path(_site_field(site, "default_prefix"))
    spool = '"$(dirname "${BASH_SOURCE[0]}")" "${SLURM_SUBMIT_DIR:-}" "${PBS_O_WORKDIR:-}"'
    places = f"{spool} {_shell_path(str(prefix))}"
    return "\n".join(
        [
            "#!/usr/bin/env bash",
            f"# lightning-xpu site validation job for {name} (docs/xpu-guide.md#site-validation-job), written by the "
            "install",
            f"# (lxpu_admin/install/tagfiles.py) from recipes/sites/{name}.toml [validation]; do not edit.",
            f"# The code is {VALIDATION_LIBRARY_NAME} next to it (--help).",
            *(f"{marker} {d}" for d in directives),
            f"# Submit from this directory: {_site_field(site, 'hint')}",
            "# The account or project is never written here. Under the scheduler this file is a spool copy: hence "
            "the",
            "# submit directory and the install prefix in the search below.",
            "set -euo pipefail",
            f'defaults=(--site-prefix {prefix_word} --site-launchers "{launchers}"{_link_defaults(site)})',
            f"for here in {places}; do",
            f'  [ ! -f "$here/{VALIDATION_LIBRARY_NAME}" ] || exec bash "$here/{VALIDATION_LIBRARY_NAME}" '
            '"${defaults[@]}" "$@"',
            "done",
            f'echo "{VALIDATION_JOB}: cannot find {VALIDATION_LIBRARY_NAME}: submit from the install prefix" >&2',
            "exit 2",
            "",
        ]
    )


def _validation_wanted(prefix: Path, site: Mapping[str, Any], source: Path | None) -> dict[Path, tuple[str, int]]:
    return {
        prefix / VALIDATION_LIBRARY_NAME: ((source or _REPOSITORY_VALIDATION).read_text(), 0o755),
        prefix / VALIDATION_JOB: (validation_job_text(prefix, site), 0o755),
    }


def write_site_validation_job(prefix: Path, site: Mapping[str, Any], source: Path | None = None) -> Path:
    """Write <prefix>/validate_lightning.sh for `site` and the common script it calls; return the job's path."""
    for path, (text, mode) in _validation_wanted(Path(prefix), site, source).items():
        write_atomic(path, text, mode)
    return Path(prefix) / VALIDATION_JOB


def site_job_current(prefix: Path, site: Mapping[str, Any]) -> bool:
    """Whether the job and the common script are there as this data and checkout write them."""
    return _all_current(_validation_wanted(Path(prefix), site, None))
