#!/usr/bin/env python3
"""File-system metadata operations of one rank's start-up, shared install against a node-local (staged) copy.

At scale the shared file system's cost is metadata operations (stat, open, readlink, access) times ranks, not
bytes or seconds on one machine (the page cache hides them here). This script counts them with
``strace -f -y -e trace=%file`` for ``python -c 'import lightning, lightning_xpu'`` and for the toy fit
(scripts/common/toy_fit.py), classifies every path, and prints a model for N nodes x R ranks.

Path classes, first match wins:
  staged   the node-local copy
  prefix   the install prefix on the shared file system (its real path and its parent directories included)
  base     the base interpreter's prefix (a Python module, pyenv, ...; on a cluster also on the shared file system)
  home     $HOME and the user site (PYTHONUSERBASE)
  workdir  the job's working directory, the directories on its path (bash and realpath() walk them)
           and relative paths
  system   the node's own OS: /usr, /lib, /etc, /proc, /sys, /dev, ...
  other    anything else; fd only for a call on a descriptor whose path strace could not show
An fstat of an open file counts where the file lives (on Lustre it still asks the servers for attributes).

Staged: ``lightning-xpu-stage --shell`` stages (once per node: reads the image, unpacks it), then each rank runs
from the copy; the srun-wrapper form (``srun lightning-xpu-stage -- python ...``) adds the wrapper's own operations
per rank (it runs from the prefix). Outside a job both unpack here, as each node would.

    python benchmarks/metadata_ops.py --root "$HOME/lightning-xpu/2.13-cpu" --nodes 1000 --ranks 12 [--json out]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

# The metadata operations the issue names (stat family, open family, readlink, access) and execve.
METADATA_SYSCALLS = frozenset({
    "stat", "lstat", "newfstatat", "fstatat64", "statx", "open", "openat", "openat2", "creat",
    "readlink", "readlinkat", "access", "faccessat", "faccessat2", "execve", "execveat",
})
SHARED_CLASSES = ("prefix", "base")
CLASS_ORDER = ("staged", "prefix", "base", "home", "workdir", "system", "fd", "other")
SYSTEM_DIRS = ("/usr", "/lib", "/lib64", "/bin", "/sbin", "/etc", "/proc", "/sys", "/dev", "/run", "/var")
IMPORT_CODE = "import lightning, lightning_xpu"
GOAL_PER_NODE = 10

# 1234 openat(AT_FDCWD</x>, "path", ...) = 3</path>   or   1234 newfstatat(3</dir>, "", {...}, AT_EMPTY_PATH) = 0
_CALL = re.compile(r'^(?:\[pid\s+)?(\d+)\]?\s+(\w+)\((.*)$')
_FIRST_STRING = re.compile(r'"((?:[^"\\]|\\.)*)"')
_DIRFD = re.compile(r'^(?:AT_FDCWD|\d+)(?:<([^>]*)>)?,\s*')


@dataclass
class Classifier:
    """Maps a path to its class. Every root is given as it appears and resolved (symlinked prefixes)."""

    prefix: list[str]
    base: list[str]
    home: list[str]
    workdir: str
    staged: list[str] = field(default_factory=list)

    @staticmethod
    def _forms(paths: Iterable[str | Path]) -> list[str]:
        out: list[str] = []
        for path in paths:
            for form in (str(path), os.path.realpath(path)):
                form = form.rstrip("/") or "/"
                if form not in out:
                    out.append(form)
        return out

    @classmethod
    def build(cls, prefix: Sequence[str | Path], base: Sequence[str | Path], workdir: str | Path,
              staged: Sequence[str | Path] = ()) -> Classifier:
        home = [os.path.expanduser("~")]
        if os.environ.get("PYTHONUSERBASE"):
            home.append(os.environ["PYTHONUSERBASE"])
        return cls(cls._forms(prefix), cls._forms(base), cls._forms(home), str(workdir), cls._forms(staged))

    def _workdir_or_on_its_path(self, path: str) -> bool:
        """The working directory, a path inside it, or a directory on its way from /."""
        workdir, path = self.workdir.rstrip("/"), path.rstrip("/")
        return path != "" and (path == workdir or path.startswith(workdir + "/") or workdir.startswith(path + "/"))

    def classify(self, path: str) -> str:
        if path == "":
            return "fd"
        if not path.startswith("/"):
            return "workdir"
        for name, roots in (("staged", self.staged), ("prefix", self.prefix), ("base", self.base)):
            if any(path == root or path.startswith(root + "/") for root in roots):
                return name
        # The working directory's own parents are the job's: bash checks $PWD and realpath() of a relative path
        # walks them, whatever the install does (a deep working directory must not look like a costly install).
        if self._workdir_or_on_its_path(path):
            return "workdir"
        # The roots' parent directories (realpath() walks them): the prefix's and the base's lie on the shared
        # file system as well; the node-local directory's first.
        for name, roots in (("staged", self.staged), ("prefix", self.prefix), ("base", self.base)):
            if path != "/" and any(root.startswith(path.rstrip("/") + "/") for root in roots):
                return name
        if any(path == root or path.startswith(root + "/") for root in self.home):
            return "home"
        if any(path == root or path.startswith(root + "/") for root in SYSTEM_DIRS):
            return "system"
        return "other"


def parse_trace(lines: Iterable[str]) -> list[tuple[str, str]]:
    """(syscall, path) per metadata call of an `strace -f -y` log; a path relative to a descriptor is joined
    with the descriptor's path (strace -y prints it); calls on a descriptor alone have the path ''."""
    calls = []
    for line in lines:
        match = _CALL.match(line.strip())
        if not match or "resumed>" in line:
            continue
        syscall, args = match.group(2), match.group(3)
        if syscall not in METADATA_SYSCALLS:
            continue
        dirfd = _DIRFD.match(args)
        dir_path = None
        if dirfd and syscall not in ("open", "stat", "lstat", "readlink", "access", "execve", "creat"):
            dir_path = dirfd.group(1)
            args = args[dirfd.end():]
        string = _FIRST_STRING.match(args)
        path = string.group(1).encode().decode("unicode_escape", errors="replace") if string else ""
        if path and not path.startswith("/") and dir_path:
            path = f"{dir_path.rstrip('/')}/{path}"
        elif path == "" and dir_path:
            path = dir_path  # fstat of an open file (AT_EMPTY_PATH): counted where that file lives
        calls.append((syscall, path))
    return calls


def count(trace: Path, classifier: Classifier) -> dict[str, Any]:
    by_class: Counter[str] = Counter()
    by_syscall: Counter[str] = Counter()
    shared_paths: Counter[str] = Counter()
    for syscall, path in parse_trace(trace.read_text(errors="replace").splitlines()):
        kind = classifier.classify(path)
        by_class[kind] += 1
        by_syscall[syscall] += 1
        if kind in SHARED_CLASSES:
            shared_paths[path] += 1
    return {
        "total": sum(by_class.values()),
        "by_class": {name: by_class.get(name, 0) for name in CLASS_ORDER},
        "shared": sum(by_class.get(name, 0) for name in SHARED_CLASSES),
        "by_syscall": dict(by_syscall.most_common()),
        "top_shared_paths": shared_paths.most_common(10),
    }


def strace_command(trace: Path) -> list[str]:
    """The strace that follows children and writes their file syscalls, paths shown, to TRACE."""
    tool = shutil.which("strace")
    if tool is None:
        sys.exit("metadata_ops.py: strace not found: install it (apt-get install strace)")
    return [tool, "-f", "-qq", "-y", "-e", "trace=%file", "-o", str(trace)]


def strace(argv: Sequence[str], trace: Path, env: dict[str, str], cwd: Path, timeout: float) -> str:
    """Run ARGV under strace (file syscalls to TRACE); its stdout."""
    done = subprocess.run([*strace_command(trace), *argv], env=env,
                          cwd=cwd, capture_output=True, text=True, timeout=timeout, check=False)
    if done.returncode != 0:
        sys.exit(f"metadata_ops.py: {' '.join(argv)} failed ({done.returncode}): {done.stderr[-2000:]}")
    return done.stdout


def staged_env(exports: str, env: dict[str, str]) -> dict[str, str]:
    """The environment after `eval "$(lightning-xpu-stage --shell)"` printed EXPORTS."""
    # Without the EXIT trap the lines set: it would remove the copy as this shell ends.
    done = subprocess.run(["bash", "-c", 'eval "$1" && trap - EXIT && env -0', "staged-env", exports], env=env,
                          capture_output=True, text=True, check=True)
    return dict(item.split("=", 1) for item in done.stdout.split("\0") if "=" in item)


def base_prefix(python: Path) -> str:
    return subprocess.run([str(python), "-c", "import sys; print(sys.base_prefix)"], capture_output=True,
                          text=True, check=True).stdout.strip()


def shared_env(root: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("VIRTUAL_ENV", "LIGHTNING_XPU_", "PYTHON"))}
    env.update(PATH=f"{root}/bin:{env.get('PATH', '/usr/bin:/bin')}", VIRTUAL_ENV=str(root),
               LIGHTNING_XPU_ROOT=str(root), OMP_NUM_THREADS="1")
    return env


def workloads(root: Path, out: Path, which: str) -> dict[str, list[str]]:
    chosen = {}
    if which in ("import", "both"):
        chosen["import"] = ["python", "-c", IMPORT_CODE]
    if which in ("toy-fit", "both"):
        # Where a user's train.py lies: in the job's directory (Python puts it first on sys.path, so every import
        # looks there first: the workdir class).
        toy_fit = out / "train.py"
        shutil.copyfile(root / "share" / "lightning-xpu" / "toy_fit.py", toy_fit)
        chosen["toy-fit"] = ["python", str(toy_fit), "--out", str(out / "toy"), "--accelerator", "cpu",
                             "--samples", "16", "--batch-size", "8"]
    return chosen


def timed(argv: Sequence[str], env: dict[str, str], cwd: Path, timeout: float) -> float:
    started = time.perf_counter()
    subprocess.run(list(argv), env=env, cwd=cwd, capture_output=True, timeout=timeout, check=True)
    return time.perf_counter() - started


def measure(root: Path, which: str, staged: bool, timeout: float, repeats: int = 0) -> dict[str, Any]:
    """Shared: one rank's counts per workload. Staged: the node's staging (`lightning-xpu-stage --shell`, once per
    node), one rank from the copy, and what the wrapper form (`srun lightning-xpu-stage -- ...`) adds per rank."""
    root = root.absolute()
    if not (root / "bin" / "python").exists():
        sys.exit(f"metadata_ops.py: {root}/bin/python does not exist: give --root <prefix>/<tag> of an install")
    stage_cmd = root / "bin" / "lightning-xpu-stage"
    if staged and not stage_cmd.exists():
        sys.exit(f"metadata_ops.py: {stage_cmd} does not exist: reinstall with this repository to get it")
    results: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="lxpu-metadata-") as tmp:
        work = Path(tmp) / "job"
        work.mkdir()
        local = Path(tmp) / "node-local"
        local.mkdir()
        env = shared_env(root)
        classifier = Classifier.build([root, root.parent], [base_prefix(root / "bin" / "python")], work,
                                      [local] if staged else [])
        if staged:
            env.update(LIGHTNING_XPU_STAGE_DIR=str(local), LIGHTNING_XPU_STAGE_JOB="metadata-ops")
            exports = strace([str(stage_cmd), "--shell"], Path(tmp) / "stage.trace", env, work, timeout)
            if "LIGHTNING_XPU_STAGED=" not in exports:
                sys.exit(f"metadata_ops.py: lightning-xpu-stage --shell did not stage (see its warning); it printed "
                         f"{exports!r}")
            results["stage"] = count(Path(tmp) / "stage.trace", classifier)
            strace([str(stage_cmd), "--", "true"], Path(tmp) / "wrapper.trace", env, work, timeout)
            results["wrapper"] = count(Path(tmp) / "wrapper.trace", classifier)
            rank_env = staged_env(exports, env)
        else:
            rank_env = env
        for name, argv in workloads(root, work, which).items():
            trace = Path(tmp) / f"{name}.trace"
            strace(argv, trace, rank_env, work, timeout)
            results[name] = count(trace, classifier)
            if repeats:
                results[name]["seconds"] = [round(timed(argv, rank_env, work, timeout), 3) for _ in range(repeats)]
        if staged:
            subprocess.run([str(stage_cmd), "--cleanup"], env=env, capture_output=True, check=False)
            if repeats:
                # Staging itself, untraced, into a fresh directory (what each node pays once per job).
                env["LIGHTNING_XPU_STAGE_JOB"] = "metadata-ops-timed"
                results["stage"]["seconds"] = [round(timed([str(stage_cmd), "--shell"], env, work, timeout), 3)]
                subprocess.run([str(stage_cmd), "--cleanup"], env=env, capture_output=True, check=False)
    return results


def model(results: dict[str, Any], nodes: int, ranks: int) -> dict[str, Any]:
    """Shared-file-system operations (prefix + base interpreter) per node and for the whole job."""
    out: dict[str, Any] = {}
    for name, counted in results.get("shared", {}).items():
        node = counted["shared"] * ranks
        out[f"shared/{name}"] = {"per_node": node, "whole_job": node * nodes, "within_goal": node <= GOAL_PER_NODE}
    staged = results.get("staged", {})
    for name, counted in staged.items():
        if name in ("stage", "wrapper"):
            continue
        for form, extra in (("top of the job script", 0), ("srun wrapper", staged["wrapper"]["shared"])):
            node = staged["stage"]["shared"] + (counted["shared"] + extra) * ranks
            out[f"staged/{name} ({form})"] = {"per_node": node, "whole_job": node * nodes,
                                              "within_goal": node <= GOAL_PER_NODE}
    return out


def print_report(results: dict[str, Any], modelled: dict[str, Any], nodes: int, ranks: int) -> None:
    print(f"{'layout/step':28} {'total':>8} " + " ".join(f"{c:>8}" for c in CLASS_ORDER) + "   untraced wall time")
    for layout, steps in results.items():
        for name, counted in steps.items():
            cells = " ".join(f"{counted['by_class'][c]:8d}" for c in CLASS_ORDER)
            seconds = counted.get("seconds")
            timing = f"   {min(seconds):.2f}-{max(seconds):.2f} s (n={len(seconds)})" if seconds else ""
            print(f"{layout + '/' + name:28} {counted['total']:8d} {cells}{timing}")
    print(f"\nModel: metadata operations on the shared file system (prefix + base interpreter), "
          f"{nodes} nodes x {ranks} ranks (staged: the node's staging once, then every rank)")
    for key, figures in modelled.items():
        goal = "within" if figures["within_goal"] else "above"
        print(f"  {key:44} per node {figures['per_node']:>10,}   whole job {figures['whole_job']:>14,}   "
              f"({goal} the goal of {GOAL_PER_NODE} per node)")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--root", type=Path, required=True,
                        help="the installed environment, <prefix>/<tag> (e.g. $HOME/lightning-xpu/2.13-cpu)")
    parser.add_argument("--workload", choices=("import", "toy-fit", "both"), default="both")
    parser.add_argument("--layout", choices=("shared", "staged", "both"), default="both",
                        help="shared: run from the prefix; staged: through lightning-xpu-stage (default both)")
    parser.add_argument("--nodes", type=int, default=1000, help="N of the model (default 1000)")
    parser.add_argument("--ranks", type=int, default=12, help="R ranks per node of the model (default 12, Aurora)")
    parser.add_argument("--timeout", type=float, default=600, help="seconds per traced run")
    parser.add_argument("--repeats", type=int, default=3,
                        help="untraced timed runs of each workload (and one of the staging), 0 for none (default 3)")
    parser.add_argument("--json", type=Path, help="write the counts and the model here")
    args = parser.parse_args(argv)
    if args.nodes < 1 or args.ranks < 1:
        parser.error("--nodes and --ranks must be at least 1")
    layouts = ("shared", "staged") if args.layout == "both" else (args.layout,)
    results = {layout: measure(args.root, args.workload, layout == "staged", args.timeout, args.repeats)
               for layout in layouts}
    modelled = model(results, args.nodes, args.ranks)
    print_report(results, modelled, args.nodes, args.ranks)
    if args.json:
        args.json.write_text(json.dumps({"root": str(args.root), "nodes": args.nodes, "ranks": args.ranks,
                                         "goal_per_node": GOAL_PER_NODE, "counts": results, "model": modelled},
                                        indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
