"""benchmarks/metadata_ops.py: strace lines become (syscall, path) pairs, and paths their class, as documented."""

from __future__ import annotations

from pathlib import Path

import pytest

from benchmarks.metadata_ops import Classifier, count, model, parse_trace

TRACE = """\
101 execve("/p/2.13-cpu/bin/python", ["python"], 0x7ffd /* 30 vars */) = 0
101 openat(AT_FDCWD</job>, "/p/.envs/2.13-cpu.1/lib/python3.11/site-packages/torch/__init__.py", O_RDONLY) = 3</x>
101 newfstatat(3</base/lib/python3.11/os.py>, "", {st_mode=S_IFREG|0644, ...}, AT_EMPTY_PATH) = 0
101 newfstatat(AT_FDCWD</job>, "data.csv", 0x7ffd, 0) = -1 ENOENT (No such file or directory)
102 openat(5</local/copy/lib>, "libpython3.11.so", O_RDONLY <unfinished ...>
102 <... openat resumed>) = 4</local/copy/lib/libpython3.11.so>
101 readlink("/p", 0x7ffd, 4096) = -1 EINVAL (Invalid argument)
101 stat("/home/u/.local/lightning-xpu/2.13-cpu", 0x7ffd) = -1 ENOENT (No such file or directory)
101 access("/etc/ld.so.preload", R_OK) = -1 ENOENT (No such file or directory)
101 getcwd("/job", 4096) = 5
"""


def test_parse_and_classify(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME", "/home/u")
    monkeypatch.delenv("PYTHONUSERBASE", raising=False)
    classifier = Classifier.build(["/p/2.13-cpu", "/p"], ["/base"], "/job", ["/local"])
    calls = parse_trace(TRACE.splitlines())
    assert [syscall for syscall, _ in calls] == [
        "execve", "openat", "newfstatat", "newfstatat", "openat", "readlink", "stat", "access",
    ]
    assert [classifier.classify(path) for _, path in calls] == [
        "prefix", "prefix", "base", "workdir", "staged", "prefix", "home", "system",
    ]
    trace = tmp_path / "t.trace"
    trace.write_text(TRACE)
    counted = count(trace, classifier)
    assert counted["shared"] == 4 and counted["by_class"]["staged"] == 1


def test_the_working_directorys_own_path_is_the_jobs_not_the_installs() -> None:
    # A job under the same tree as the install (CI: both in the checkout): bash checks $PWD and realpath() of a
    # relative path stat every directory down to the working directory; those stats happen whatever is installed.
    classifier = Classifier.build(["/lus/proj/build/prefix/2.13-cpu"], ["/base"], "/lus/proj/build/results/job")
    assert [classifier.classify(path) for path in (
        "/lus", "/lus/proj/build", "/lus/proj/build/results/job", "/lus/proj/build/results/job/out.json",
        "/lus/proj/build/prefix", "/lus/proj/build/prefix/2.13-cpu/bin/python", "/",
    )] == ["workdir", "workdir", "workdir", "workdir", "prefix", "prefix", "other"]


def test_model_adds_the_node_staging_once_and_every_rank() -> None:
    def c(shared: int) -> dict[str, int]:
        return {"shared": shared}

    results = {"shared": {"import": c(100)}, "staged": {"stage": c(3), "wrapper": c(5), "import": c(0)}}
    figures = model(results, nodes=10, ranks=4)
    assert figures["shared/import"] == {"per_node": 400, "whole_job": 4000, "within_goal": False}
    assert figures["staged/import (top of the job script)"]["per_node"] == 3
    assert figures["staged/import (srun wrapper)"] == {"per_node": 23, "whole_job": 230, "within_goal": False}
