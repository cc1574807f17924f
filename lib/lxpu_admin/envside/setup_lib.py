"""What the setup library (scripts/common/setup/lightning-setup.lib.sh) need not do in shell.

The install writes this file next to the library, as .lightning-setup.lib.py (lxpu_admin/install/tagfiles.py), and the
library runs it with the environment's own Python, `python -I -S .lightning-setup.lib.py PREFIX TAG SHELL_PID`,
then evaluates the shell lines it prints (every value quoted). The modulefile body runs it too, through Lmod's
capture(), as `python -I -S .lightning-setup.lib.py --modulefile PREFIX TAG`, and reads `key=value` lines
(modulefile_lines): one implementation of what both entry points write. It pins the ONE build <prefix>/<TAG> points
to now; records the lease whose shared flock the shell then takes (created exclusively, create_lease; the lease
format is here, lease_text: the install's own lease uses it too; lxpu_admin/install/leases.py reads them); decides
on the user's layer (layer_verdict; `lightning-xpu user-env` and `doctor` load this file for the same rules); loads the
site's modules; and sets the variables `module load` sets. It runs at every load: standard library only, little of
it, to start fast.
"""

from __future__ import annotations

import os
import sys
import time

TYPE_CHECKING = False  # not typing's: typing and collections.abc would cost every setup about 8 ms
if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

_URL_SAFE = frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789/._~-")
_HOPS = 8  # symbolic links followed from <prefix>/<tag>, as the modulefile body does
PINS = "/share/lightning-xpu/constraints.txt"  # an environment's pins (lxpu_admin/envside/pins.py RELATIVE)


def _word(value: str) -> str:
    """One shell word (not shlex.quote: shlex imports re, 10 ms more at every setup)."""
    return "'" + value.replace("'", "'\\''") + "'"


def host() -> str:
    return os.uname().nodename


def scheduler_job() -> tuple[str, str]:
    """A lease's job field and its holder in the file name: slurm:ID and slurm-ID, pbs:ID and pbs-ID, or empty
    outside a scheduler (Slurm first, as in the modulefile body)."""
    for scheduler, variable in (("slurm", "SLURM_JOB_ID"), ("pbs", "PBS_JOBID")):
        if os.environ.get(variable):
            return f"{scheduler}:{os.environ[variable]}", f"{scheduler}-{os.environ[variable]}"
    return "", ""


def lease_text(build: str, job: str, pid: str, user: str, what: str, held: bool = False) -> str:
    """The lease file's key=value lines (the modulefile body, in Lua, writes the same lines)."""
    fields = {
        "build": build, "host": host(), "job": job, "cluster": os.environ.get("SLURM_CLUSTER_NAME", ""), "pid": pid,
        "user": user, "created": str(int(time.time())), "what": what, **({"held": "flock"} if held else {}),
    }  # fmt: skip
    return "".join(f"{key}={value}\n" for key, value in fields.items())


def file_url(path: str) -> str:
    """file://PATH, each byte outside [A-Za-z0-9/._~-] percent-encoded: PIP_CONSTRAINT and UV_CONSTRAINT are lists
    split at white space."""
    return "file://" + "".join(chr(b) if b in _URL_SAFE else f"%{b:02X}" for b in os.fsencode(path))


def with_pins(listed: str, url: str) -> str:
    """A constraint list (PIP_CONSTRAINT, UV_CONSTRAINT: split at white space) with the pins at `url` added: what
    was there stays (a site's own constraints apply too), another lightning-xpu environment's pins leave."""
    kept = [word for word in listed.split() if not word.endswith(PINS) and word != url]
    return " ".join([*kept, url])


def pinned_build(path: str) -> str:
    """Where <prefix>/<tag> points now (a rebuild later changes nothing for this shell)."""
    for _ in range(_HOPS):
        try:
            target = os.readlink(path)
        except OSError:
            break
        path = target if target.startswith("/") else f"{path.rpartition('/')[0]}/{target}"
    return path


def user_name() -> str:
    """Who records the lease: the uid's name (USER may be unset or say anything), else the uid."""
    import pwd

    try:
        return pwd.getpwuid(os.getuid()).pw_name
    except KeyError:
        return str(os.getuid())


_NEW = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC


def create_exclusive(path: str, mode: int = 0o644) -> int:
    """A new file at PATH (it must not exist, not even as a link: nothing planted there is followed), with exactly
    MODE whatever the umask (fchmod of the descriptor, never a chmod of a path); its descriptor. The one way every
    writer of this project creates a file where another account could have put something (the install's leases
    and logs, lxpu_admin/install/; the entry points' leases; a user layer's files)."""
    fd = os.open(path, _NEW, mode)
    try:
        os.fchmod(fd, mode)
    except BaseException:
        os.close(fd)
        raise
    return fd


def create_unpredictable(name: Callable[[str], str], mode: int = 0o644) -> tuple[int, str]:
    """A new file (create_exclusive) at name(RANDOM), RANDOM 16 hex digits: no one can plant anything at it
    beforehand. Its descriptor and path."""
    for _ in range(8):
        path = name(os.urandom(8).hex())
        try:
            return create_exclusive(path, mode), path
        except FileExistsError:
            continue
    raise FileExistsError(f"{os.path.dirname(name(''))}: 8 random names were all taken")


def write_file(path: str, text: str, mode: int = 0o644) -> None:
    """Replace PATH by a new file holding TEXT (an old file or link there is replaced, never followed): a temporary
    file next to it, made exclusively, then renamed over it (a reader sees the old file or the new one)."""
    temporary = f"{path}.{host()}.{os.getpid()}.tmp"  # unique on a file system shared by nodes
    if os.path.lexists(temporary):
        os.remove(temporary)
    fd = create_exclusive(temporary, mode)
    try:
        with os.fdopen(fd, "w") as handle:
            handle.write(text)
        os.replace(temporary, path)
    except BaseException:
        if os.path.lexists(temporary):
            os.remove(temporary)
        raise


def create_lease(leases: str, build: str, holder: str, text: str) -> str:
    """Create a new lease file in LEASES and return its path. In a --shared-group prefix .leases is writable by the
    group (sticky: nobody removes another's file), so a member may plant a link at any name another user would
    write: the file is new (create_unpredictable), mode 0644 whatever the umask."""
    fd, path = create_unpredictable(lambda random: f"{leases}/{build}@{host()}.{holder}.{random}")
    try:
        os.write(fd, text.encode())
    except OSError:
        os.close(fd)
        os.remove(path)
        raise
    os.close(fd)
    return path


def lease_lines(prefix: str, root: str, pid: str, me: str, what: str, fd: str) -> tuple[str, list[str]]:
    """Lease the build while this job (outside a scheduler, the shell) lives: (the lease, the shell line by which
    the shell, and so every process it starts, a nohup job that outlives it too, holds the lease's shared flock on
    descriptor $FD), or ("", [the warning]) where none could be written."""
    if os.path.dirname(root) != f"{prefix}/.envs" or not os.access(f"{root}/bin/python", os.X_OK):
        return "", []
    build, (job, holder) = os.path.basename(root), scheduler_job()
    leases = f"{prefix}/.leases"
    try:
        if not os.path.isdir(leases):
            os.mkdir(leases, 0o755)
        lease = create_lease(leases, build, holder or f"pid-{pid}", lease_text(build, job, pid, user_name(), what))
    except OSError:
        return "", [f"{me}: warning: cannot record a lease in {leases}: a --prune or --uninstall may remove {build} "
                    "while you use it"]  # fmt: skip
    # The shell opens the file it was told (sticky .leases: only its owner can replace it) read-only, and appends
    # held=flock through that descriptor (/dev/fd/N reopens the open file, not the name): no name is followed twice.
    quoted = _word(lease)
    return lease, [f'{{ exec {{{fd}}}<{quoted} && flock -s "${fd}" && echo held=flock >>"/dev/fd/${fd}"; }} '
                   "2>/dev/null || :"]


def module_lines(root: str, me: str) -> list[str]:
    """The site's prerequisite modules (one per line; none on most sites)."""
    listing = f"{root}/lightning-xpu-site-modules.txt"
    try:
        with open(listing) as handle:
            text = handle.read()
    except OSError:
        return []
    if not text:
        return []
    names = [name for name in text.removesuffix("\n").split("\n") if name and not name.startswith("#")]
    lines = ["if declare -F module >/dev/null 2>&1; then :"]
    for name in names:
        warning = f"{me}: warning: 'module load {name}' failed"
        lines.append(f"module load {_word(name)} || echo {_word(warning)} >&2")
    note = f"{me}: note: this site expects the modules in {listing}; no 'module' command here, so they were not loaded"
    return [*lines, f"else echo {_word(note)} >&2; fi"]


def environment_exports(root: str, tag: str, home: str) -> dict[str, str]:
    """The variables of the environment at ROOT itself, without a user layer (the install's smoke job runs with
    these too, lxpu_admin/install/build.py)."""
    # Each name spelt out as a key of exports: recipes/render.py checks them against recipes/known_env.toml.
    exports: dict[str, str] = {}
    if os.path.isdir(f"{root}/conda-meta"):
        exports["CONDA_PREFIX"] = root
    else:
        exports["VIRTUAL_ENV"] = root
    exports["PYTHONUSERBASE"] = f"{home}/.local/lightning-xpu/{tag}"  # pip install --user in a conda environment
    exports["LIGHTNING_XPU_ROOT"] = root
    # The environment's pins bind every pip and uv install (lxpu_admin/envside/pins.py), next to a site's own
    # constraints.
    if os.path.isfile(f"{root}{PINS}"):
        exports["PIP_CONSTRAINT"] = with_pins(os.environ.get("PIP_CONSTRAINT", ""), file_url(f"{root}{PINS}"))
        exports["UV_CONSTRAINT"] = with_pins(os.environ.get("UV_CONSTRAINT", ""), file_url(f"{root}{PINS}"))
    return exports


# ---- compile and JIT caches (issue 30): node-local, private, per user and build -------------------------------
# Triton, TorchInductor and the SYCL/Level Zero runtimes keep compiled kernels (code that is loaded again) in
# caches under $HOME or a predictable /tmp path by default: on a shared file system that is inode quota and stale
# handles at scale (pytorch/pytorch#196993, #173679). The module and setup script point them at
# <node tmp>/lxpu-<uid>/cache.<build>, the private directory lightning-xpu-stage --private-dir makes (the ONE helper
# for per-user node-local paths), unless the user or the site set them. Ranks on other nodes make theirs when they
# first import torch or triton, through the same helper (lightning_xpu/_caches.py).
CACHE_ROOT = "LIGHTNING_XPU_CACHE"
CACHE_VARIABLES = "LIGHTNING_XPU_CACHE_VARIABLES"
# (names: a group is left alone when any of them is set; directories set under the cache root; fixed values).
CACHE_GROUPS: tuple[tuple[tuple[str, ...], dict[str, str], dict[str, str]], ...] = (
    # triton-lang/triton python/triton/knobs.py@v3.5.0 (cache_knobs): TRITON_CACHE_DIR, else
    # $TRITON_HOME/.triton/cache: a TRITON_HOME of the user's own decides where the cache goes.
    (("TRITON_CACHE_DIR", "TRITON_HOME"), {"TRITON_CACHE_DIR": "triton"}, {}),
    # pytorch/pytorch torch/_inductor/runtime/cache_dir_utils.py@v2.9.0 (cache_dir: else /tmp/torchinductor_<user>).
    (("TORCHINDUCTOR_CACHE_DIR",), {"TORCHINDUCTOR_CACHE_DIR": "inductor"}, {}),
    # intel/llvm sycl/source/detail/config.def@v6.2.0 (SYCL_CACHE_PERSISTENT, off by default; SYCL_CACHE_DIR, else
    # $XDG_CACHE_HOME or $HOME/.cache/libsycl_cache): on, since node-local costs no quota.
    (("SYCL_CACHE_PERSISTENT", "SYCL_CACHE_DIR"), {"SYCL_CACHE_DIR": "sycl"}, {"SYCL_CACHE_PERSISTENT": "1"}),
    # intel/compute-runtime shared/source/compiler_interface/linux/default_cache_config.cpp@25.18.33578.6
    # (NEO_CACHE_PERSISTENT, on by default; NEO_CACHE_DIR, else $XDG_CACHE_HOME/neo_compiler_cache or
    # $HOME/.cache/neo_compiler_cache; a NEO_CACHE_DIR that does not exist turns the cache off). Level Zero's loader
    # has no cache variable of its own (ZE_*): the compute runtime caches for it.
    (("NEO_CACHE_PERSISTENT", "NEO_CACHE_DIR"), {"NEO_CACHE_DIR": "neo"}, {}),
)
STAGE_HELPER = "bin/lightning-xpu-stage"


def run_helper(argv: list[str]) -> tuple[int, str]:
    """ARGV's exit status and its output (stdout and stderr together). posix_spawn, not subprocess: subprocess's
    imports would cost every load several milliseconds."""
    read, write = os.pipe()
    actions = [(os.POSIX_SPAWN_DUP2, write, 1), (os.POSIX_SPAWN_DUP2, write, 2), (os.POSIX_SPAWN_CLOSE, read)]
    try:
        pid = os.posix_spawn(argv[0], argv, os.environ, file_actions=actions)
    finally:
        os.close(write)
    chunks = []
    while chunk := os.read(read, 65536):
        chunks.append(chunk)
    os.close(read)
    return os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]), b"".join(chunks).decode(errors="replace").strip()


def site_sets(root: str, name: str) -> bool:
    """Whether the site's variables (lightning-xpu-site.sh, `export NAME="${NAME:-value}"` lines) set NAME."""
    try:
        with open(f"{root}/lightning-xpu-site.sh") as handle:
            return f"export {name}=" in handle.read()
    except OSError:
        return False


def chosen_caches(root: str, environ: Mapping[str, str]) -> tuple[dict[str, str], dict[str, str]]:
    """The cache variables to set ({name: sub-directory}, {name: value}): every group none of whose names the user
    or the site set (a name a previous load of ours set counts as unset)."""
    ours = set(environ.get(CACHE_VARIABLES, "").split())
    directories: dict[str, str] = {}
    values: dict[str, str] = {}
    for names, group_directories, group_values in CACHE_GROUPS:
        if any((name in environ and name not in ours) or site_sets(root, name) for name in names):
            continue
        directories.update(group_directories)
        values.update(group_values)
    return directories, values


def stale_caches(exports: Mapping[str, str], environ: Mapping[str, str]) -> list[str]:
    """The cache variables an earlier load of ours set that EXPORTS does not set again."""
    listed = environ.get(CACHE_VARIABLES, "").split()
    return [name for name in (CACHE_ROOT, CACHE_VARIABLES, *listed) if name in environ and name not in exports]


def cache_exports(root: str, me: str) -> tuple[dict[str, str], list[str]]:
    """The cache variables and the lines to show: the private directory made now on this node by
    `lightning-xpu-stage --private-dir cache.<build>`, or, where it refuses, no variables and its one line."""
    directories, values = chosen_caches(root, os.environ)
    helper = f"{root}/{STAGE_HELPER}"
    if not directories or not os.access(helper, os.X_OK):
        return {}, []
    name = "cache." + "".join(c if c.isalnum() or c in "._-" else "_" for c in os.path.basename(root))
    status, out = run_helper([helper, "--private-dir", name])
    if status != 0 or not out.startswith("/") or "\n" in out:
        why = out.splitlines()[-1].removeprefix("lightning-xpu-stage: error: ") if out else f"exit status {status}"
        return {}, [f"{me}: warning: compile caches stay at their defaults (not node-local): {why}"]
    exports = {CACHE_ROOT: out, CACHE_VARIABLES: " ".join([*directories, *values])}
    exports.update({variable: f"{out}/{sub}" for variable, sub in directories.items()})
    return {**exports, **values}, []


# ---- the user layer (`lightning-xpu user-env`, lightning_xpu/commands/userenv.py, which loads this file) ----------
# A layer is a venv of the user's own. It belongs to one prefix and tag, and records the build it was made (or last
# repointed) over, with that build's Python and pins, in LAYER_RECORD. Its site .pth adds the environment's
# site-packages at every start: those of the build in LIGHTNING_XPU_ROOT when that is a build of its prefix and tag
# (the build this shell or job pinned, and leased), else of the recorded build. So a job never mixes two builds, and
# a build that a job's layer needs is the build that job leased.
LAYER_RECORD = "lightning-xpu-layer"
LAYER_ENVIRONMENT = "lightning-xpu-environment"  # the build, one line (its pins: lightning_xpu/commands/pipguard.py)
LAYER_MODULE = "_lightning_xpu_layer"
LAYER_PTH = "_lightning_xpu_environment.pth"
_LAYER_SITES = """\
\"\"\"lightning-xpu user layer: the site-packages of its lightning-xpu build behind its own (written by
`lightning-xpu user-env` and the module or setup script, lxpu_admin/envside/setup_lib.py; do not edit).\"\"\"
import os
import site
import sys


HERE = os.path.dirname(os.path.abspath(__file__))
LAYER = os.path.dirname(os.path.dirname(os.path.dirname(HERE)))


def _root():
    try:
        with open(os.path.join(LAYER, "lightning-xpu-layer")) as handle:
            record = dict(line.split("=", 1) for line in handle.read().splitlines() if "=" in line)
    except OSError:
        return None
    envs = record.get("prefix", "") + "/.envs"
    root = os.environ.get("LIGHTNING_XPU_ROOT", "")
    if os.path.dirname(root) == envs and os.path.basename(root).startswith(record.get("tag", "") + "."):
        return root
    return envs + "/" + record.get("build", "")


def _add(root):
    if not root or not os.path.isdir(root):
        return
    for directory in site.getsitepackages([root]):
        if os.path.isdir(directory):
            site.addsitedir(directory)
    try:
        with open(os.path.join(root, "pyvenv.cfg")) as handle:
            system = any(line.replace(" ", "").lower() == "include-system-site-packages=true"
                         for line in handle.read().splitlines())
    except OSError:
        system = False
    if system:
        for directory in site.getsitepackages([sys.base_prefix]):
            if os.path.isdir(directory):
                site.addsitedir(directory)


if os.path.realpath(sys.prefix) == os.path.realpath(LAYER):
    _add(_root())
elif os.path.realpath(os.environ.get("VIRTUAL_ENV") or "/") != os.path.realpath(LAYER):
    # Read as the user site of another interpreter (PYTHONUSERBASE is the layer's path, for `pip install --user`
    # in a conda build) that the module or setup script did not put over this layer: it stays out.
    sys.path[:] = [entry for entry in sys.path if os.path.abspath(entry) != HERE]
"""


def user_layer(tag: str, environ: Mapping[str, str]) -> str:
    home = environ.get("HOME", "")
    return f"{environ.get('LIGHTNING_XPU_USER_BASE') or f'{home}/.local/lightning-xpu'}/{tag}"


def _key_values(path: str) -> dict[str, str]:
    try:
        with open(path) as handle:
            pairs = [line.split("=", 1) for line in handle.read().splitlines() if "=" in line]
    except (OSError, UnicodeDecodeError):
        return {}
    return {key.strip(): value.strip() for key, value in pairs}


def build_python(root: str) -> str:
    """X.Y of the build's Python (its lib/pythonX.Y), '' when none is found."""
    try:
        names = os.listdir(f"{root}/lib")
    except OSError:
        return ""
    found = sorted(name[6:] for name in names if name.startswith("python3.") and os.path.isdir(f"{root}/lib/{name}"))
    return found[0] if found else ""


def build_pins(root: str) -> str:
    """The sha256 of the build's pins (share/lightning-xpu/constraints.txt), 'none' for a build without pins, ''
    when the build cannot be read."""
    import hashlib

    if not os.path.isdir(root):
        return ""
    try:
        with open(f"{root}/share/lightning-xpu/constraints.txt", "rb") as handle:
            return hashlib.sha256(handle.read()).hexdigest()
    except FileNotFoundError:
        return "none"
    except OSError:
        return ""


def interpreter_home(root: str) -> str:
    """Where a venv made from the build's Python finds its interpreter: a venv build's base (its pyvenv.cfg home),
    a conda build's own bin/."""
    return _key_values(f"{root}/pyvenv.cfg").get("home") or f"{root}/bin"


def read_layer(layer: str) -> dict[str, str]:
    """The layer's record. A layer made before records existed names only its build (its environment file): its
    prefix and tag come from that path, Python and pins from the build where it still exists."""
    record = _key_values(f"{layer}/{LAYER_RECORD}")
    if record.get("build"):
        return record
    try:
        with open(f"{layer}/{LAYER_ENVIRONMENT}") as handle:
            root = handle.read().strip()
    except OSError:
        return {}
    envs, build = os.path.split(root)
    if os.path.basename(envs) != ".envs" or "." not in build:
        return {}
    return {"prefix": os.path.dirname(envs), "tag": build.rsplit(".", 1)[0], "build": build,
            "python": build_python(root), "pins": build_pins(root), "legacy": "1"}  # fmt: skip


def same_path(one: str, other: str) -> bool:
    return one == other or os.path.realpath(one) == os.path.realpath(other)


def layer_verdict(layer: str, prefix: str, tag: str, root: str) -> tuple[str, str]:
    """Whether the layer at LAYER serves the build ROOT of PREFIX/TAG: ("ok" | "repair" | "refuse" | "none", why).
    The rules: a layer of another prefix or tag is never used; one over ROOT is used; one over another build with
    the same Python and pins is repointed over ROOT (what was installed into it was resolved against the same
    Python and pins); any other is refused, and `lightning-xpu user-env` moves it over ROOT."""
    if not os.path.isfile(f"{layer}/pyvenv.cfg"):
        return "none", "no user layer"
    # Its code runs in every Python this shell starts: only a layer of this account's own, that nobody else may
    # write into, is used (a LIGHTNING_XPU_USER_BASE another account can write could hold a layer of theirs).
    info = os.stat(layer)
    if info.st_uid != os.getuid() or info.st_mode & 0o002:
        return "refuse", f"it is not yours alone (owner uid {info.st_uid}, mode {info.st_mode & 0o7777:o})"
    record, build = read_layer(layer), os.path.basename(root)
    if not record:
        return "refuse", "it records no lightning-xpu build"
    if not same_path(record.get("prefix", ""), prefix):
        return "refuse", f"it belongs to the install {record.get('prefix') or '?'}, not {prefix}"
    if record.get("tag") != tag:
        return "refuse", f"it belongs to {record.get('tag') or '?'}, not {tag}"
    current = _key_values(f"{layer}/pyvenv.cfg").get("home") == interpreter_home(root)
    if record["build"] == build and current and not record.get("legacy"):
        return "ok", f"over {build}"
    python, pins = build_python(root), build_pins(root)
    if record.get("python") != python:
        return "refuse", f"it was made over {record['build']} with Python {record.get('python') or '?'}, not {python}"
    if not record.get("pins"):
        return "refuse", f"it was made over {record['build']}, which is gone: its pins cannot be compared"
    if record["pins"] != pins:
        return "refuse", f"it was made over {record['build']}, whose pins differ from {build}'s"
    return "repair", f"made over {record['build']}: same Python {python} and pins"


def _link_new(path: str, target: str) -> None:
    temporary = f"{path}.{host()}.{os.getpid()}.tmp"  # unique on a file system shared by nodes
    if os.path.lexists(temporary):
        os.remove(temporary)
    os.symlink(target, temporary)
    os.replace(temporary, path)


def point_layer(layer: str, prefix: str, tag: str, root: str) -> None:
    """Make the layer serve the build ROOT of PREFIX/TAG: its site .pth, its environment file, its record and,
    where the build's interpreter lives elsewhere (a conda build's own), its pyvenv.cfg and bin/pythonX.Y link."""
    python, home = build_python(root), interpreter_home(root)
    config = f"{layer}/pyvenv.cfg"
    if _key_values(config).get("home") != home:
        with open(config) as handle:
            lines = handle.read().splitlines()
        keys = [line.partition("=")[0].strip() for line in lines]
        values = {"home": home, "executable": f"{home}/python{python}"}
        write_file(config, "".join(f"{key} = {values[key]}\n" if key in values else f"{line}\n"
                                   for key, line in zip(keys, lines)))  # fmt: skip
        _link_new(f"{layer}/bin/python{python}", f"{home}/python{python}")
    sites = f"{layer}/lib/python{python}/site-packages"
    write_file(f"{sites}/{LAYER_MODULE}.py", _LAYER_SITES)
    write_file(f"{sites}/{LAYER_PTH}", f"import {LAYER_MODULE}\n")
    write_file(f"{layer}/{LAYER_ENVIRONMENT}", f"{root}\n")
    fields = {"prefix": prefix, "tag": tag, "build": os.path.basename(root), "python": python,
              "pins": build_pins(root)}  # fmt: skip
    write_file(f"{layer}/{LAYER_RECORD}", "".join(f"{key}={value}\n" for key, value in fields.items()))


def layer_for(prefix: str, tag: str, root: str, me: str) -> tuple[str, list[str]]:
    """The user layer to enable over ROOT ('' for none), repointed where the rules allow, and the lines to show."""
    layer = user_layer(tag, os.environ)
    verdict, why = layer_verdict(layer, prefix, tag, root)
    if verdict in ("ok", "none"):
        return (layer if verdict == "ok" else ""), []
    build = os.path.basename(root)
    if verdict == "repair":
        try:
            point_layer(layer, prefix, tag, root)
        except OSError as exc:
            return "", [f"{me}: warning: your user layer {layer} is not used: it was {why}, and repointing it over "
                        f"{build} failed ({exc.strerror}): run lightning-xpu user-env"]  # fmt: skip
        return layer, [f"{me}: note: your user layer {layer} now runs over {build} ({why})"]
    return "", [f"{me}: warning: {refusal(layer, why, build)}"]


def refusal(layer: str, why: str, build: str) -> str:
    """Why the layer is not used over BUILD, and the fix (also `lightning-xpu doctor`'s)."""
    if why.startswith("it belongs to the install"):
        fix = "for this install, export LIGHTNING_XPU_USER_BASE=<another directory> and run lightning-xpu user-env"
    elif why.startswith("it is not yours alone"):
        fix = "export LIGHTNING_XPU_USER_BASE=<a directory only you can write> and run lightning-xpu user-env"
    else:
        fix = f"run lightning-xpu user-env to move it over {build} (your packages stay)"
    return f"your user layer {layer} is not used: {why}; {fix}"


def setup_lines(prefix: str, tag: str, pid: str) -> list[str]:
    """The lines the library evaluates, in order: lease, PATH without another lightning-xpu environment's bin,
    site modules, then this environment's variables (its bin/ before what the modules added), the layer's lines."""
    me, root, environ = f"lightning-setup-{tag}.sh", pinned_build(f"{prefix}/{tag}"), os.environ
    home, old, path = environ.get("HOME", ""), environ.get("LIGHTNING_XPU_ROOT", ""), environ.get("PATH", "")
    # The Jupyter kernel's launcher (lightning_xpu/commands/kernel.py) sources this script and execs the kernel.
    what = "kernel" if environ.get("LIGHTNING_XPU_KERNEL") == "1" else "setup-script"
    lease, lines = lease_lines(prefix, root, pid, me, what, "fd")
    if not lease:
        lines = [f"echo {_word(line)} >&2" for line in lines]
    if old and old != root:
        path = f":{path}:".replace(f":{old}/bin:", ":").removeprefix(":").removesuffix(":")
        lines.append(f"PATH={_word(path)}")
    lines += module_lines(root, me)
    if f":{root}/bin:" not in f":{path}:":
        lines.append(f'PATH={_word(f"{root}/bin")}"${{PATH:+:$PATH}}"')
        path = f"{root}/bin:{path}"
    exports = environment_exports(root, tag, home)
    caches, said = cache_exports(root, me)
    exports.update(caches)
    # What an earlier setup script of ours set and this one does not (its cache was refused): no longer set.
    lines += [f"unset {name}" for name in stale_caches(caches, environ)]
    lines += [f"echo {_word(line)} >&2" for line in said]
    # The user's writable layer (`lightning-xpu user-env`): its bin/ first, and the venv pip and uv install into.
    layer, said = layer_for(prefix, tag, root, me)
    if layer:
        if f":{layer}/bin:" not in f":{path}:":
            lines.append(f'PATH={_word(f"{layer}/bin")}:"$PATH"')
        exports["VIRTUAL_ENV"] = layer
    lines += [f"echo {_word(line)} >&2" for line in said]
    exports["JUPYTER_PATH"] = with_jupyter(prefix, environ.get("JUPYTER_PATH", ""))
    return [*lines, "export PATH", *(f"export {name}={_word(value)}" for name, value in exports.items())]


def with_jupyter(prefix: str, listed: str) -> str:
    """JUPYTER_PATH with <prefix>/share/jupyter first, where `lightning-xpu kernel install --prefix-wide` writes
    the install's kernel specs (lightning_xpu/commands/kernel.py): Jupyter then lists them (the modulefile body
    prepends the same directory)."""
    data = f"{prefix}/share/jupyter"
    return ":".join([data, *(entry for entry in listed.split(":") if entry and entry != data)])


def modulefile_lines(prefix: str, tag: str) -> list[str]:
    """What the modulefile body (modulefiles/lightning-xpu/.lightning-xpu.lua) reads, one `key=value` a line: the
    pinned build (root=), the shell line that holds the lease's flock (flock=; the body runs it in bash and zsh),
    the user layer to enable (layer=), each variable to set (env=NAME=VALUE: the caches) and each line to show
    (say=). Outside a scheduler the lease's holder is the
    session leader: Lmod runs in a child of the shell."""
    me, root = f"lightning-xpu/{tag}", pinned_build(f"{prefix}/{tag}")
    lease, said = lease_lines(prefix, root, str(os.getsid(0)), me, "module", "__lxpu_lease_fd")
    lines = [f"root={root}", *(f"{'flock' if lease else 'say'}={line}" for line in said)]
    if os.path.isfile(f"{root}/bin/python"):
        layer, said = layer_for(prefix, tag, root, me)
        lines += [*([f"layer={layer}"] if layer else []), *(f"say={line}" for line in said)]
        caches, said = cache_exports(root, me)
        lines += [*(f"env={name}={value}" for name, value in caches.items()), *(f"say={line}" for line in said)]
    return [line for line in lines if "\n" not in line]


if __name__ == "__main__":
    if sys.argv[1:2] == ["--modulefile"]:
        print("\n".join(modulefile_lines(*sys.argv[2:4])))
    else:
        print("\n".join(setup_lines(*sys.argv[1:4])))
