"""Installer back ends of the install: uv where it can be had (the default), pip otherwise.

Why uv: it installs a warm-cache torch stack in about a second where pip takes tens (docs/performance.md). What
must not change with it (issue 12): hash-checked locks, every package source override, and this machine's own pip
configuration, which uv does not read: lib/lxpu_admin/envside/uv_sources.py maps each resolution key of
`pip config list` to uv's options and refuses, in one line, a key it cannot map.

The driver calls `validate` (bad input exits 2 before anything is written); the first build step
(build.create_env) calls `setup` (after the lock: uv from the cache or bootstrapped, or pip and why), then the
build steps call `create_venv`, `install` and `wheel`.
"""

from __future__ import annotations

import atexit
import json
import os
import re
import shutil
import subprocess

from lxpu_admin.envside import uv_sources
from lxpu_admin.install import toolcache
from lxpu_admin.install.commands import engine_command, run_logged
from lxpu_admin.install.inputs import pip_seed
from lxpu_admin.install.state import State, bad_input, command_output, fail, quote, run, say, warn

# The pinned, hash-checked uv (one line per platform wheel); its wheel is kept in the tool cache and each run
# unpacks its own copy (lxpu_admin/install/toolcache.py).
UV_LOCK = "recipes/tools/install-tools.txt"
# Copies, never hard links into uv's cache (uv's default on Linux), which a later change of a cache file carried
# into every published build at once (issue 27). Not "clone": where a reflink fails (ext4, Lustre, another file
# system) uv 0.13.9 falls back to a hard link ("Failed to reflink ...: falling back", measured on ext4).
LINK_MODE = "copy"


class Installer:
    def __init__(self, state: State) -> None:
        self.state = state
        self.kind = state.options["installer"]
        self.why = ""
        self.version = ""
        self.uv = ""
        self.uv_version = ""
        self.uv_dir = ""
        self.uv_cache = ""
        self.uv_python = ""
        self.uv_args: list[str] = []
        self.uv_env: dict[str, str] = {}
        self.uv_constraints: list[str] = []
        self.link_mode = LINK_MODE

    # ---- inputs ----

    def validate(self) -> None:
        state = self.state
        if self.kind not in ("uv", "pip", "auto"):
            raise bad_input(state, f"--installer must be uv, pip or auto, not '{self.kind}'")
        if self.kind == "pip":
            self.why = "--installer pip"
            return
        # Over --base-python the environment reuses the base's packages, which pip sees (through the .pth file that
        # points at a base venv, too) and uv does not: uv would resolve torch again and install another build.
        if state.base_python:
            if self.kind == "uv":
                raise bad_input(state, "--installer uv cannot build over --base-python (uv does not see the base "
                                       "Python's packages): drop one of them")
            self.kind, self.why = "pip", "--base-python: pip sees the base Python's packages, uv does not"
            return
        lock = f"{state.source}/{UV_LOCK}"
        if not os.path.isfile(lock):
            raise bad_input(state, f"{lock} is missing: pass the repository with --source, or --installer pip")
        uv_version = toolcache.pinned_version(lock, "uv")
        if not uv_version:
            raise bad_input(state, f"{lock} pins no uv==<version>: restore it from the repository")
        self.uv_version = uv_version
        self.uv_python = state.python or shutil.which("python3") or ""
        if not self.uv_python:
            self._fallback("no Python to bootstrap uv with")
            return
        # The package sources, as uv options. A setting uv cannot honour is bad input, whatever --installer says:
        # auto must not quietly resolve differently from pip.
        if state.sources_mode == "system":  # that Python's pip configuration, read by that Python
            uv = json.loads(self._uv_sources(state, "from-pip-config"))
        else:
            try:
                uv = uv_sources.as_uv(uv_sources.settings_from_options(state.pip_options))
            except uv_sources.Unmappable as exc:
                raise bad_input(state, str(exc)) from None
        self.uv_args += uv["args"]
        self.uv_env.update(uv["env"])
        self.uv_constraints += uv["constraints"]
        # uv otherwise stops at the first index that has a package; pip merges every index.
        self.uv_args += ["--index-strategy", "unsafe-best-match"]
        if state.lock_path and self.uv_constraints:
            self._uv_sources(state, "check-constraints", state.lock_path, *self.uv_constraints)
        self.uv_dir = state.tmp(f"uv-{self.uv_version}")
        self.uv_cache = os.environ.get("LIGHTNING_XPU_UV_CACHE_DIR") or f"{state.prefix}/.cache/uv"
        refused = toolcache.refusal(self.uv_cache) if state.action == "install" else ""
        if refused:
            raise bad_input(state, refused)

    def _uv_sources(self, state: State, *args: str) -> str:
        """lxpu_admin.envside.uv_sources ARGS on the Python uv is bootstrapped with (its pip configuration, its pip's
        packaging): its output, or bad input with its one line."""
        argv, env = engine_command(self.uv_python, "envside.uv_sources", *args)
        done = subprocess.run(argv, env=env, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            raise bad_input(state, done.stderr.strip().removeprefix("error: "))
        return done.stdout

    def _fallback(self, why: str) -> None:
        if self.kind == "uv":
            raise fail(self.state, f"uv could not be had: {why} (use --installer pip)")
        self.kind, self.why = "pip", f"uv could not be had ({why})"
        say(f"note: uv could not be had ({why}): installing with pip instead")

    # ---- after the lock ----

    def setup(self) -> None:
        """uv for this run: a fresh copy unpacked from the pinned wheel, whose sha256 is checked against the lock
        first (toolcache.provide: the wheel kept in the tool cache, else fetched by pip). The copy is this run's own
        (one of its temporary paths, removed at its end; the next run removes a killed run's)."""
        state = self.state
        if self.kind == "pip":
            status, out = command_output(state.python or "python3", "-m", "pip", "--version")
            self.version = out.split()[1] if status == 0 and len(out.split()) > 1 else ""
            say(f"installer: pip {self.version or '(version unknown)'} ({self.why})")
            return
        lock = f"{state.source}/{UV_LOCK}"
        self.uv = f"{self.uv_dir}/bin/uv"
        if state.dry:
            argv = toolcache.download_argv(self.uv_python, f"{self.uv_dir}.wheels", state.pip_options, lock)
            say(f"installer: + {quote(*argv)} (unless the tool cache keeps the wheel), then unpacked into "
                f"{quote(self.uv_dir)}")
        elif not self._provide(lock):
            return self.setup()
        self.why = self.why or "default"
        self.kind, self.version = "uv", self.uv_version
        if not state.dry:
            os.makedirs(self.uv_cache, exist_ok=True)
        say(f"installer: uv, cache {self.uv_cache} (link mode {self.link_mode})")

    def _provide(self, lock: str) -> bool:
        """The checked copy of uv in uv_dir; False: uv could not be had, and the installer fell back to pip."""
        state = self.state
        shutil.rmtree(self.uv_dir, ignore_errors=True)
        atexit.register(shutil.rmtree, self.uv_dir, True)
        why = toolcache.provide("uv", self.uv_version, lock, self.uv_cache, self.uv_dir, self.uv_python,
                                state.pip_options, lambda line: say(f"installer: {line}"))  # fmt: skip
        if not why and not self._runs(self.uv):
            why = f"{self.uv} does not run on this machine"
        if why:
            shutil.rmtree(self.uv_dir, ignore_errors=True)
            self._fallback(why)
            return False
        return True

    def _runs(self, uv: str) -> bool:
        return os.access(uv, os.X_OK) and command_output(uv, "--version")[1].startswith(f"uv {self.uv_version}")

    # ---- the operations ----

    def _uv(self, *args: str, checked: bool) -> None:
        """uv with the sources and environment settings mapped from pip's; CHECKED: the failure reason is uv's own,
        on one line, and the status 1 (the install's 2 means bad input, which this is not)."""
        state = self.state
        settings = {**self.uv_env, "UV_CACHE_DIR": self.uv_cache, "UV_LINK_MODE": self.link_mode,
                    "UV_PYTHON_DOWNLOADS": "never", "UV_NO_PROGRESS": "1"}  # fmt: skip
        argv = ["env", *(f"{name}={value}" for name, value in settings.items()), self.uv, *args]
        try:
            if checked:
                run_logged(state, argv, lambda out, status: f"uv {args[0]} {args[1]} failed (exit "
                                                            f"{status}){uv_reason(out)}", exit_status=1)
            else:
                run(state, *argv)
        finally:
            # uv makes its lock files world-writable on purpose (any user may share a cache); a prefix is shared
            # read-only, so nobody but its owner may write there.
            if not state.dry and os.path.isdir(self.uv_cache):
                subprocess.run(["find", self.uv_cache, "-perm", "-o+w", "!", "-type", "l", "-exec", "chmod", "o-w",
                                "{}", "+"], capture_output=True, check=False)  # fmt: skip

    def _pip(self, *args: str) -> None:
        """pip, with its last ERROR line as the failure reason (the full output is in the log above it)."""
        state = self.state
        argv = [f"{state.env}/bin/python", "-m", "pip", "--disable-pip-version-check", "--no-input", *args]

        def reason(out: str, status: int) -> str:
            errors = [line for line in out.splitlines() if line.startswith("ERROR:")]
            why = f": {errors[-1].removeprefix('ERROR: ')}" if errors else ""
            return f"pip {args[0]} failed (exit {status}){why}"

        run_logged(state, argv, reason)

    def create_venv(self, env: str, *extra: str) -> None:
        state = self.state
        if self.kind == "pip":
            run(state, state.python, "-m", "venv", *extra, env)
            return
        # Relocatable: scripts and activation find the environment from their own location, which staging to
        # node-local disk relies on. uv seeds no pip: the Python's own bundled pip wheel (ensurepip's, so pinned by
        # the Python and needing no download) is installed, as `python -m venv` would.
        self._uv("venv", "--quiet", "--relocatable", "--python", state.python, *extra, env, checked=False)
        bundled = pip_seed(state.python)[1]  # ensurepip's wheel, where that ensurepip takes it from
        if bundled:
            self._uv("pip", "install", "--quiet", "--python", f"{env}/bin/python", "--no-index", "--no-deps", bundled,
                     checked=False)  # fmt: skip
        else:
            warn("this Python bundles no pip wheel (ensurepip): the environment has no pip")

    def install(self, *args: str) -> None:
        """pip-install arguments (-r FILE, --require-hashes, a wheel path) through the chosen installer."""
        if self.kind == "pip":
            self._pip("install", *self.state.pip_options, *args)
            return
        # Without a lock, constraints are passed on; a lock's exact pins were checked against them already.
        constraints = [] if "--require-hashes" in args else [
            word for constraint in self.uv_constraints for word in ("--constraint", constraint)
        ]
        self._uv("pip", "install", "--python", f"{self.state.env}/bin/python", *self.uv_args, *constraints, *args,
                 checked=True)  # fmt: skip

    def wheel(self, source: str, wheel_dir: str) -> None:
        """lightning_xpu's wheel, built without build isolation."""
        if self.kind == "pip":
            self._pip("wheel", "--no-deps", "--no-build-isolation", "--wheel-dir", wheel_dir, source)
            return
        self._uv("build", "--quiet", "--wheel", "--no-build-isolation", "--python", f"{self.state.env}/bin/python",
                 "--out-dir", wheel_dir, source, checked=True)  # fmt: skip


def uv_reason(out: str) -> str:
    """uv's own reason, on one line: an unsatisfiable pin says why under "No solution found" (the line after
    "╰─▶"); anything else is "error: ..." followed by its causes, the last one the most specific."""
    for line in out.splitlines():
        if "╰─▶" in line:
            return ": " + line.split("╰─▶", 1)[1].strip()
    errors = [line.removeprefix("error: ") for line in out.splitlines() if line.startswith("error: ")]
    causes = [m.group(2) for line in out.splitlines() if (m := re.match(r"^ *(cause|Caused by): (.*)", line))]
    why = (errors[0] if errors else "") + (f" ({causes[-1]})" if causes else "")
    return f": {why}" if why else ""
