"""A build's file-hash record and `lightning-xpu-admin verify` (issue 27): every file of a published build is in its
record (pip's RECORD format, share/lightning-xpu/RECORD, whose sha256 manifest.json keeps), the build is read-only,
and verify finds one changed byte in any recorded file, a removed file, an added file and a rewritten record.

The builds are the install job's over the small prebuilt environment (LXPU_TEST_PREBUILT: the manifest and publish
steps run as always); the real builds' sealing (no hard link into uv's or rattler's cache) is checked in
test_installers.py and test_conda_layer.py.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import install_harness as h
import pytest

from lxpu_admin.envside import filerecord
from lxpu_admin.envside.manifest import AFTER_RECORD, RECORD
from lxpu_admin.install import verify

pytestmark = pytest.mark.install



@pytest.fixture(scope="module")
def template(install_job: Path, source_repo: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A prefix with two builds of the tag: the first, and a --force rebuild published over it (its rollback)."""
    work = tmp_path_factory.mktemp("record")
    env = h.make_prebuilt_env(work / "env", source_repo)
    prefix = work / "record prefix"
    for args in ((), ("--force",)):
        result = h.run_job(install_job, *h.prebuilt_args(source_repo), *args, prefix=prefix,
                           env=h.job_env(LXPU_TEST_PREBUILT=str(env)))  # fmt: skip
        assert result.returncode == 0 and "installed" in result.last_line, result.output
    return prefix


@pytest.fixture
def prefix(template: Path, tmp_path: Path) -> Path:
    dest = tmp_path / "pre fix"
    shutil.copytree(template, dest, symlinks=True)
    return dest


def test_every_build_matches_its_record_and_is_read_only(template: Path) -> None:
    done = h.verify_builds(template)
    assert done.returncode == 0, done
    published = h.published_build(template).name
    lines = done.stdout.splitlines()
    assert any(line.startswith(f"{published} (published): ok, ") and "read-only" in line for line in lines), lines
    assert any(" (rollback): ok, " in line for line in lines), lines
    assert lines[-1] == "2 build(s) match their records", lines
    h.assert_sealed(template)


def test_the_record_covers_every_file_but_those_written_after_it(template: Path) -> None:
    build = h.published_build(template)
    recorded = set(filerecord.read(str(build / RECORD)))
    present = {path for path, _ in filerecord.walk(str(build))}
    assert present - recorded == set(AFTER_RECORD) == {
        "manifest.json", "share/lightning-xpu/previous-build", "share/lightning-xpu/size"}


def _flip_one_byte(path: Path) -> bytes:
    data = path.read_bytes()
    middle = len(data) // 2
    changed = data[:middle] + bytes([data[middle] ^ 0x01]) + data[middle + 1:] if data else b"\0"
    path.write_bytes(changed)
    return data


def test_one_changed_byte_in_any_recorded_file_is_found(prefix: Path) -> None:
    build = h.published_build(prefix)
    files = [path for path, info in filerecord.walk(str(build), [*AFTER_RECORD, RECORD])
             if not os.path.islink(build / path)]  # fmt: skip
    assert len(files) > 10, files
    for relative in files:
        path = build / relative
        original = _flip_one_byte(path)
        try:
            found, _ = verify.problems(build)
            assert found and f"1 changed ({relative})" in found[0], (relative, found)
        finally:
            path.write_bytes(original)
    assert verify.problems(build)[0] == []
    # A symbolic link pointed elsewhere is a change too.
    link = next(build / path for path, _ in filerecord.walk(str(build)) if os.path.islink(build / path))
    target = os.readlink(link)
    link.unlink()
    link.symlink_to("/tmp")
    found, _ = verify.problems(build)
    assert found and f"1 changed ({link.relative_to(build)})" in found[0], found
    link.unlink()
    link.symlink_to(target)


def test_a_removed_file_an_added_file_and_a_rewritten_record_fail_verify(prefix: Path) -> None:
    build = h.published_build(prefix)
    site = next(build.glob("lib/python*/site-packages"))
    removed = next(site.glob("lightning_xpu*.pth"), None) or next(p for p in site.iterdir() if p.is_file())
    removed.unlink()
    (site / "zz_planted.pth").write_text("import os\n")
    done = h.verify_builds(prefix, h.TAG)
    assert done.returncode == 1, done
    line = next(line for line in done.stdout.splitlines() if line.startswith(build.name))
    assert "DOES NOT MATCH" in line and f"1 missing ({removed.relative_to(build)})" in line, line
    assert f"1 added ({(site / 'zz_planted.pth').relative_to(build)})" in line, line
    assert "1 of 2 build(s) do not match their records" in done.stdout and "--force" in done.stdout, done.stdout
    # Whoever changed a file cannot make the record agree: manifest.json names the record's own sha256.
    filerecord.write(str(build), str(build / RECORD), AFTER_RECORD)
    found, _ = verify.problems(build)
    assert found == [f"its record {RECORD} is not the one manifest.json names (sha256 differs)"], found


def test_a_build_made_writable_fails_verify(prefix: Path) -> None:
    build = h.published_build(prefix)
    python_file = next(build.glob("lib/python*/site-packages/*.pth"))
    python_file.chmod(0o644)
    found, _ = verify.problems(build)
    assert found == [f"1 writable ({python_file.relative_to(build)})"], found
