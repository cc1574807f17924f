"""The site validation job (<prefix>/validate_lightning.sh) from recipes/sites/<site>.toml [validation]: every
site's job carries its scheduler's directives and its defaults, runs from a spool copy, answers --help; a site
without the table gets one from its scheduler; bad directives are one line; the engine (lxpu_admin/install/tagfiles.py
write_site_validation_job, site_job_current) writes it, sees it current and restores it."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from lxpu_admin.install.tagfiles import TagDataError, site_job_current, validation_job_text, write_site_validation_job
from lxpu_admin.render.artifacts import Renderer
from lxpu_admin.render.errors import RecipeError
from lxpu_admin.render.recipes import Recipes
from lxpu_admin.render.sites import load_site

MARKERS = {"slurm": "#SBATCH", "pbs": "#PBS"}


def _directive_lines(job: str) -> list[str]:
    return [line for line in job.splitlines() if line.startswith(("#SBATCH ", "#PBS "))]


def test_every_site_job_runs_from_a_spool_copy_with_the_sites_defaults(recipes: Recipes, tmp_path: Path) -> None:
    for site in recipes.sites.values():
        data = Renderer.site_job_data(site)
        prefix = tmp_path / site.name / "pre fix"
        job = write_site_validation_job(prefix, data)
        assert job == prefix / "validate_lightning.sh" and job.stat().st_mode & 0o777 == 0o755
        text = job.read_text()
        # the site's scheduler's directives, as the site file gives them (or its headers' family without one)
        family = site.scheduler if site.scheduler != "none" else next(iter(site.headers), "slurm")
        lines = _directive_lines(text)
        assert lines == [f"{MARKERS[family]} {d}" for d in site.validation.directives], site.name
        assert set(site.validation.directives) >= set(site.raw.get("validation", {}).get("directives", []))
        assert not any("account" in line or " -A " in line for line in lines)
        # the site's defaults reach the common script: its default prefix and launchers
        launchers = ",".join(site.validation.launchers)
        spool = tmp_path / site.name / "spool" / "job.sh"  # a scheduler runs a copy, elsewhere
        spool.parent.mkdir()
        shutil.copy(job, spool)
        shown = subprocess.run(["bash", str(spool), "--help"], capture_output=True, text=True, cwd=tmp_path)
        assert shown.returncode == 0 and shown.stdout.startswith("Usage: validate_lightning.sh"), shown.stderr
        probe = tmp_path / site.name / "probe"  # the common script as a probe: the arguments the job hands over
        probe.mkdir()
        (probe / ".validate_lightning.common.sh").write_text('printf "%s\\n" "$@"\n')
        passed = subprocess.run(["bash", str(spool), "--x"], capture_output=True, text=True, cwd=probe,
                                env={"PATH": "/usr/bin:/bin", "HOME": "/home/u", "SLURM_SUBMIT_DIR": str(probe)})
        expected_prefix = site.default_prefix.replace("$HOME", "/home/u")
        links = [word for key in ("link_gbps", "node_link_gbps") if getattr(site.validation, key)
                 for word in (f"--site-{key.replace('_', '-')}", f"{getattr(site.validation, key):g}")]
        assert passed.stdout.splitlines() == ["--site-prefix", expected_prefix, "--site-launchers", launchers, *links,
                                              "--x"]
    # the nominal link figure of the communication check reaches the job where the site file gives one
    assert recipes.sites["aurora"].validation.link_gbps == 200


def _site_file(tmp_path: Path, scheduler: str, extra: str) -> Path:
    headers = {"slurm": '[headers.slurm]\ncommon = ["--nodes=1"]\n', "pbs": '[headers.pbs]\ncommon = ["-q debug"]\n'}
    path = tmp_path / "newsite.toml"
    path.write_text(
        f'description = "t"\nscheduler = "{scheduler}"\ndefault_variant = "xpu"\ndefault_prefix = "$HOME/x"\n'
        'prefix_source = "t"\nenv_manager = "venv"\nenv_manager_source = "t"\nmodules = []\nmodules_source = "t"\n'
        f'submit_hint = "{"qsub" if scheduler == "pbs" else "sbatch"} -A <project> {{script}}"\n'
        f"{headers[scheduler]}{extra}"
    )
    return path


@pytest.mark.parametrize("scheduler", ["slurm", "pbs"])
def test_a_site_without_the_table_gets_a_job_from_its_scheduler(
    recipes: Recipes, tmp_path: Path, scheduler: str
) -> None:
    site = load_site(_site_file(tmp_path, scheduler, ""), "newsite.toml", recipes.known, set(recipes.matrix.sources))
    text = validation_job_text(tmp_path, Renderer.site_job_data(site))
    lines = _directive_lines(text)
    assert lines and all(line.startswith(MARKERS[scheduler] + " ") for line in lines)
    for common in site.headers[scheduler].common:  # the site's partition or queue
        assert f"{MARKERS[scheduler]} {common}" in lines
    launchers = ("mpiexec",) if scheduler == "pbs" else ("srun", "mpiexec")
    assert site.validation.launchers == launchers
    assert f"# Submit from this directory: {site.validation.hint}" in text and "--tag <tag>" in site.validation.hint


@pytest.mark.parametrize(
    ("scheduler", "table", "message"),
    [
        ("pbs", 'directives = ["--time=00:30:00"]', "validation.directives: '--time=00:30:00' is not a pbs directive"),
        ("slurm", 'directives = ["--account=P1"]', "validation.directives: '--account=P1' hard-codes an account"),
        ("slurm", 'launchers = ["aprun"]', "validation.launchers: ('aprun',): give one or more of srun, mpiexec"),
        ("slurm", 'time = "1"', "validation.time: unknown key (allowed here: directives, hint, launchers, link_gbps,"
                                " link_source, node_link_gbps)"),
        ("slurm", "link_gbps = 200", "validation.link_source: a link figure needs its source"),
        ("pbs", 'link_gbps = "fast"\nlink_source = "t"', "validation.link_gbps: must be a positive number of Gbit/s"),
    ],
)
def test_bad_validation_data_is_one_line(
    recipes: Recipes, tmp_path: Path, scheduler: str, table: str, message: str
) -> None:
    path = _site_file(tmp_path, scheduler, f"[validation]\n{table}\n")
    with pytest.raises(RecipeError, match=r"^newsite\.toml: ") as raised:
        load_site(path, "newsite.toml", recipes.known, set(recipes.matrix.sources))
    assert message in str(raised.value) and "\n" not in str(raised.value)


def test_the_site_job_is_written_checked_and_restored(recipes: Recipes, tmp_path: Path) -> None:
    site = next(iter(recipes.sites.values()))
    data = Renderer.site_job_data(site)
    prefix = tmp_path / "pre fix"
    assert site_job_current(prefix, data) is False
    assert write_site_validation_job(prefix, data) == prefix / "validate_lightning.sh"
    assert site_job_current(prefix, data) is True
    (prefix / ".validate_lightning.common.sh").unlink()  # a no-op rerun restores what is missing
    assert site_job_current(prefix, data) is False
    with pytest.raises(TagDataError, match=r"^site data: 'marker'"):
        write_site_validation_job(tmp_path / "other", {"site": site.name})
    assert not (tmp_path / "other").exists()
    with pytest.raises(TagDataError, match=r"^site data: 'marker' must be #SBATCH or #PBS"):
        validation_job_text(prefix, {**Renderer.site_job_data(site), "marker": "#BSUB"})
