"""Node-local compile caches on every node of a job (issue 30).

The module or setup script points Triton's, TorchInductor's and the SYCL/Level Zero runtimes' caches at <node
tmp>/lxpu-<uid>/cache.<build> (LIGHTNING_XPU_CACHE; the variables it chose in LIGHTNING_XPU_CACHE_VARIABLES;
lxpu_admin/envside/setup_lib.py cache_exports) and makes that directory on the node where it is loaded. A rank on
another node inherits the variables but not the directory, and the path is predictable: another account could have
made it there first, and the caches hold code that gets loaded. So before torch or triton is first imported (the
start-up hook, `_autoload`), the directory is made or checked on this node by the ONE helper for private node-local
paths, `lightning-xpu-stage --private-dir`. Where it refuses, this process and its children use a new private
temporary directory instead, with one warning line naming the refusal and its fix."""

from __future__ import annotations

import os
import sys

CACHE_ROOT = "LIGHTNING_XPU_CACHE"
CACHE_VARIABLES = "LIGHTNING_XPU_CACHE_VARIABLES"
HELPER = "lightning-xpu-stage"


def _helper() -> str | None:
    """The environment's lightning-xpu-stage: the build the module pointed at, else this interpreter's."""
    for root in (os.environ.get("LIGHTNING_XPU_ROOT", ""), sys.prefix):
        path = os.path.join(root, "bin", HELPER)
        if root and os.access(path, os.X_OK):
            return path
    return None


def _already_private(*paths: str) -> bool:
    """Whether each of PATHS is a real directory (no link) of this account that no other account may write: then
    nobody else made or changed it, and the helper (a bash process) need not run again in every process that
    imports torch on this node (DataLoader workers, launchers). Anything else goes through the helper's checks."""
    import stat

    try:
        found = [os.lstat(path) for path in paths]
    except OSError:
        return False
    return all(stat.S_ISDIR(s.st_mode) and s.st_uid == os.geteuid() and not s.st_mode & 0o022 for s in found)


def private_cache_dir(root: str) -> tuple[str, str]:
    """ROOT (<base>/lxpu-<uid>/<name>) made or checked on this node by `lightning-xpu-stage --private-dir <name>`
    under <base>: (the path it printed, "") or ("", the one line why not)."""
    import subprocess

    parent, name = os.path.split(root)
    base, private = os.path.split(parent)
    if private != f"lxpu-{os.geteuid()}":
        return "", f"{root} is not under this account's private directory lxpu-{os.geteuid()}"
    if _already_private(parent, root):
        return root, ""
    helper = _helper()
    if helper is None:
        return "", f"no {HELPER} in {os.environ.get('LIGHTNING_XPU_ROOT') or sys.prefix}/bin to make {root} with"
    done = subprocess.run([helper, "--private-dir", name], env={**os.environ, "LIGHTNING_XPU_STAGE_DIR": base},
                          capture_output=True, text=True, check=False)  # fmt: skip
    path = done.stdout.strip()
    if done.returncode != 0 or not path.startswith("/"):
        lines = (done.stderr.strip() or f"{HELPER} exited with status {done.returncode}").splitlines()
        return "", lines[-1].removeprefix(f"{HELPER}: error: ")
    return path, ""


def _repoint(names: list[str], old: str, new: str) -> None:
    """Our variables (and LIGHTNING_XPU_CACHE) moved from OLD to NEW in this process's environment."""
    for name in (CACHE_ROOT, *names):
        value = os.environ.get(name, "")
        if value == old or value.startswith(old + "/"):
            os.environ[name] = new + value[len(old) :]


def ensure_node_caches() -> None:
    """Make this node's cache directory private before any cache is used (see the module's docstring), and the
    directories our variables name inside it (the compute runtime ignores a NEO_CACHE_DIR that does not exist)."""
    root, names = os.environ.get(CACHE_ROOT, ""), os.environ.get(CACHE_VARIABLES, "").split()
    if not root or not names:
        return
    path, why = private_cache_dir(root)
    if not path:
        import tempfile

        path = tempfile.mkdtemp(prefix="lxpu-cache-")
        print(f"lightning-xpu: warning: compile caches: {why}; this process uses {path} instead", file=sys.stderr)
    if path != root:
        _repoint(names, root, path)
    for name in names:
        value = os.environ.get(name, "")
        if name.endswith("_DIR") and value.startswith(path + "/"):
            os.makedirs(value, mode=0o700, exist_ok=True)
