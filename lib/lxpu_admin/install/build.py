"""The build steps: build the environment at its final path (venvs are not relocatable), check it, pack it and
record it. Nothing here is visible to anyone before the publish step (lxpu_admin/install/publish.py)."""

from __future__ import annotations

import glob
import json
import os
import re
import shutil
import subprocess
import sys
import threading

from lxpu_admin.envside.setup_lib import environment_exports
from lxpu_admin.install.commands import engine_command, engine_on
from lxpu_admin.install.space import check_space
from lxpu_admin.install.state import State, fail, quote, run, say, warn

# The repository's files lightning_xpu's wheel is built from (inputs.py hashes them too).
PACKAGE_SOURCES = ("pyproject.toml", "setup.cfg", "setup.py", "README.md", "README.rst", "LICENSE", "lightning_xpu")
# The autoload hook: any interpreter of the environment imports lightning_xpu._autoload at start-up.
_HOOK = (
    'import sys; any(hasattr(f, "find_spec") and f.find_spec("lightning_xpu", None) for f in sys.meta_path)'
    ' and __import__("lightning_xpu._autoload")\n'
)


def share(state: State) -> str:
    return f"{state.env}/share/lightning-xpu"


def write_new(state: State, path: str, text: str) -> None:
    """A file of the new environment (not yet visible to anyone: no temporary file needed)."""
    say(f"+ write {quote(path)}")
    if not state.dry:
        with open(path, "w") as handle:
            handle.write(text)


def create_env(state: State) -> None:
    env = state.env
    check_space(state)  # where the check step expected a no-op and left it to the first build step
    say(f"build: {env}")
    if not state.dry:
        os.makedirs(state.envs, exist_ok=True)
    state.installer.setup()
    if state.env_manager == "conda":
        # conda builds the conda layer only; the pip layer goes through the same pip step as a venv, so sources,
        # locks and hashes are handled once. lxpu_admin/install/conda_layer.py: py-rattler in a child process (or
        # --conda-exe), every package's sha256 checked, built beside the final path and renamed into place.
        args = ["create", env, f"--python={state.python_version}"]
        args += [f"--channel={channel}" for channel in state.data["conda_channels"]]
        if state.options.get("conda_channel"):
            args.append(f"--conda-channel={state.options['conda_channel']}")
        if state.options.get("conda_exe"):
            args.append(f"--conda-exe={state.options['conda_exe']}")
        lock = f"{state.source}/recipes/locks/conda/python-{state.python_version}.txt"
        if os.path.isfile(lock):
            args.append(f"--lock={lock}")
        args += [f"--pip-option={option}" for option in state.pip_options]
        if state.installer.uv_cache:
            args.append(f"--tool-cache={state.installer.uv_cache}")
        engine_on(state, sys.executable, "install.conda_layer", *args, failure="the conda layer could not be built",
                  why=conda_layer_error)  # fmt: skip
    elif state.base_python:
        state.installer.create_venv(env, "--system-site-packages")
        if state.base_is_venv:
            # A venv's --system-site-packages means its base interpreter's, not the base venv's: point a .pth
            # file at the base venv's site-packages so its torch is seen.
            pth = f"{state.site_packages}/_lightning_xpu_base.pth"
            argv = [state.base_python, "-c", 'import site; print("\\n".join(site.getsitepackages()))']
            say(f"+ {quote(*argv)} > {quote(pth)}")
            if not state.dry:
                with open(pth, "w") as handle:
                    subprocess.run(argv, stdout=handle, check=True)
    else:
        state.installer.create_venv(env)
    if state.dry:
        return
    if not os.access(state.env_python, os.X_OK):
        raise fail(state, f"{state.env_manager} did not create {state.env_python}")
    os.makedirs(share(state), exist_ok=True)


def conda_layer_error(output: str) -> str:
    """The conda layer's own reason: its last `error: ` line (one line that names the fix)."""
    errors = [line.removeprefix("error: ") for line in output.splitlines() if line.startswith("error: ")]
    return errors[-1] if errors else "see the lines above"


def install_packages(state: State) -> None:
    variant = state.variant_data
    reqs = f"{share(state)}/requirements.txt"
    hashes = []
    if state.lock_path:
        say(f"lock: {state.lock_path} (hash-checked)")
        hashes = ["--require-hashes"]
        if not state.dry:
            shutil.copy(state.lock_path, reqs)
    elif not state.dry:
        # The pinned build tools go in with the pins (a lock has them already, hashed).
        with open(reqs, "w") as handle:
            handle.write("".join(f"{line}\n" for line in (*variant["requirements"], *state.data["build_tools"])))
    if state.base_python and not state.dry:
        drop_base_packages(state, reqs)
    # pip's report records the hash of every file it installed (the manifest's sha256); uv has no report, and the
    # manifest takes the hashes from the lock instead.
    report = ["--report", f"{share(state)}/pip-report.json"] if state.installer.kind == "pip" else []
    state.installer.install(*hashes, *report, "-r", reqs)


# Run on the base Python: which of the requirements it already has, by name.
_BASE_HAS = r"""
import importlib.metadata as md, json, re, sys
print(json.dumps({re.sub(r"[-_.]+", "-", d.metadata["Name"]).lower(): d.version for d in md.distributions()}))
"""


def drop_base_packages(state: State, reqs: str) -> None:
    """With --base-python: requirements the base Python already satisfies by name are not reinstalled (torch above
    all); the base's versions are what the environment gets, and the manifest records them."""
    have = json.loads(subprocess.run([state.base_python, "-c", _BASE_HAS], capture_output=True, text=True,
                                     check=True).stdout)  # fmt: skip
    kept, dropped, entry = [], [], []
    with open(reqs) as handle:
        lines = handle.read().splitlines()
    for line in [*lines, ""]:
        entry.append(line)
        if line.rstrip().endswith("\\"):
            continue
        text = " ".join(part.rstrip("\\").strip() for part in entry).strip()
        entry_lines, entry = entry, []
        match = re.match(r"([A-Za-z0-9][A-Za-z0-9._-]*)", text)
        name = re.sub(r"[-_.]+", "-", match.group(1)).lower() if match and not text.startswith("-") else None
        if name in have:
            dropped.append(f"{name} {have[name]}")
        else:
            kept.extend(entry_lines)
    with open(reqs, "w") as handle:
        handle.write("\n".join(kept).strip() + "\n")
    say("from the base python (not reinstalled): " + (", ".join(dropped) or "nothing"))


def package_version(state: State) -> str:
    """lightning_xpu's version, as its wheel will carry it (pyproject.toml)."""
    with open(f"{state.source}/pyproject.toml") as handle:
        match = re.search(r'^version = "([^"]*)"$', handle.read(), re.MULTILINE)
    return match.group(1) if match else ""


def install_runtime(state: State) -> None:
    build, wheels = state.tmp("build"), f"{share(state)}/wheels"
    # Built without build isolation, by the environment's own setuptools: nothing extra to download (offline
    # wheelhouses need nothing but the recipe's packages), and from a copy, so the repository (possibly shared or
    # read-only) is never written to.
    say(f"+ copy the package sources to {quote(build)}")
    if not state.dry:
        os.makedirs(build, exist_ok=True)
        for item in PACKAGE_SOURCES:
            path = f"{state.source}/{item}"
            if os.path.isdir(path):
                shutil.copytree(path, f"{build}/{item}", ignore=shutil.ignore_patterns("__pycache__"), symlinks=True)
            elif os.path.exists(path):
                shutil.copy2(path, build)
    has_tools = (
        "import importlib.metadata as m, importlib.util as u, sys\n"
        'v = tuple(int(x) for x in m.version("setuptools").split(".")[:2])\n'
        'sys.exit(0 if v >= (70, 1) or u.find_spec("wheel") else 1)'
    )
    if not (_lock_brings_build_tools(state) if state.dry else subprocess.run(
            [state.env_python, "-c", has_tools], capture_output=True, check=False).returncode == 0):
        say("(setuptools >= 70.1, or setuptools with wheel, is needed to build the wheel: the recipe's pinned build "
            "tools)")
        install_build_tools(state)
    state.installer.wheel(build, wheels)
    if state.dry:
        state.installer.install("--no-deps", f"{wheels}/lightning_xpu-{package_version(state)}-py3-none-any.whl")
        return
    shutil.rmtree(build, ignore_errors=True)
    built = glob.glob(f"{glob.escape(wheels)}/lightning_xpu-*.whl")
    if len(built) != 1:
        raise fail(state, f"{state.installer.kind} did not build exactly one lightning_xpu wheel in {wheels}")
    # --no-deps: its dependencies (torch, packaging) came with the pins or the base Python, and the smoke job's
    # `pip check` proves it. Resolving them again here could replace the base Python's torch (uv does not see
    # packages reached through the base venv's .pth file) with another build from the indexes.
    state.installer.install("--no-deps", built[0])


def _lock_brings_build_tools(state: State) -> bool:
    """What the real run's check of the environment will find, read from the lock the packages step installs
    (setuptools >= 70.1, or wheel): the dry run then prints the same commands as the real one."""
    if not state.lock_path:
        return False
    with open(state.lock_path) as handle:
        pinned = dict(line.split()[0].split("==", 1) for line in handle if re.match(r"[A-Za-z0-9][^ ]*==", line))
    setuptools = re.match(r"(\d+)\.(\d+)", pinned.get("setuptools", ""))
    return "wheel" in pinned or bool(setuptools and (int(setuptools[1]), int(setuptools[2])) >= (70, 1))


def install_build_tools(state: State) -> None:
    """The recipe's pinned build tools, with the lock's hashes when the recipe has a lock."""
    tools = state.data["build_tools"]
    if not state.lock_path:
        state.installer.install(*tools)
        return
    reqs = f"{share(state)}/build-requirements.txt"
    say(f"+ write {quote(reqs)} ({' '.join(tools)} with their hashes from the lock)")
    if not state.dry:
        kept, keep = [], False
        with open(state.lock_path) as handle:
            for line in handle:
                if re.match(r"[A-Za-z0-9]", line):
                    keep = line.split()[0] in tools
                if keep:
                    kept.append(line)
        with open(reqs, "w") as handle:
            handle.writelines(kept)
    state.installer.install("--require-hashes", "-r", reqs)


def enable_hook(state: State) -> None:
    """The zero-code-change hook, the site's variables and modules, the toy fit the smoke job runs."""
    data, env = state.data, state.env
    write_new(state, f"{state.site_packages}/lightning_xpu-autoload.pth", _HOOK)
    write_new(state, f"{env}/lightning-xpu-site.sh", "".join(f"{line}\n" for line in data["site_env"]))
    # The modules the module and setup script load: the site's, and the one that gave the venv its Python.
    modules = list(data["modules"])
    if data["python_module"] and state.env_manager == "venv" and not state.base_python:
        modules.append(data["python_module"])
    write_new(state, f"{env}/lightning-xpu-site-modules.txt", "".join(f"{name}\n" for name in modules))
    run(state, "cp", f"{state.source}/scripts/common/toy_fit.py", f"{share(state)}/")


def write_pins(state: State) -> None:
    """The environment's pins (lxpu_admin/envside/pins.py: constraints.txt), which the module and setup script apply to
    every pip and uv install into the environment or a user layer."""
    uv = ["--uv", state.installer.uv] if state.installer.kind == "uv" else []
    engine_on(state, state.env_python, "envside.pins", "write", state.env, *uv,
              failure="writing the environment's pins (constraints.txt) failed (see above)")


def pack_relocatable(state: State) -> None:
    """Before the smoke job, which then tests the environment as it will be packed. Conda builds too (issue 30):
    their interpreter finds its prefix by itself, and the launchers made relocatable here run it from wherever the
    build is staged (a copy or a SquashFS mount), with no conda-unpack."""
    if state.env_manager not in ("venv", "conda"):
        return
    say("+ make the environment relocatable: script launchers and activate find their own directory")
    run(
        state,
        "install",
        "-m",
        "0755",
        f"{state.source}/scripts/common/stage/lightning-xpu-stage",
        f"{state.env}/bin/",
    )
    engine_on(state, state.env_python, "envside.pack", "relocatable", state.env,
              failure="making the environment relocatable failed (see above)")


def byte_compile(state: State) -> None:
    # Packages' own test suites (a tests/ or test/ directory, a fifth of the files) are never imported by a
    # training job: left as source.
    argv = [state.env_python, "-m", "compileall", "-q", "-j0", "-x", "/site-packages/.+/tests?/", f"{state.env}/lib"]
    say(f"+ {quote(*argv)}")
    if state.dry:
        return
    # compileall exits 1 when any file does not compile; some wheels ship files for newer Pythons on purpose (e.g.
    # torch's py312 test helpers), so failures are reported, not fatal.
    done = subprocess.run(argv, capture_output=True, text=True, pass_fds=state.child_fds(), check=False)
    failed = re.findall(r"^\*\*\* Error compiling '([^']*)'", done.stdout + done.stderr, re.MULTILINE)
    if failed:
        warn(f"{len(failed)} file(s) do not compile for Python {state.python_version} (left as source):")
        for path in failed:
            say(f"  {path}")
    with open(f"{share(state)}/bytecompile-failures.txt", "w") as handle:
        handle.write("".join(f"{path}\n" for path in failed))
    if any("/site-packages/lightning_xpu/" in path for path in failed):
        raise fail(state, "lightning_xpu itself does not compile")


def start_pack(state: State) -> None:
    state.packer = Packer()
    state.packer.start(state)


def finish_pack(state: State) -> None:
    state.packer.finish(state)


def stop_pack(state: State) -> None:
    """A failed or interrupted install stops the image's writer before its build is removed."""
    if state.packer is not None:
        state.packer.stop()


class Packer:
    """The packed image for node-local staging (lxpu_admin/envside/pack.py), written and checked while the smoke job
    runs (about a third of a warm install's time on 2 cores): the smoke job writes nothing into the environment but
    smoke.json, which the image leaves out, and bytecode (PYTHONDONTWRITEBYTECODE there). Its output is kept in
    memory (never in a file on the disk it may be filling) and printed by the pack step; a failed or interrupted
    install stops it, and everything it started (pack.py leads its own process group), before the build is
    removed. A pack that fails (a full disk above all: pack.py never records a degraded image as ok) fails the
    install with pack's own reason, so the next run, once there is room, builds the image again."""

    def __init__(self) -> None:
        self.child: subprocess.Popen[bytes] | None = None
        self.reader: threading.Thread | None = None
        self.output = bytearray()

    def start(self, state: State) -> None:
        if state.dry:
            return
        sys.stdout.flush()
        argv, env = engine_command(state.env_python, "envside.pack", "make", state.env, state.data["site"],
                                   state.tag)  # fmt: skip
        self.child = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                      pass_fds=state.child_fds())  # fmt: skip
        stream = self.child.stdout
        assert stream is not None
        self.reader = threading.Thread(target=lambda: self.output.extend(stream.read()), daemon=True)
        self.reader.start()

    def finish(self, state: State) -> None:
        # Printed here by both runs (the real one started it before the smoke job): the same step list.
        argv = engine_command(state.env_python, "envside.pack", "make", state.env, state.data["site"], state.tag)[0]
        say(f"+ {quote(*argv)} (during the smoke job)")
        if state.dry:
            return
        assert self.child is not None and self.reader is not None
        status = self.child.wait()
        self.reader.join()
        self.child = None
        text = self.output.decode(errors="replace")
        sys.stdout.write(text)
        if status != 0:
            errors = [line.removeprefix("ERROR: ") for line in text.splitlines() if line.startswith("ERROR: ")]
            raise fail(state, f"writing the packed image failed (exit {status}): "
                              f"{errors[-1] if errors else 'see above'}")

    def stop(self) -> None:
        if self.child is not None:
            self.child.terminate()
            self.child.wait()
            self.child = None


def smoke(state: State) -> None:
    """The environment as the setup script and modulefile give it: `lightning-xpu validate --level smoke` (its
    console script: `python -m` would import a lightning_xpu from the working directory, a checkout's)."""
    env = state.env
    argv = [f"{env}/bin/lightning-xpu", "validate", "--level", "smoke", "--json", f"{share(state)}/smoke.json"]
    if state.variant == "xpu":
        argv.append("--require-xpu")
    say(f"+ {quote(*argv)}")
    if state.dry:
        return
    # The site's variables, as the setup script sets them (`export NAME="${NAME:-value}"` lines).
    script = 'set +u; source "$1"; shift; exec "$@"'
    overrides = {"PATH": f"{env}/bin:{os.environ.get('PATH', '')}", "PYTHONDONTWRITEBYTECODE": "1",
                 **environment_exports(env, state.tag, os.environ.get("HOME", ""))}  # fmt: skip
    sys.stdout.flush()
    argv = ["bash", "-c", script, "smoke", f"{env}/lightning-xpu-site.sh", *argv]
    status = subprocess.run(argv, env={**os.environ, **overrides}, pass_fds=state.child_fds(), check=False).returncode
    if status != 0:
        raise fail(state, f"the smoke job failed (exit {status}): {smoke_failures(f'{share(state)}/smoke.json')}")


def smoke_failures(path: str) -> str:
    try:
        with open(path) as handle:
            checks = json.load(handle)["checks"]
    except Exception as exc:  # whatever went wrong, it is the reason shown
        return f"no result ({exc})"
    return "; ".join(f"{c['name']}: {c['reason']}" for c in checks if c["status"] == "fail")[:500]


def write_manifest(state: State) -> None:
    say(f"+ write {quote(state.env + '/manifest.json')}")
    if not state.dry:
        with open(f"{share(state)}/steps.tsv", "w") as handle:
            handle.write("".join(f"{line}\n" for line in state.timings))
        if state.log:
            sys.stdout.flush()
            shutil.copy(state.log, f"{share(state)}/install.log")
    data, installer = state.data, state.installer
    args = {
        "tag": state.tag, "torch": data["version"], "site": data["site"], "variant": state.variant,
        "lightning": data["lightning"], "python": state.python_version, "recipe-hash": data["recipe_hash"],
        "inputs-hash": state.inputs_hash, "repository": state.source, "commit": state.commit,
        "build-id": state.build_id, "prefix": state.prefix, "env-manager": state.env_manager,
        "base-python": state.base_python, "base-torch": state.base_torch, "sources-mode": state.sources_mode,
        "lock-file": state.lock_path, "installer": installer.kind, "installer-version": installer.version,
        "installer-why": installer.why, "shared-group": state.shared_group,
    }  # fmt: skip
    words = [f"--{name}={value}" for name, value in args.items()] + [f"--pip-option={o}" for o in state.pip_options]
    engine_on(state, state.env_python, "envside.manifest", state.env, *words,
              failure=f"writing {state.env}/manifest.json failed (see above)")
