"""What the setup library (scripts/common/setup/lightning-setup.lib.sh) need not do in shell.

The install writes this file next to the library, as .lightning-setup.lib.py (lxpu_engine/tagfiles.py), and the
library runs it with the environment's own Python, `python -I -S .lightning-setup.lib.py PREFIX TAG SHELL_PID`,
then evaluates the shell lines it prints (every value quoted). It pins the ONE build <prefix>/<TAG> points to now,
as the modulefile body does; records the lease whose shared flock the shell then takes (the lease format is here,
lease_text: the install's own lease uses it too; lxpu_engine/leases.py reads them); loads the site's modules; and
sets the variables `module load` sets. It runs at every setup: standard library only, little of it, to start fast.
"""

from __future__ import annotations

import os
import sys
import time

_URL_SAFE = frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789/._~-")
_HOPS = 8  # symbolic links followed from <prefix>/<tag>, as the modulefile body does
PINS = "/share/lightning-xpu/constraints.txt"  # an environment's pins (lxpu_engine/pins.py RELATIVE)


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


def lease_lines(prefix: str, root: str, pid: str, me: str) -> list[str]:
    """Lease the build while this job (outside a scheduler, this shell) lives: the shell and every process it
    starts, a nohup job that outlives it too, hold the lease's shared flock."""
    if os.path.dirname(root) != f"{prefix}/.envs" or not os.access(f"{root}/bin/python", os.X_OK):
        return []
    build, (job, holder) = os.path.basename(root), scheduler_job()
    leases = f"{prefix}/.leases"
    lease = f"{leases}/{build}@{host()}.{holder or f'pid-{pid}'}"
    try:
        os.makedirs(leases, exist_ok=True)
        os.umask(0o022)  # never world-writable, whatever the shell's umask
        with open(lease, "w") as handle:
            handle.write(lease_text(build, job, pid, os.environ.get("USER", ""), "setup-script"))
    except OSError:
        print(f"{me}: warning: cannot record a lease in {leases}: a --prune or --uninstall may remove {build} while "
              "you use it", file=sys.stderr)  # fmt: skip
        return []
    quoted = _word(lease)
    return [f'{{ exec {{fd}}<{quoted} && flock -s "$fd" && echo held=flock >>{quoted}; }} 2>/dev/null || :']


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
    these too, lxpu_engine/build.py)."""
    # Each name spelt out as a key of exports: recipes/render.py checks them against recipes/known_env.toml.
    exports: dict[str, str] = {}
    if os.path.isdir(f"{root}/conda-meta"):
        exports["CONDA_PREFIX"] = root
    else:
        exports["VIRTUAL_ENV"] = root
    exports["PYTHONUSERBASE"] = f"{home}/.local/lightning-xpu/{tag}"  # pip install --user in a conda environment
    exports["LIGHTNING_XPU_ROOT"] = root
    # The environment's pins bind every pip and uv install (lxpu_engine/pins.py), next to a site's own constraints.
    if os.path.isfile(f"{root}{PINS}"):
        exports["PIP_CONSTRAINT"] = with_pins(os.environ.get("PIP_CONSTRAINT", ""), file_url(f"{root}{PINS}"))
        exports["UV_CONSTRAINT"] = with_pins(os.environ.get("UV_CONSTRAINT", ""), file_url(f"{root}{PINS}"))
    return exports


def setup_lines(prefix: str, tag: str, pid: str) -> list[str]:
    """The lines the library evaluates, in order: lease, PATH without another lightning-xpu environment's bin,
    site modules, then this environment's variables (its bin/ before what the modules added)."""
    me, root, environ = f"lightning-setup-{tag}.sh", pinned_build(f"{prefix}/{tag}"), os.environ
    home, old, path = environ.get("HOME", ""), environ.get("LIGHTNING_XPU_ROOT", ""), environ.get("PATH", "")
    lines = lease_lines(prefix, root, pid, me)
    if old and old != root:
        path = f":{path}:".replace(f":{old}/bin:", ":").removeprefix(":").removesuffix(":")
        lines.append(f"PATH={_word(path)}")
    lines += module_lines(root, me)
    if f":{root}/bin:" not in f":{path}:":
        lines.append(f'PATH={_word(f"{root}/bin")}"${{PATH:+:$PATH}}"')
        path = f"{root}/bin:{path}"
    exports = environment_exports(root, tag, home)
    # The user's writable layer (`lightning-xpu user-env`): its bin/ first, and the venv pip and uv install into.
    layer = f"{environ.get('LIGHTNING_XPU_USER_BASE') or f'{home}/.local/lightning-xpu'}/{tag}"
    if os.path.isfile(f"{layer}/pyvenv.cfg"):
        if f":{layer}/bin:" not in f":{path}:":
            lines.append(f'PATH={_word(f"{layer}/bin")}:"$PATH"')
        exports["VIRTUAL_ENV"] = layer
    return [*lines, "export PATH", *(f"export {name}={_word(value)}" for name, value in exports.items())]


if __name__ == "__main__":
    print("\n".join(setup_lines(*sys.argv[1:4])))
