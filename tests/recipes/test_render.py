"""Rendering: every (version, site, variant) renders, shell scripts are valid, the install job follows the
contract with the engine, committed renders match, drift is caught, a new version is one matrix entry."""

from __future__ import annotations

import json
import re
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from lxpu_recipes import cli
from lxpu_recipes.recipes import Recipes
from lxpu_recipes.tagfiles import TagData, modulefile_text, setup_text
from recipe_helpers import (
    ENGINE,
    ENGINE_DATA,
    ENGINE_DIR,
    INSTALL_DATA,
    MINOR,
    MODULE_MINOR,
    MODULE_SITE,
    MODULEFILE_BODY,
    OTHER,
    PBS_SITE,
    PLAIN_SITE,
    RECIPES,
    REPO,
    SHIM,
    Rendered,
    Renderer,
    bash,
    cases,
    edit,
    job_data,
    load_recipes,
    locked,
    plain_site,
    require,
    run_render,
    run_render_process,
)

EXPORT_LINE = re.compile(r'^export ([A-Za-z_][A-Za-z0-9_]*)="\$\{\1:-[^"$`\\}]*\}"$')


def _tag(minor: str, variant: str) -> str:
    return minor if variant == "xpu" else f"{minor}-{variant}"


@pytest.mark.parametrize(("minor", "site", "variant"), cases())
def test_every_version_site_variant_renders(
    rendered: Rendered, recipes: Recipes, minor: str, site: str, variant: str
) -> None:
    tag = _tag(minor, variant)
    lightning = recipes.matrix.version(minor).lightning
    install = rendered.text(f"scripts/{site}/install_lightning_{minor}.sh")
    modulefile = rendered.text(f"envs/{site}/modulefiles/lightning-xpu/{tag}.lua")  # what the install writes
    assert f"lightning-xpu/{tag}: PyTorch" in modulefile
    requirements = rendered.text(f"envs/{site}/{tag}/requirements.txt")
    specs = [line for line in requirements.splitlines() if line and not line.startswith("#")]
    assert specs[0].startswith(f"torch=={minor}.") and f"lightning=={lightning}" in specs
    assert f"pytorch-lightning=={lightning}" in specs  # one Lightning release: pinned together
    assert all(not s.startswith(("-", "lightning_xpu", "lightning-xpu")) for s in specs)
    assert f'- "torch=={minor}.' in rendered.text(f"envs/{site}/{tag}/environment.yml")
    setup = rendered.text(f"envs/{site}/{tag}/lightning-setup-{tag}.sh")
    assert f" {tag} install_lightning_{minor}.sh {variant}\n" in setup  # the data the setup library gets
    assert f'  tag = "{tag}",\n' in modulefile  # the body's data
    assert f" --version {minor} --site {site} " in install  # the job names its recipe; the data file holds it
    data = rendered.job_data(site, minor)["variants"][variant]
    assert (data["tag"], data["module"], data["setup"]) == (tag, f"lightning-xpu/{tag}", f"lightning-setup-{tag}.sh")
    # The install writes both from the variant's data in the data file: the same files as this preview.
    tag_data = TagData.from_mapping(data)
    assert (modulefile_text(tag_data), setup_text(tag_data)) == (modulefile, setup)


def _shell_files(rendered: Rendered) -> list[Path]:
    return [rendered.root / p for p in rendered.artifacts if p.endswith(".sh")]


def test_every_rendered_shell_script_passes_bash_n(rendered: Rendered) -> None:
    for path in _shell_files(rendered):
        done = subprocess.run(["bash", "-n", str(path)], capture_output=True, text=True, check=False)
        assert done.returncode == 0, f"{path}: {done.stderr}"


def test_every_rendered_shell_script_passes_shellcheck(rendered: Rendered) -> None:
    require(shutil.which("shellcheck") is not None, "shellcheck")
    # One file per distinct content (a setup script is the same for every site), in two parallel batches.
    distinct = {p.read_text(): str(p) for p in _shell_files(rendered)}
    files = sorted(distinct.values())
    # The site file holds only export lines (no shebang, by contract): tell shellcheck it is bash.
    batches = [
        subprocess.Popen(["shellcheck", "--shell=bash", *files[i::2]], stdout=subprocess.PIPE, text=True)
        for i in range(2)
    ]
    for batch in batches:
        output, _ = batch.communicate(timeout=600)
        assert batch.returncode == 0, output[-4000:]


def _shell_data(data: dict[str, object]) -> str:
    """The data as the engine hands it to its bash half (lxpu_engine/jobdata.py)."""
    sys.path.insert(0, str(REPO / ENGINE_DIR))
    try:
        from lxpu_engine.jobdata import shell_assignments
    finally:
        sys.path.remove(str(REPO / ENGINE_DIR))
    return shell_assignments(data)


def test_install_job_layout(rendered: Rendered, recipes: Recipes) -> None:
    """Headers, the site's modules and one call into the engine (found in the repository, never copied)."""
    engine_lines = set((REPO / ENGINE).read_text().splitlines()) - {""}
    contract = recipes.engine_contract()
    for minor in recipes.matrix.versions:
        for site in recipes.sites.values():
            text = rendered.text(f"scripts/{site.name}/install_lightning_{minor}.sh")
            lines = text.splitlines()
            assert len(lines) <= 25, f"{site.name} {minor}: {len(lines)} lines"
            assert lines[0] == "#!/usr/bin/env bash"
            assert "generated by recipes/render.py" in text and "do not edit" in text
            first_command = next(i for i, line in enumerate(lines) if line and not line.startswith("#"))
            assert lines[first_command] == "set -euo pipefail"
            headers = [line for line in lines[:first_command] if line.startswith(("#SBATCH", "#PBS"))]
            assert not any(re.search(r"(--account|-A\b)", line) for line in headers)
            if site.scheduler == "slurm" or "slurm" in site.headers:
                assert f"#SBATCH --job-name=lxpu-install-{minor}" in headers
            if site.scheduler == "pbs":
                assert f"#PBS -N lxpu-install-{minor}" in headers
            calls = [line for line in lines if f'exec "$dir/{SHIM}" install ' in line]
            assert len(calls) == 1 and calls[0].endswith(
                f" install --contract {contract} --version {minor} --site {site.name} \"$@\""
            ), calls
            shared = [line for line in lines if line.startswith("\t") and line in engine_lines]
            assert not shared, f"engine lines in the job: {shared[:3]}"


def test_job_directives_are_the_sites(rendered: Rendered, recipes: Recipes) -> None:
    """Each install job carries exactly its site's directives (the job name, then common and install), with the
    prefix of the site's scheduler family and of no other."""
    prefixes = {"slurm": "#SBATCH ", "pbs": "#PBS "}
    for site in recipes.sites.values():
        for minor in recipes.matrix.versions:
            lines = rendered.text(f"scripts/{site.name}/install_lightning_{minor}.sh").splitlines()
            for family, prefix in prefixes.items():
                got = [line.removeprefix(prefix) for line in lines if line.startswith(prefix)]
                headers = site.headers.get(family)
                wanted = [*headers.common, *headers.install] if headers else []
                named = ("--job-name=", "--output=", "-N ")  # the job's name and log, from the template
                assert [d for d in got if not d.startswith(named)] == wanted, (site.name, minor, got)


CONTRACT_NAMES = {
    "LXPU_VERSION",
    "LXPU_LIGHTNING_VERSION",
    "LXPU_RECIPE_HASH",
    "LXPU_VARIANTS",
    "LXPU_CONDA_CHANNELS",
    "LXPU_SITE",
    "LXPU_SITE_SCHEDULER",
    "LXPU_SITE_VARIANT",
    "LXPU_DEFAULT_PREFIX",
    "LXPU_SITE_ENV_MANAGER",
    "LXPU_SITE_MODULES",
    "LXPU_SITE_MODULES_LEFT_OUT",
    "LXPU_SITE_PYTHON_MODULE",
    "LXPU_BUILD_TOOLS",
    "LXPU_SITE_ENV",
    "LXPU_SITE_JOB_DATA",
    "LXPU_MODULE_BODY",
    "LXPU_SETUP_LIB",
    "LXPU_SETUP_LIB_NAME",
}
PER_VARIANT = ("TAG", "PYTHON", "REQUIREMENTS", "PIP_SOURCES", "LOCK", "SETUP", "MODULE", "TAG_DATA")


def test_install_data_follows_the_engine_contract(rendered: Rendered, recipes: Recipes) -> None:
    """The rendered data, as the engine hands it to its bash half: exactly the contract's names and nothing else,
    and the engine's accessors read them back."""
    minor, lv = locked(recipes)  # the lock's variant `lv` reads a lock path back; xpu reads its sources
    site = recipes.sites[plain_site(recipes)]
    version = recipes.matrix.version(minor)
    script = (
        "before=$(compgen -v | sort)\n"
        + _shell_data(rendered.job_data(site.name, minor))
        + 'comm -13 <(echo "$before") <(compgen -v | sort | grep -v "^before$")\n'
        "echo ---; compgen -A function | sort\n"
        'echo ---; echo "$LXPU_VERSION|$LXPU_SITE|$LXPU_SITE_SCHEDULER|$LXPU_VARIANTS|$LXPU_SITE_VARIANT|'
        '$LXPU_DEFAULT_PREFIX|$LXPU_SITE_ENV_MANAGER|$LXPU_SITE_MODULES|$LXPU_LIGHTNING_VERSION"\n'
        f'source "{REPO / ENGINE}"\n'
        f"echo ---; lxpu_tag {lv}; lxpu_python_version {lv}\n"
        f"echo ---; lxpu_requirements {lv}\n"
        "echo ---; lxpu_pip_sources xpu\n"
        f"echo ---; lxpu_lock_file {lv}; echo ---; lxpu_lock_file xpu\n"
        "echo ---; lxpu_site_env\n"
        f"echo ---; lxpu_setup_file {lv}; lxpu_module {lv}\n"
        "echo ---; [ ${#LXPU_RECIPE_HASH} -eq 64 ] && echo hash-ok\n"
        f"echo ---; lxpu_tag_data {lv}\n"
    )
    done = bash(script, {"PATH": "/usr/bin:/bin"})
    assert done.returncode == 0, done.stderr
    parts = done.stdout.split("---\n")
    legacy = {"LXPU_LEGACY"} if recipes.matrix.legacy_line(version) else set()
    expected = CONTRACT_NAMES | legacy | {f"LXPU_{key}_{v}" for key in PER_VARIANT for v in version.variants}
    assert set(parts[0].split()) - {"PIPESTATUS", "_"} == expected  # PIPESTATUS, _: bash's own
    assert parts[1] == ""  # data only
    assert parts[2] == (
        f"{minor}|{site.name}|{site.scheduler}|{' '.join(version.variants)}|{site.default_variant}|"
        f"{site.default_prefix}|{site.env_manager}||{version.lightning}\n"
    )
    assert parts[3] == f"{version.tag(lv)}\n{version.python}\n"
    assert parts[4] == "".join(f"{r}\n" for r in version.variants[lv].requirements())
    words = [w for option in Renderer(recipes).pip_options(version, "xpu", site) for w in option.split()]
    assert parts[5] == "".join(f"{w}\n" for w in words)
    assert parts[6] == f"recipes/locks/{minor}-{lv}.txt\n"
    xpu_lock = recipes.lock_path(minor, "xpu")
    assert parts[7] == (f"{recipes.shown(xpu_lock)}\n" if xpu_lock.is_file() else "")
    assert parts[8] == ""  # the plain site sets no site variables
    names = version.names(lv)
    assert parts[9] == f"{names.setup}\n{names.module}\n"
    assert parts[10] == "hash-ok\n"
    assert TagData.from_mapping(json.loads(parts[11])) == TagData.from_mapping(
        Renderer(recipes).tag_data(version, lv)
    )  # what the install writes from


def test_engine_data_accessors_reject_unknown_variants(rendered: Rendered, recipes: Recipes) -> None:
    version = next(iter(recipes.matrix.versions.values()))
    data = _shell_data(rendered.job_data(MODULE_SITE, version.minor))
    for call in ("lxpu_requirements rocm", "lxpu_tag 'x; y'", "lxpu_python_version ''"):
        done = bash(data + f'source "{REPO / ENGINE}"\n' + call + "\n")
        assert done.returncode == 1, call
        assert done.stderr.startswith("lightning-xpu engine: the job sets no LXPU_"), done.stderr
        assert done.stderr.strip().endswith(f"; the job has: {' '.join(version.variants)})")


def test_site_env_lines_only(rendered: Rendered, recipes: Recipes) -> None:
    for site in recipes.sites.values():
        lines = rendered.text(f"envs/{site.name}/lightning-xpu-site.sh").splitlines()
        assert len(lines) == len(site.env)
        assert all(EXPORT_LINE.match(line) for line in lines), lines
        for setting in site.env:
            assert f'export {setting.name}="${{{setting.name}:-{setting.value}}}"' in lines
        modules = rendered.text(f"envs/{site.name}/lightning-xpu-site-modules.txt")
        assert modules == "".join(f"{name}\n" for name in site.modules)


def test_committed_renders_match_the_recipes() -> None:
    done = run_render_process("check")
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.startswith("ok: ")


def test_check_never_touches_the_network(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def refuse(*_args: object, **_kwargs: object) -> None:
        raise AssertionError("check opened a network connection")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)
    monkeypatch.setattr(socket, "getaddrinfo", refuse)
    assert cli.main(["check"], default_recipes=RECIPES) == 0
    assert capsys.readouterr().out.startswith("ok: ")


def test_check_fails_after_a_deliberate_edit(temp_repo: Path) -> None:
    edited = f"scripts/{MODULE_SITE}/install_lightning_{MODULE_MINOR}.sh"
    edit(temp_repo / edited, f"--site {MODULE_SITE} ", f"--site {MODULE_SITE}-edited ")
    missing = f"scripts/{PLAIN_SITE}/install_lightning_{OTHER}.sh"
    (temp_repo / missing).unlink()
    committed_copy = f"modulefiles/lightning-xpu/{OTHER}-cpu.lua"  # the install writes these: never committed
    (temp_repo / committed_copy).write_text("-- a modulefile committed by an older checkout\n")
    mode = f"scripts/{PBS_SITE}/install_lightning_{MINOR}.sh"
    (temp_repo / mode).chmod(0o644)
    stale = f"scripts/{PLAIN_SITE}/install_lightning_1.0.sh"
    (temp_repo / stale).write_text("#!/usr/bin/env bash\n")
    done = run_render("check", repo=temp_repo)
    assert done.returncode == 1
    assert sorted(done.stdout.splitlines()) == sorted([
        f"drift: {missing}: missing (not rendered into the repository)",
        f"drift: {mode}: executable bit differs from a fresh render",
        f"drift: {edited}: differs from a fresh render",
        f"drift: {stale}: stale (no recipe renders it any more)",
        f"drift: {committed_copy}: stale (no recipe renders it any more)",
    ])
    assert "5 drifted file(s)" in done.stderr
    fixed = run_render("render", "--all", repo=temp_repo)
    assert fixed.returncode == 0, fixed.stderr
    assert f"removed {stale}" in fixed.stdout and f"removed {committed_copy}" in fixed.stdout
    assert run_render("check", repo=temp_repo).returncode == 0
    again = run_render("render", "--all", repo=temp_repo)
    assert again.stdout.splitlines()[-1].endswith("(0 updated, 0 removed)")


def test_a_new_version_is_one_matrix_entry(temp_repo: Path, recipes: Recipes) -> None:
    """A copy of the newest entry as 2.99 (its torch pin renamed) renders everywhere and passes check."""
    newest = list(recipes.matrix.versions.values())[-1]
    matrix = temp_repo / "recipes/matrix.toml"
    entry = matrix.read_text().split(f'[versions."{newest.minor}"]', 1)[1]
    new = ('[versions."2.99"]' + entry).replace(f'"{newest.torch}"', '"2.99.0"')
    matrix.write_text(
        matrix.read_text() + "\n" + new.replace(f'[versions."{newest.minor}".', '[versions."2.99".')
    )
    done = run_render("render", "--all", repo=temp_repo)
    assert done.returncode == 0, done.stderr
    sites = sorted(p.stem for p in (temp_repo / "recipes/sites").glob("*.toml"))
    for site in sites:
        assert (temp_repo / f"scripts/{site}/install_lightning_2.99.sh").is_file()
    assert not list((temp_repo / "modulefiles/lightning-xpu").glob("2.99*"))  # the install writes them
    pins = job_data(temp_repo, PLAIN_SITE, "2.99")["variants"]["xpu"]["requirements"]
    assert pins[0] == "torch==2.99.0+xpu" and f"lightning=={newest.lightning}" in pins
    out = temp_repo / "out"
    full = run_render("render", "--torch", "2.99", "--site", PLAIN_SITE, "--out", str(out), repo=temp_repo)
    assert full.returncode == 0, full.stderr
    produced = sorted(p.relative_to(out).as_posix() for p in out.rglob("*") if p.is_file())
    expected = [f"envs/{PLAIN_SITE}/lightning-xpu-site-modules.txt", f"envs/{PLAIN_SITE}/lightning-xpu-site.sh"]
    expected.append(f"envs/{PLAIN_SITE}/validate_lightning.sh")  # a preview of the install's site validation job
    for tag in ("2.99", "2.99-cpu", "2.99-cuda"):
        expected += [
            f"envs/{PLAIN_SITE}/{tag}/{name}"
            for name in ("environment.yml", f"lightning-setup-{tag}.sh", "requirements.txt")
        ]
        expected.append(f"envs/{PLAIN_SITE}/modulefiles/lightning-xpu/{tag}.lua")  # a preview of the install's
    expected += [f"scripts/{PLAIN_SITE}/install_lightning_2.99.sh", INSTALL_DATA]
    assert produced == sorted(expected)
    assert run_render("check", repo=temp_repo).returncode == 0


def test_job_runs_the_engine_and_refuses_another_contract(temp_repo: Path) -> None:
    """The job runs the repository's engine with its recipe's data; a job rendered for another engine contract
    stops with one line."""
    contract = re.search(r"^CONTRACT = (\d+)$", (temp_repo / ENGINE_DATA).read_text(), re.MULTILINE)
    assert contract
    (temp_repo / ENGINE).write_text(  # a stand-in bash half, shellcheck clean (render refuses what check refuses)
        "#!/usr/bin/env bash\n# shellcheck disable=SC2034,SC2154  # set by the engine\n"
        'lxpu_main() { local a=(x y); echo "${#a[@]} $LXPU_VERSION $LXPU_TAG_cpu from $LXPU_SOURCE: $*"; }\n'
    )
    job = temp_repo / f"scripts/{PLAIN_SITE}/install_lightning_{MINOR}.sh"
    ran = subprocess.run(["bash", str(job), "--dry-run"], capture_output=True, text=True, check=False)
    assert ran.stdout == f"2 {MINOR} {MINOR}-cpu from {temp_repo.resolve()}: --dry-run\n", ran.stderr
    edit(temp_repo / ENGINE_DATA, f"CONTRACT = {contract[1]}", "CONTRACT = 999")
    ran = subprocess.run(["bash", str(job)], capture_output=True, text=True, check=False)
    assert ran.returncode == 2 and ran.stdout == ""
    assert ran.stderr == (
        f"install_lightning_{MINOR}.sh: error: {temp_repo.resolve()}/{ENGINE_DATA} has contract 999, this job was "
        f"rendered for {contract[1]}: run the job of the same checkout, or re-render it "
        "(python recipes/render.py render --all)\n"
    )
    # The contract comes from the engine: a re-render carries the new one, and check sees the drift first.
    assert run_render("check", repo=temp_repo).returncode == 1
    assert run_render("render", "--all", repo=temp_repo).returncode == 0
    assert " --contract 999 " in job.read_text()


def _recipe_hash(repo: Path, minor: str, site: str) -> str:
    found = job_data(repo, site, minor)["recipe_hash"]
    assert re.fullmatch(r"[0-9a-f]{64}", found)
    return str(found)


def test_recipe_hash_follows_its_inputs(temp_repo: Path) -> None:
    changed, same = OTHER, MINOR  # a version entry edited, one not
    site, plain = MODULE_SITE, PLAIN_SITE  # a site file edited, one not
    recipes = load_recipes(temp_repo / "recipes")
    before = {(m, s): _recipe_hash(temp_repo, m, s) for m in (changed, same) for s in (site, plain)}
    released = f'[versions."{changed}"]\nreleased = "{recipes.matrix.version(changed).released}"'
    edit(temp_repo / "recipes/matrix.toml", released, released.replace('released = "', 'released = "(edited) '))
    description = f'description = "{recipes.sites[site].description}"'
    edit(temp_repo / f"recipes/sites/{site}.toml", description, description.replace('= "', '= "(edited) '))
    assert run_render("render", "--all", repo=temp_repo).returncode == 0
    after = {key: _recipe_hash(temp_repo, *key) for key in before}
    assert after[(changed, site)] != before[(changed, site)]
    assert after[(changed, plain)] != before[(changed, plain)]  # its matrix entry changed
    assert after[(same, site)] != before[(same, site)]  # its site changed
    assert after[(same, plain)] == before[(same, plain)]  # neither changed
    edit(temp_repo / "recipes/templates/install_lightning.sh.j2", "# Submit:", "# (edited) Submit:")
    assert run_render("render", "--all", repo=temp_repo).returncode == 0
    assert _recipe_hash(temp_repo, same, plain) != before[(same, plain)]


def test_site_overrides_package_sources(temp_repo: Path) -> None:
    site = temp_repo / f"recipes/sites/{PLAIN_SITE}.toml"
    site.write_text(
        site.read_text() + '\n[sources]\npytorch-xpu = "https://mirror.invalid/whl/xpu"\n'
        'pypi = "file:///srv/wheelhouse/simple"\n'
    )
    out = temp_repo / "out"
    done = run_render("render", "--torch", MINOR, "--site", PLAIN_SITE, "--out", str(out), repo=temp_repo)
    assert done.returncode == 0, done.stderr
    assert job_data(out, PLAIN_SITE, MINOR)["variants"]["xpu"]["pip_sources"] == [
        "--index-url", "https://mirror.invalid/whl/xpu", "--extra-index-url", "file:///srv/wheelhouse/simple"
    ]
    yml = (out / f"envs/{PLAIN_SITE}/{MINOR}/environment.yml").read_text()
    assert '  - "https://mirror.invalid/whl/xpu"\n  - "file:///srv/wheelhouse/simple"\n' in yml
    assert "allow-pypi-requests: false\n" in yml
    untouched = job_data(REPO, MODULE_SITE, MINOR)["variants"]["xpu"]["pip_sources"]
    assert untouched[:2] == ["--index-url", "https://download.pytorch.org/whl/xpu"]


def test_check_refuses_broken_shell_and_empty_artifacts(temp_repo: Path) -> None:
    engine = temp_repo / ENGINE
    engine.write_text(engine.read_text() + "\nlxpu_oops() {\n")
    (temp_repo / "recipes/templates/requirements.txt.j2").write_text("{# nothing #}\n")
    edit(temp_repo / "recipes/templates/install_lightning.sh.j2", "set -euo pipefail\n", "set -euo pipefail\nif\n")
    done = run_render("check", repo=temp_repo)
    assert done.returncode == 1
    broken = [line for line in done.stdout.splitlines() if line.startswith("broken: ")]
    assert f"broken: {ENGINE}: bash -n: {ENGINE}: line " in "\n".join(broken)
    assert any(re.fullmatch(r"broken: envs/[^/]+/[^/]+/requirements\.txt: empty", line) for line in broken)
    assert any(re.match(r"broken: scripts/[^/]+/install_lightning_[0-9.]+\.sh: bash -n: ", line) for line in broken)
    assert "problem(s): fix the template (recipes/templates/) or the hand-written file named" in done.stderr
    # render refuses the same, and writes nothing.
    before = {path: path.read_bytes() for path in (temp_repo / "scripts").rglob("*") if path.is_file()}
    refused = run_render("render", "--all", repo=temp_repo)
    assert refused.returncode == 1 and refused.stdout == ""
    assert sorted(refused.stderr.splitlines()[:-1]) == sorted(broken)
    assert refused.stderr.splitlines()[-1].startswith("render.py render: nothing written: ")
    assert before == {path: path.read_bytes() for path in (temp_repo / "scripts").rglob("*") if path.is_file()}


def _hand_written(temp_repo: Path) -> list[str]:
    from lxpu_recipes.handwritten import shell_files
    from lxpu_recipes.outputs import committed_renders

    return shell_files(temp_repo, committed_renders(temp_repo))


def test_check_and_render_refuse_broken_hand_written_code(temp_repo: Path) -> None:
    """Every hand-written shell file (found, not listed: the staging command has no .sh) gets bash -n and
    shellcheck; the modulefile body gets luac -p. Each finding is one line, from check and from render."""
    shells = _hand_written(temp_repo)
    assert ENGINE in shells and any(not Path(name).suffix for name in shells), shells
    syntax = next(n for n in shells if not Path(n).suffix)  # found by its #! line
    lint = next(n for n in shells if n.endswith(".sh") and n != ENGINE)
    with (temp_repo / syntax).open("a") as handle:
        handle.write("\nif then\n")
    with (temp_repo / lint).open("a") as handle:
        handle.write('\necho $1\n')
    body = temp_repo / MODULEFILE_BODY
    body.write_text(body.read_text() + "\nthis is not lua\n")
    for command in (["check"], ["render", "--all"]):
        done = run_render(*command, repo=temp_repo)
        assert done.returncode == 1, done
        lines = (done.stdout + done.stderr).splitlines()
        assert any(line.startswith(f"broken: {syntax}: bash -n: ") for line in lines), lines
        assert any(line.startswith(f"broken: {MODULEFILE_BODY}: luac -p: ") for line in lines), lines
    # shellcheck runs once bash can parse everything.
    text = (temp_repo / syntax).read_text()
    (temp_repo / syntax).write_text(text[: text.rindex("\nif then\n")] + "\n")
    done = run_render("check", repo=temp_repo)
    finding = re.compile(rf"broken: {re.escape(lint)}: shellcheck: \d+:\d+: .*SC2086")
    assert any(finding.match(line) for line in done.stdout.splitlines()), done.stdout
