"""The install's inputs, checked before anything is written (bad input: one line naming the fix, exit 2), and the
hash of everything that decides what gets built (equal hash + a published manifest with it = nothing to do); the
check step: what the run will build, from what, and the disk space it needs.
"""

from __future__ import annotations

import glob
import grp
import hashlib
import json
import os
import pwd
import shutil
import stat
import subprocess
from pathlib import Path

from lxpu_admin.install.build import PACKAGE_SOURCES
from lxpu_admin.install.lmod import load_modules
from lxpu_admin.install.space import check_space_unless_noop
from lxpu_admin.install.state import State, bad_input, bad_input_unless_dry, command_output, quote, say, warn
from lxpu_admin.install.tagfiles import MODULEFILE_BODY, SETUP_HELPER, SETUP_LIBRARY
from lxpu_admin.lockbind import check_file as lock_refusal


def expand_home(path: str) -> str:
    """Only a leading ~ or a literal $HOME is expanded (the recipe's default prefix is written that way)."""
    home = os.environ.get("HOME", "")
    for literal in ("~", "$HOME", "${HOME}"):
        if path == literal and literal != "${HOME}":
            path = home
        elif path.startswith(f"{literal}/"):
            path = f"{home}/{path[len(literal) + 1 :]}"
    if not path.startswith("/"):
        path = f"{os.getcwd()}/{path}"
    return path.rstrip("/") or "/"


def have_intel_gpu() -> bool:
    """An Intel display/compute device in sysfs (vendor 0x8086, PCI class 0x03xxxx)."""
    for device in glob.glob("/sys/class/drm/card*/device"):
        try:
            with open(f"{device}/vendor") as vendor, open(f"{device}/class") as klass:
                if vendor.read().strip() == "0x8086" and klass.read().strip().startswith("0x03"):
                    return True
        except OSError:
            continue
    return False


def is_repo(path: str) -> bool:
    return os.path.isfile(f"{path}/pyproject.toml") and os.path.isdir(f"{path}/lightning_xpu")


def validate(state: State) -> None:
    data = state.data
    variants = list(data["variants"])
    variant = state.variant or data["default_variant"]
    if variant == "auto":
        variant = "xpu" if have_intel_gpu() and "xpu" in variants else "cpu"
        state.auto_cpu_note = variant == "cpu"
    if variant not in ("xpu", "cpu", "cuda", "auto"):
        raise bad_input(state, f"--variant must be xpu, cpu, cuda or auto, not '{variant}'")
    if variant not in variants:
        raise bad_input(state, f"PyTorch {data['version']} has no '{variant}' variant: pass --variant one of: "
                               f"{' '.join(variants)}")
    state.variant = variant
    state.tag = state.variant_data["tag"]

    prefix = expand_home(state.prefix or data["default_prefix"])
    state.prefix = prefix
    tag = state.tag
    if ":" in prefix or "\n" in prefix:
        raise bad_input(state, "--prefix must not contain ':' or a newline (it goes into MODULEPATH): pick another "
                               "directory")
    if os.path.exists(prefix) and not os.path.isdir(prefix):
        raise bad_input(state, f"--prefix {prefix} exists and is not a directory")
    if is_repo(prefix):
        raise bad_input(state, f"--prefix {prefix} is a lightning-xpu repository checkout: install into another "
                               f"directory (e.g. --prefix {prefix}-install)")
    if os.path.lexists(f"{prefix}/{tag}") and not os.path.islink(f"{prefix}/{tag}"):
        raise bad_input(state, f"{prefix}/{tag} exists and is not a symlink made by this installer: move it away or "
                               "pick another --prefix")
    existing = prefix
    while not os.path.exists(existing):
        existing = os.path.dirname(existing)
    if not os.access(existing, os.W_OK):
        raise bad_input(state, f"cannot write to {existing} (for --prefix {prefix}): pick a prefix you can write")

    group = state.shared_group
    if group:
        try:
            gid = grp.getgrnam(group).gr_gid
        except KeyError:
            raise bad_input(state, f"--shared-group {group}: no such group (see getent group)") from None
        if os.getuid() != 0 and gid not in os.getgroups() and gid != os.getgid():
            raise bad_input(state, f"--shared-group {group}: you are not a member of that group (see id -Gn)")
    validate_environment(state)
    if group:
        check_group_reaches_python(state, group)


def _executable(name: str) -> str:
    path = shutil.which(name) if "/" not in name else (name if os.path.isfile(name) else None)
    return path if path and os.access(path, os.X_OK) else ""


def published_env_manager(state: State) -> str:
    """The environment manager the tag's published build was made with (manifest.json), or "": a re-run without
    --env-manager keeps a conda tag conda, whatever the site's default is."""
    try:
        with open(f"{state.prefix}/{state.tag}/manifest.json") as handle:
            recorded = json.load(handle).get("env_manager", "")
    except (OSError, ValueError, AttributeError):
        return ""
    return recorded if recorded in ("conda", "venv") else ""


def validate_environment(state: State) -> None:
    """Environment manager and Python. The site's modules are loaded first (a dry run loads them too: it changes
    no file), so that a module can provide conda or Python; then the site's Python module, for a venv."""
    options, data = state.options, state.data
    state.python_version = state.variant_data["python"]
    manager = options.get("env_manager", "auto")
    if manager not in ("auto", "conda", "venv"):
        raise bad_input(state, f"--env-manager must be conda or venv, not '{manager}'")
    load_modules(state, "site module", data["modules"])
    base = state.base_python
    if base:
        if manager == "conda":
            raise bad_input(state, "--base-python builds a venv over that Python: drop --env-manager conda")
        state.env_manager, state.env_why = "venv", "--base-python given: a venv over it"
        found = _executable(base)
        if not found:
            raise bad_input(state, f"--base-python {base} is not an executable")
        state.base_python = found
        status, out = command_output(found, "-c", 'import importlib.metadata as m, sys\nprint("%d.%d" % '
                                                  'sys.version_info[:2], m.version("torch"), sys.prefix != '
                                                  'sys.base_prefix)')
        words = out.split()
        if status != 0 or len(words) != 3:
            raise bad_input(state, f"--base-python {found} has no torch: pick a Python with torch installed, or drop "
                                   "--base-python")
        state.python_version, state.base_torch, state.base_is_venv = words[0], words[1], words[2] == "True"
        minor = ".".join(state.base_torch.split("+")[0].split(".")[:2])
        if minor != data["version"]:
            raise bad_input(state, f"--base-python {found} has torch {state.base_torch}, not PyTorch "
                                   f"{data['version']}: run install_lightning_{minor}.sh with it, or pick a Python "
                                   f"with torch {data['version']}")
        state.python = found
        return
    remembered = published_env_manager(state)
    if manager == "auto" and remembered:
        state.env_manager = remembered
        state.env_why = f"the published {state.tag}'s, from its manifest.json (--env-manager changes it)"
    elif manager == "auto":
        state.env_manager = "conda" if data["env_manager"] == "conda" else "venv"
        state.env_why = f"site {data['site']}'s default" + (
            " (py-rattler: no conda executable needed)" if state.env_manager == "conda" else ""
        )
    else:
        state.env_manager, state.env_why = manager, f"--env-manager {manager}"
    conda_exe = options.get("conda_exe", "")
    if conda_exe:
        if state.env_manager != "conda":
            raise bad_input(state, "--conda-exe builds the conda layer: add --env-manager conda, or drop --conda-exe")
        found = _executable(conda_exe)
        if not found:
            raise bad_input(state, f"--conda-exe {conda_exe} is not an executable: pass the path of your conda, or "
                                   "drop --conda-exe")
        options["conda_exe"] = found
        state.env_why += f" (with {found})"
    if state.env_manager != "venv":
        return
    module = data["python_module"]
    load_modules(state, "Python module", [module] if module else [])
    state.python = shutil.which(f"python{state.python_version}") or ""
    if state.python:
        return
    after = f" after loading {module}" if module else ""
    message = (
        f"python{state.python_version} not found on PATH{after} (the {state.variant} variant needs Python "
        f"{state.python_version}): load a Python {state.python_version} module or pass --base-python PATH"
    )
    bad_input_unless_dry(state, message)
    state.warnings.append(message)
    state.python = f"python{state.python_version}"


# Run on the interpreter the environment is built from: what the group's members need to reach through it.
_PYTHON_PATHS = r"""
import os, site, sys, sysconfig
print(os.path.realpath(sys.executable))
print(sysconfig.get_path("stdlib"))
for path in site.getsitepackages():
    print(path)
"""


def _blocks_group(path: str, gid: int, need: int) -> bool:
    """Whether PATH's mode keeps a member of group GID (not its owner) from NEED (a mask of the r, w, x bits) on
    it: the group bits where GID owns it, else the other bits. An ACL may grant more: never said to block."""
    try:
        info = os.stat(path)
        if any(name.startswith("system.posix_acl") for name in os.listxattr(path)):
            return False
    except OSError:
        return False
    bits = (info.st_mode >> 3) & 0o7 if info.st_gid == gid else info.st_mode & 0o7
    return bits & need != need


def group_blocker(path: str, gid: int, leaf: int) -> str:
    """The first directory on the way to PATH (or PATH itself, which needs LEAF) the group cannot enter; ""."""
    parts = path.strip("/").split("/")
    for depth in range(len(parts) + 1):
        here = "/" + "/".join(parts[:depth])
        if _blocks_group(here, gid, leaf if depth == len(parts) else 0o1):
            return here
    return ""


def check_group_reaches_python(state: State, group: str) -> None:
    """--shared-group: the group's members run the environment's python, a link to the interpreter it was built
    from, and read that interpreter's standard library and (--base-python) its packages. A private home on the way
    (mode 0700) gives them "Permission denied" only when they load the module: a warning at the check step names the
    fix. A warning, not a refusal: what the mode bits do not show (membership in a directory's own group) may let
    them in."""
    if state.env_manager != "venv" or not os.path.isfile(state.python):
        return  # conda: the interpreter is the build's own; a Python not found is said elsewhere
    status, out = command_output(state.python, "-I", "-c", _PYTHON_PATHS)
    if status != 0:
        return
    lines = out.splitlines()
    wanted = [(lines[0], 0o1)] + [(path, 0o5) for path in lines[1:] if os.path.isdir(path)]
    gid = grp.getgrnam(group).gr_gid
    for path, leaf in wanted:
        blocker = group_blocker(path, gid, leaf)
        if blocker:
            info = os.stat(blocker)
            state.warnings.append(f"--shared-group {group}: its members cannot reach {path} (of the Python the "
                                  f"environment is built from, {state.python}): {blocker} is mode "
                                  f"{stat.S_IMODE(info.st_mode):04o}, owned by "
                                  f"{_owner(info.st_uid)}:{_group_name(info.st_gid)}; let the group in (chmod o+x "
                                  f"{blocker}, or chgrp {group} {blocker} and chmod g+x) or build over a Python "
                                  "outside private directories (--base-python)")
            return


# Run on the interpreter a venv is built from: whether it has ensurepip (`python -m venv` runs it; Debian and Ubuntu
# ship it apart, in python3.X-venv), and the pip wheel a new venv is seeded with, where that ensurepip takes it
# from: the distribution's wheel directory (sysconfig WHEEL_PKG_DIR: Debian's /usr/share/python-wheels, from
# python3-pip-whl; Fedora's too), else its own ensurepip/_bundled.
_PIP_SEED = r"""
import glob, importlib.util, os, sysconfig
spec = importlib.util.find_spec("ensurepip")
wheel_dir = sysconfig.get_config_var("WHEEL_PKG_DIR") or ""
found = sorted(glob.glob(os.path.join(wheel_dir, "pip-*.whl"))) if wheel_dir else []
if not found and spec and spec.origin:
    found = sorted(glob.glob(os.path.join(os.path.dirname(spec.origin), "_bundled", "pip-*.whl")))
print("ensurepip" if spec else "")
print(found[-1] if found else "")
print(wheel_dir)
"""


def pip_seed(python: str) -> tuple[bool, str, str]:
    """(PYTHON has ensurepip, the pip wheel a venv of it is seeded with or "", its WHEEL_PKG_DIR or "")."""
    status, out = command_output(python, "-I", "-c", _PIP_SEED)
    lines = [*out.splitlines(), "", "", ""][:3] if status == 0 else ["", "", ""]
    return lines[0] == "ensurepip", lines[1], lines[2]


def check_pip_seed(state: State) -> None:
    """A venv needs pip from the Python it is built from (the smoke job and every user layer run it): a Debian or
    Ubuntu system Python without python3.X-venv has no ensurepip, and its pip wheel, where there is one, lies in
    /usr/share/python-wheels, not in ensurepip/_bundled. Stopped here, not at the smoke job a minute later."""
    if state.env_manager != "venv" or not os.path.isfile(state.python):
        return
    has_ensurepip, wheel, wheel_dir = pip_seed(state.python)
    if wheel and (has_ensurepip or state.installer.kind != "pip"):
        return
    where = f"ensurepip/_bundled{f' or {wheel_dir}' if wheel_dir else ''}"
    what = "has no ensurepip module" if not has_ensurepip else f"has no pip wheel (none in {where})"
    version = state.python_version
    bad_input_unless_dry(state, f"{state.python} {what}, so a venv built from it gets no pip: install "
                                f"python{version}-venv (Debian/Ubuntu: apt-get install python{version}-venv, which "
                                "brings ensurepip and the pip wheel in /usr/share/python-wheels), or build over "
                                f"another Python {version} (--base-python, or a python{version} module)")


def _owner(uid: int) -> str:
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return str(uid)


def _group_name(gid: int) -> str:
    try:
        return grp.getgrgid(gid).gr_name
    except KeyError:
        return str(gid)


def validate_repository(state: State) -> None:
    """The repository and the files the recipe needs from it; a lock made from other recipe pins is refused."""
    variant = state.variant_data
    source = state.options.get("source", "")
    if source:
        if not os.path.isdir(source):
            raise bad_input(state, f"--source {source} is not a directory")
        if not is_repo(source):
            raise bad_input(state, f"--source {source} is not the lightning-xpu repository (no pyproject.toml and "
                                   "lightning_xpu/)")
        state.source = os.path.realpath(source)
    elif not state.source or not is_repo(state.source):
        raise bad_input(state, "cannot find the lightning-xpu repository "
                               f"({state.source or 'LXPU_SOURCE is not set'}): submit from inside the repository or "
                               "pass --source DIR")
    for path in (f"{state.source}/{MODULEFILE_BODY}", f"{state.source}/{SETUP_LIBRARY}",
                 f"{state.source}/{SETUP_HELPER}"):
        if not os.path.isfile(path):
            raise bad_input(state, f"{path} is missing: render it with 'python recipes/render.py render --all' or pass "
                                   "--source")
    if not os.path.isfile(f"{state.source}/scripts/common/toy_fit.py"):
        raise bad_input(
            state, f"{state.source}/scripts/common/toy_fit.py is missing: pass the repository with --source"
        )
    if variant["lock"]:
        state.lock_path = f"{state.source}/{variant['lock']}"
        if not os.path.isfile(state.lock_path):
            raise bad_input(state, f"the recipe's lock file {state.lock_path} is missing: run 'python "
                                   "recipes/render.py lock' or pass --source")
        # A lock made from other recipe pins would install another stack than the job says (issue 19).
        refused = lock_refusal(Path(state.lock_path), variant["python"], list(variant["requirements"]))
        if refused:
            raise bad_input(state, refused)
    resolve_pip_sources(state)


def resolve_pip_sources(state: State) -> None:
    options = state.options
    wheelhouse, index_url, extras = options["wheelhouse"], options["index_url"], options["extra_index_urls"]
    if wheelhouse:
        if index_url or extras:
            raise bad_input(
                state, "--wheelhouse cannot be combined with --index-url/--extra-index-url: pick one source"
            )
        if not os.path.isdir(wheelhouse):
            raise bad_input(state, f"--wheelhouse {wheelhouse} is not a directory")
        options["wheelhouse"] = os.path.realpath(wheelhouse)
        state.sources_mode, state.pip_options = "wheelhouse", ["--no-index", "--find-links", options["wheelhouse"]]
        return
    if index_url or extras:
        if options["pip_source"] == "system":
            raise bad_input(state, "--pip-source system uses this machine's pip configuration only: drop "
                                   "--index-url/--extra-index-url, or use --pip-source recipe")
        for url in (index_url, *extras):
            if url and "://" not in url:
                raise bad_input(
                    state, f"package index '{url}' is not a URL: give e.g. https://host/simple or file:///path/simple"
                )
        state.sources_mode = "custom"
        state.pip_options = (["--index-url", index_url] if index_url else []) + [
            word for url in extras for word in ("--extra-index-url", url)
        ]
        return
    if options["pip_source"] == "system":
        state.sources_mode = "system"
    elif options["pip_source"] == "recipe":
        state.sources_mode, state.pip_options = "recipe", list(state.variant_data["pip_sources"])
    else:
        raise bad_input(state, f"--pip-source must be recipe or system, not '{options['pip_source']}'")


def conda_layer_spec(state: State) -> str:
    """The conda layer of a variant: Python and pip only; every wheel comes from the pip step."""
    channels = "".join(f"  - {channel}\n" for channel in state.data["conda_channels"])
    return f"channels:\n{channels}dependencies:\n  - python={state.variant_data['python']}\n  - pip\n"


# The repository's files an environment is built from: the wheel's sources, the engine's own (lib: the admin
# package, whose envside modules run in the build) and the shared scripts it copies (scripts/common).
_REPOSITORY_ITEMS = (*PACKAGE_SOURCES, "lib", "scripts/common")


def _repository_digest(source: str) -> str:
    lines = []
    for item in _REPOSITORY_ITEMS:
        path = f"{source}/{item}"
        files = [path] if os.path.isfile(path) else []
        for root, dirs, names in os.walk(path):
            dirs[:] = [name for name in dirs if name != "__pycache__"]
            files += [f"{root}/{name}" for name in names if not name.endswith((".pyc", ".pyo"))]
        for file in files:
            with open(file, "rb") as handle:
                lines.append((os.path.relpath(file, source), hashlib.sha256(handle.read()).hexdigest()))
    return "".join(f"{digest}  {name}\n" for name, digest in sorted(lines, key=lambda pair: os.fsencode(pair[0])))


def hash_inputs(state: State) -> str:
    data, variant = state.data, state.variant_data
    parts = [
        f"recipe {data['recipe_hash']} {data['version']} {data['site']} {state.variant}",
        f"env-manager {state.env_manager} python {state.python_version}",
        f"base-python {state.base_python} {state.base_torch}",
        f"sources {state.sources_mode} {' '.join(state.pip_options)}",
        f"shared-group {state.shared_group}",
        "--- requirements",
        *variant["requirements"],
    ]
    if state.lock_path:
        with open(state.lock_path) as handle:
            parts += ["--- lock", handle.read()]
    if state.env_manager == "conda":
        parts += ["--- conda layer", conda_layer_spec(state)]
    parts += ["--- site", " ".join(data["modules"]), *data["site_env"], "--- tag data", repr(sorted(variant.items()))]
    parts += ["--- repository files", _repository_digest(state.source)]
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()


def repo_commit(source: str) -> str:
    done = subprocess.run(["git", "-C", source, "rev-parse", "HEAD"], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        return "unknown"
    dirty = subprocess.run(["git", "-C", source, "status", "--porcelain"], capture_output=True, text=True, check=False)
    return done.stdout.strip() + ("-dirty" if dirty.stdout.strip() else "")


# ---- the check step: what the run will do, and the disk space ----


def check_step(state: State) -> None:
    data = state.data
    if state.auto_cpu_note:
        rule = "#" * 80
        say(f"{rule}\nNOTE: no Intel GPU found on this machine: installing the CPU variant of PyTorch\n      "
            f"{data['version']} as module lightning-xpu/{state.tag} (NOT the XPU build).\n      Pass --variant xpu to "
            f"build the XPU environment anyway.\n{rule}")
    say(f"recipe:      PyTorch {data['version']}, Lightning {data['lightning']}, site {data['site']}, variant "
        f"{state.variant} (hash {data['recipe_hash'][:12]})")
    if data.get("legacy"):
        say(f"legacy:      {data['legacy']}")
    say(f"prefix:      {state.prefix} (tag {state.tag})")
    say(f"repository:  {state.source} (commit {state.commit})")
    say(f"environment: {state.env_manager} ({state.env_why}), Python "
        f"{state.python_version}{f' ({state.python})' if state.python else ''}")
    if state.base_python:
        say(f"base python: {state.base_python} (torch {state.base_torch})")
    pins = " ".join(state.variant_data["requirements"])
    tools = " ".join(data["build_tools"])
    if state.lock_path:
        with open(state.lock_path) as handle:
            count = sum(1 for line in handle if line[:1].isalnum())
        say(f"pins:        {pins}, with every dependency from the lock: {count} packages, sha256-checked")
        say(f"build tools: {tools} (from the lock, sha256-checked)")
    else:
        say(f"pins:        {pins} (no lock: dependencies resolved by pip, recorded in the manifest)")
        say(f"build tools: {tools} (pinned, no hash: the recipe has no lock)")
    sources = f" {quote(*state.pip_options)}" if state.pip_options else ""
    say(f"sources:     {state.sources_mode}{sources}{f'; lock {state.lock_path}' if state.lock_path else ''}")
    for line in state.module_report:
        say(f"module:      {line}")
    left_out = "; ".join(data["modules_left_out"])
    if not state.module_report and not left_out:
        say("module:      none to load")
    if left_out:
        say(f"module:      left out for PyTorch {data['version']}: {left_out}")
    check_pip_seed(state)
    if state.variant == "xpu" and not have_intel_gpu():
        state.warnings.append("the xpu variant needs an Intel GPU and none is visible here (/sys/class/drm): the smoke "
                              "job (step 8) fails unless this runs on a GPU node; --variant cpu builds without one")
    for line in state.warnings:
        warn(line)
    say(f"inputs hash: {state.inputs_hash}")
    schedulers = (("Slurm", "SLURM_JOB_ID"), ("PBS", "PBS_JOBID"))
    job = "".join(f" ({kind} job {os.environ[name]})" for kind, name in schedulers if os.environ.get(name))
    say(f"host:        {os.environ.get('HOSTNAME') or os.uname().nodename}{job}")
    if state.unset_vars:
        say(f"unset for the install: {' '.join(state.unset_vars)}")
    check_space_unless_noop(state)
