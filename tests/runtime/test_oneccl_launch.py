"""oneCCL's launch contract (issue 18), per launcher: what the launcher gives a rank, what lightning_xpu sets for
oneCCL (lightning_xpu/environments/oneccl.py), and what the model of oneCCL (tests/oneccl_launch.py, sourced) says.

1. The unit table: every launcher of the model, with no site settings, with Aurora's module settings
   (recipes/sites/aurora.toml: `CCL_PROCESS_LAUNCHER=pmix`, `CCL_ATL_TRANSPORT=mpi`) and with ALCF's oneCCL page
   (the same and `CCL_KVS_MODE=mpi`, the documented alternative beyond 1,024 nodes), rank 0 and 1 of 2: without
   lightning_xpu the model fails where the sources say oneCCL fails; with it, it never does, and a site value is
   replaced only where it cannot work. On `ccl`, also two nodes of two ranks under the bindings' own rewrite.
2. One real launch per launcher (Lightning's own, torchrun, MPICH and Intel MPI `mpiexec`, `srun` in an `sbatch`
   job) of tests/runtime/_oneccl_worker.py, under ALCF's oneCCL page settings: each rank runs the patched strategy's
   process-group setup and one all_reduce on simulated XPU, and reports the oneCCL variables it saw. The simulated
   XCCL group checks the model in every rank. Each launcher family runs both profiles (the first XCCL release and
   the newest), split over its launchers to keep CI cheap: Hydra (MPICH the first, Intel MPI the newest), the
   launchers without an MPI world (Lightning's the first, torchrun the newest), and srun both.
"""

from __future__ import annotations

import json
import logging
import os
import sys
from pathlib import Path
from typing import Any

import pytest
import tomllib
import torch
from lightning_grid import NAMESPACE_SIDES, NAMESPACES, strategy_class, xpu_strategy

from lightning_xpu._namespaces import LIGHTNING
from lightning_xpu.environments.oneccl import BINDINGS_LOCAL_PLACE, ONECCL_LAUNCH_VARIABLES, oneccl_settings
from tests.oneccl_launch import (
    CONTRACTS,
    LAUNCHER_BY_NAME,
    LAUNCHERS,
    NODES_VARIABLE,
    Launcher,
    OneCCLLaunchFailure,
    Place,
    contract_for,
    identify,
    oneccl_check,
    torch_ccl_rewrite,
)
from tests.runtime import launches
from tests.runtime.test_launch import (
    REPO,
    _free_port,
    _mpiexec,
    _rank_environment,
    _run,
    srun_job,
)
from tests.xpu_profiles import (
    ALL_PROFILES,
    FACTS,
    NEWEST_PROFILE,
    ONECCL_FACTS,
    PROFILE_GRID,
    Profile,
    fact,
)
from tests.xpu_simulation import bootstrap_env

CPU = torch.device("cpu")
AURORA = {name: setting["value"]
          for name, setting in tomllib.loads((REPO / "recipes/sites/aurora.toml").read_text())["env"].items()
          if name in ONECCL_LAUNCH_VARIABLES}
# ALCF's oneCCL page (argonne-lcf/user-guides docs/aurora/data-science/frameworks/oneCCL.md@f550acf8) adds
# CCL_KVS_MODE=mpi: the alternative docs/aurora.md gives for runs beyond 1,024 nodes.
ALCF_PAGE = {**AURORA, "CCL_KVS_MODE": "mpi"}
SITES = {"no site settings": {}, "Aurora module": AURORA, "ALCF oneCCL page": ALCF_PAGE}
# Launchers that give oneCCL no local place of their own: Lightning's, torchrun, srun.
NOT_MPI = [row.name for row in LAUNCHERS if not row.mpi_world]


def test_aurora_sets_what_issue_18_is_about() -> None:
    """Issue 29: the module no longer sets CCL_KVS_MODE=mpi (ALCF's frameworks 2026.1.0 does not; it needs MPI
    initialised first); the page's full set is still what the launch tests run under."""
    assert ALCF_PAGE == {"CCL_PROCESS_LAUNCHER": "pmix", "CCL_ATL_TRANSPORT": "mpi", "CCL_KVS_MODE": "mpi"}
    assert AURORA == {"CCL_PROCESS_LAUNCHER": "pmix", "CCL_ATL_TRANSPORT": "mpi"}


def _rank(launch: Launcher, site: dict[str, str], rank: int) -> dict[str, str]:
    return {**site, **launch.variables(rank, 2)}


@pytest.mark.parametrize("site", SITES, ids=list(SITES))
@pytest.mark.parametrize("launch", LAUNCHERS, ids=[row.name for row in LAUNCHERS])
def test_the_runtime_meets_onecclcontract_under_every_launcher(launch: Launcher, site: str) -> None:
    for rank in (0, 1):
        environ = _rank(launch, SITES[site], rank)
        assert identify(environ) is launch
        settings = oneccl_settings(environ, rank, 2)
        oneccl_check({**environ, **settings.set}, launch, rank, 2)  # the model: oneCCL finds its place, no MPI gap
        kept = {name: value for name, value in SITES[site].items() if name not in settings.replaced}
        assert {**environ, **settings.set}.items() >= kept.items()
        if launch.mpi_world:  # MPI and PALS launchers: the site's transport and KVS mode stay
            assert not {"CCL_ATL_TRANSPORT", "CCL_KVS_MODE"} & set(settings.replaced)
        works = launch.pmix_server if SITES[site] else "MPI_LOCALRANKID" in environ  # pmix, or the default hydra
        if works:
            assert settings.set == {}, "a launcher value that works is left alone"
        else:
            assert settings.set["CCL_PROCESS_LAUNCHER"] == "none"
            assert (settings.set["CCL_LOCAL_RANK"], settings.set["CCL_LOCAL_SIZE"]) == (str(rank), "2")


@pytest.mark.parametrize("site", SITES, ids=list(SITES))
@pytest.mark.parametrize("name", NOT_MPI)
def test_without_the_runtime_onecclcannot_place_ranks_under_a_launcher_that_is_not_mpi(name: str, site: str) -> None:
    launch = LAUNCHER_BY_NAME[name]
    with pytest.raises(OneCCLLaunchFailure, match=r"could not get local_idx/count|needs an MPI world"):
        oneccl_check(_rank(launch, SITES[site], 1), launch, 1, 2)


@pytest.mark.parametrize("name", ["MPICH mpiexec", "Intel MPI mpiexec", "PALS mpiexec", "srun --mpi=pmi2"])
def test_without_the_runtime_aurora_pmix_fails_without_a_pmix_server(name: str) -> None:
    launch = LAUNCHER_BY_NAME[name]
    with pytest.raises(OneCCLLaunchFailure, match=r"CCL_PROCESS_LAUNCHER=pmix"):
        oneccl_check(_rank(launch, AURORA, 1), launch, 1, 2)


@pytest.mark.parametrize(("extra", "error"), [
    ({"CCL_PROCESS_LAUNCHER": "slurm"}, r"'slurm' is not one of"),  # oneCCL refuses an unknown value
    ({"CCL_ATL_TRANSPORT": "mpi"}, r"^CCL_ATL_TRANSPORT=mpi needs an MPI world"),
    ({"CCL_KVS_MODE": "mpi"}, r"^CCL_KVS_MODE=mpi needs an MPI world"),
], ids=["unknown-launcher", "mpi-transport", "mpi-kvs"])
def test_the_model_names_each_failure(extra: dict[str, str], error: str) -> None:
    launch = LAUNCHER_BY_NAME["torchrun"]
    placed = {**launch.variables(1, 2), "CCL_PROCESS_LAUNCHER": "none", "CCL_LOCAL_RANK": "1", "CCL_LOCAL_SIZE": "2"}
    oneccl_check(placed, launch, 1, 2)
    with pytest.raises(OneCCLLaunchFailure, match=error):
        oneccl_check({**placed, **extra}, launch, 1, 2)


def test_one_rank_on_a_node_needs_no_local_coordinates() -> None:
    launch = LAUNCHER_BY_NAME["Lightning"]
    oneccl_check(launch.variables(0, 1), launch, 0, 1)
    with pytest.raises(OneCCLLaunchFailure, match="could not get local_idx/count"):
        oneccl_check(launch.variables(0, 2), launch, 0, 2)


def test_variables_inherited_from_an_outer_launch_are_not_trusted() -> None:
    """Lightning's launcher inside `mpiexec -n 1`: both ranks inherit MPI_LOCALRANKID=0 of 1."""
    outer = {**LAUNCHER_BY_NAME["MPICH mpiexec"].variables(0, 1), "LOCAL_RANK": "1"}
    launch = identify(outer)
    with pytest.raises(OneCCLLaunchFailure, match="ranks collide"):
        oneccl_check(outer, launch, 1, 2)
    oneccl_check({**outer, **oneccl_settings(outer, 1, 2).set}, launch, 1, 2)


def test_a_working_user_choice_is_kept_and_a_replacement_is_said_once_on_rank_0(monkeypatch, caplog) -> None:
    from lightning_xpu.strategies.process_group import set_oneccl_launch

    launches.launch(monkeypatch, launches.TORCHRUN)
    for name in ONECCL_LAUNCH_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("CCL_PROCESS_LAUNCHER", "torchrun")  # reads LOCAL_RANK/LOCAL_WORLD_SIZE, set by torchrun
    with caplog.at_level(logging.WARNING):
        set_oneccl_launch(1, 2, global_rank=0)
    assert "CCL_LOCAL_RANK" not in os.environ and not caplog.records
    with caplog.at_level(logging.WARNING):
        for rank in (1, 0):
            for name, value in ALCF_PAGE.items():  # the page's values, each time
                monkeypatch.setenv(name, value)
            set_oneccl_launch(rank, 2, global_rank=rank)
            assert rank == 0 or not caplog.records, "only rank 0 says it"
    [record] = caplog.records
    assert "CCL_PROCESS_LAUNCHER=pmix" in record.getMessage() and "\n" not in record.getMessage()
    assert f"\n{record.getMessage()}\n" in (REPO / "docs" / "xpu-guide.md").read_text(), "the guide shows another line"


@NAMESPACE_SIDES
@pytest.mark.parametrize("xccl", [True, False], ids=["xccl", "ccl"])
def test_both_backends_give_onecclthe_place_before_init(simulated_xpu, recorded_process_group, namespace, side,
                                                       xccl, monkeypatch) -> None:
    """Under Lightning's own launcher with ALCF's oneCCL page set: the recorded group checks the model."""
    launches.launch(monkeypatch, {})
    pg = recorded_process_group(simulated_xpu(xccl=xccl, oneccl=not xccl).events)
    for name, value in ALCF_PAGE.items():
        monkeypatch.setenv(name, value)
    xpu_strategy(namespace, side, "DDPStrategy").setup_environment()
    assert pg.backend == ("xccl" if xccl else "ccl")
    seen = {name: os.environ.get(name) for name in ONECCL_LAUNCH_VARIABLES}
    assert seen == {"CCL_PROCESS_LAUNCHER": "none", "CCL_LOCAL_RANK": "1", "CCL_LOCAL_SIZE": "2",
                    "CCL_ATL_TRANSPORT": "ofi", "CCL_KVS_MODE": "pmi"}


def test_with_a_pmix_server_aurora_settings_work_untouched() -> None:
    launch = LAUNCHER_BY_NAME["PALS mpiexec --pmi=pmix"]
    oneccl_check(_rank(launch, AURORA, 1), launch, 1, 2)
    assert oneccl_settings(_rank(launch, AURORA, 1), 1, 2).set == {}


@NAMESPACES
def test_off_xpu_the_environment_is_not_touched(recorded_process_group, namespace, monkeypatch) -> None:
    launches.launch(monkeypatch, {})
    recorded = recorded_process_group()
    for name, value in AURORA.items():
        monkeypatch.setenv(name, value)
    accelerator = namespace.pytorch_module("accelerators").CPUAccelerator()
    environment = namespace.fabric_module("plugins.environments").LightningEnvironment()
    strategy = strategy_class(namespace, "trainer", "DDPStrategy")(accelerator, parallel_devices=[CPU] * 2,
                                                                   cluster_environment=environment)
    strategy.setup_environment()
    assert recorded.backend == "gloo"
    assert {name: os.environ.get(name) for name in ONECCL_LAUNCH_VARIABLES} == {
        name: AURORA.get(name) for name in ONECCL_LAUNCH_VARIABLES}


# ---- the `ccl` bindings rewrite the place (issue 29) -----------------------------------------------------------
# Two nodes of two ranks: every rank of the world, by its place.
TWO_NODES = [Place(local, 2, node, 2) for node in (0, 1) for local in (0, 1)]
TWO_NODE_IDS = [f"rank{place.rank}" for place in TWO_NODES]


def _bindings_group(environ: dict[str, str], place: Place) -> dict[str, str]:
    """`environ` after the bindings' ProcessGroupCCL constructor ran in it (tests/oneccl_launch.py)."""
    rewritten = dict(environ)
    torch_ccl_rewrite(rewritten, place.rank, place.world)
    return rewritten


@pytest.mark.parametrize("place", TWO_NODES, ids=TWO_NODE_IDS)
@pytest.mark.parametrize("site", SITES, ids=list(SITES))
@pytest.mark.parametrize("launch", LAUNCHERS, ids=[row.name for row in LAUNCHERS])
def test_on_ccl_the_bindings_rewrite_gives_every_rank_of_two_nodes_its_place(launch: Launcher, site: str,
                                                                            place: Place) -> None:
    """Fails on main: only CCL_* was set, and the bindings rewrote it from the global rank and world size."""
    environ = {**SITES[site], **launch.variables(place.local, place.size, place.node, place.nodes)}
    settings = oneccl_settings(environ, place.local, place.size, bindings=True)
    assert {name: settings.set[name] for name in BINDINGS_LOCAL_PLACE} == {
        "LOCAL_RANK": str(place.local), "LOCAL_WORLD_SIZE": str(place.size)}
    oneccl_check(_bindings_group({**environ, **settings.set}, place), launch, place.local, place.size)


@pytest.mark.parametrize("name", ["srun", "Lightning"])
def test_the_model_misplaces_a_second_node_when_only_ccl_variables_are_set(name: str) -> None:
    """The modelled rewrite (intel/torch-ccl src/ProcessGroupCCL.cpp@v2.7.0+xpu): srun gives no LOCAL_RANK,
    Lightning no LOCAL_WORLD_SIZE, so rank 3 of 4 becomes local rank 3 of 4 whatever lightning_xpu set in CCL_*."""
    launch, place = LAUNCHER_BY_NAME[name], Place(1, 2, 1, 2)
    environ = launch.variables(place.local, place.size, place.node, place.nodes)
    placed = {**environ, **oneccl_settings(environ, place.local, place.size).set}
    oneccl_check(placed, launch, place.local, place.size)  # right until the bindings' constructor runs
    rewritten = _bindings_group(placed, place)
    assert (rewritten["CCL_LOCAL_RANK"], rewritten["CCL_LOCAL_SIZE"]) == ("3", "4")
    with pytest.raises(OneCCLLaunchFailure, match="read local rank 3 of 4"):
        oneccl_check(rewritten, launch, place.local, place.size)


def test_the_bindings_rewrite_keeps_a_set_zero_and_skips_mpi_launches() -> None:
    """setOneCCLEnvVar(name, int) is setenv(name, value, overwrite=value); with_mpirun() skips the rewrite."""
    environ = {"CCL_LOCAL_RANK": "7", "CCL_LOCAL_SIZE": "7", "LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "2"}
    torch_ccl_rewrite(environ, 2, 4)
    assert (environ["CCL_PROCESS_LAUNCHER"], environ["CCL_LOCAL_RANK"], environ["CCL_LOCAL_SIZE"]) == ("none", "7", "2")
    hydra = LAUNCHER_BY_NAME["MPICH mpiexec"].variables(1, 2, 1, 2)
    untouched = dict(hydra)
    torch_ccl_rewrite(untouched, 3, 4)
    assert untouched == hydra


# Rank 3 of a two-node launch (local rank 1 of 2 on the second node), as Lightning's launcher and srun start it.
SECOND_NODE = {
    "Lightning": {"LOCAL_RANK": "1", "NODE_RANK": "1", "WORLD_SIZE": "4", "MASTER_ADDR": "127.0.0.1",
                  "MASTER_PORT": "29500"},
    "srun": {**launches.SRUN, "SLURM_JOB_NODELIST": "node[1-2]", "SLURM_NODELIST": "node[1-2]", "SLURM_NNODES": "2",
             "SLURM_JOB_NUM_NODES": "2", "SLURM_NTASKS": "4", "SLURM_NPROCS": "4", "SLURM_TASKS_PER_NODE": "2(x2)",
             "SLURM_STEP_NUM_TASKS": "4", "SLURM_STEP_NUM_NODES": "2", "SLURM_STEP_NODELIST": "node[1-2]",
             "SLURM_STEP_TASKS_PER_NODE": "2(x2)", "SLURM_PROCID": "3", "SLURM_LOCALID": "1", "SLURM_NODEID": "1",
             "SLURM_GTIDS": "2,3"},
}
LAST_ON_CCL = [version for version in ALL_PROFILES if fact("is_xccl_available", version) is not True][-1]


@pytest.mark.parametrize("start", SECOND_NODE)
def test_a_two_node_ccl_group_finds_its_place_under_the_modelled_bindings(simulated_xpu, recorded_process_group,
                                                                         start, monkeypatch) -> None:
    """Fails on main (OneCCLLaunchFailure: oneCCL read local rank 3 of 4): the simulated ccl group runs the
    bindings' rewrite before checking oneCCL's contract."""
    launches.launch(monkeypatch, SECOND_NODE[start])
    pg = recorded_process_group(simulated_xpu(torch=LAST_ON_CCL, oneccl=True, ipex=True).events)
    trainer = LIGHTNING.pytorch_module("").Trainer(accelerator="xpu", devices=2, num_nodes=2, strategy="ddp",
                                                   logger=False)
    assert (trainer.strategy.global_rank, trainer.strategy.local_rank) == (3, 1)
    trainer.strategy.setup_environment()
    assert pg.backend == "ccl"
    seen = {name: os.environ.get(name) for name in ("CCL_PROCESS_LAUNCHER", "CCL_LOCAL_RANK", "CCL_LOCAL_SIZE",
                                                    *BINDINGS_LOCAL_PLACE)}
    assert seen == {"CCL_PROCESS_LAUNCHER": "none", "CCL_LOCAL_RANK": "1", "CCL_LOCAL_SIZE": "2", "LOCAL_RANK": "1",
                    "LOCAL_WORLD_SIZE": "2"}


def test_on_node_0_of_a_lightning_launch_the_local_size_is_the_nodes_share(simulated_xpu, recorded_process_group,
                                                                         monkeypatch) -> None:
    """Rank 1 of 4 on the first node: the bindings would make it local rank 1 of 4 (Lightning exports no
    LOCAL_WORLD_SIZE). The simulated launch spans 2 nodes (tests/oneccl_launch.py NODES_VARIABLE)."""
    launches.launch(monkeypatch, {**SECOND_NODE["Lightning"], "NODE_RANK": "0"})
    monkeypatch.setenv(NODES_VARIABLE, "2")
    pg = recorded_process_group(simulated_xpu(torch=LAST_ON_CCL, oneccl=True, ipex=True).events)
    trainer = LIGHTNING.pytorch_module("").Trainer(accelerator="xpu", devices=2, num_nodes=2, strategy="ddp",
                                                   logger=False)
    trainer.strategy.setup_environment()
    assert pg.backend == "ccl" and (os.environ["CCL_LOCAL_RANK"], os.environ["CCL_LOCAL_SIZE"]) == ("1", "2")


def test_xccl_does_not_get_the_bindings_variables(simulated_xpu, recorded_process_group, monkeypatch) -> None:
    """XCCL reads no LOCAL_RANK/LOCAL_WORLD_SIZE (intel/torch-xpu-ops src/xccl): nothing is exported for it."""
    launches.launch(monkeypatch, SECOND_NODE["srun"])
    pg = recorded_process_group(simulated_xpu(torch=NEWEST_PROFILE).events)
    trainer = LIGHTNING.pytorch_module("").Trainer(accelerator="xpu", devices=2, num_nodes=2, strategy="ddp",
                                                   logger=False)
    trainer.strategy.setup_environment()
    assert pg.backend == "xccl" and not set(BINDINGS_LOCAL_PLACE) & set(os.environ)


def test_the_contract_is_keyed_by_the_bundled_oneccl_and_only_2021_14_is_verified() -> None:
    """Every release's bundled oneCCL (row bundled_oneccl) has one contract row; the rows beyond the oneCCL the
    contract was read from say they are assumed."""
    for version in ALL_PROFILES:
        contract_for(fact("bundled_oneccl", version))
    assert [row.oneccl for row in CONTRACTS if row.verified] == ["==2021.14.*"]
    assert not contract_for("2021.15.2").verified and "onecclCommInitRank" in contract_for("2022.1.2").note
    with pytest.raises(LookupError, match=r"no single oneCCL launch contract for oneCCL 2023\.0"):
        contract_for("2023.0")


# What the one list in the docs says for each unverified row beneath the process group (docs/xpu-guide.md).
LISTED_AS = {"bundled_oneccl": "2022.1.2", "xccl_communicator_api": "onecclCommInitRank",
             "wheel_requires_pyzes": "pyzes"}


def test_what_no_source_settles_is_one_list_that_names_each_unverified_row_and_the_site_guides_link_to() -> None:
    guide = (REPO / "docs" / "xpu-guide.md").read_text()
    assert guide.count("\n## What no source settles\n") == 1
    section = guide.split("\n## What no source settles\n", 1)[1].split("\n## ", 1)[0]
    beneath = {*(row.name for row in ONECCL_FACTS), "wheel_requires_pyzes"}
    rows = {row.name for row in FACTS if not row.verified and row.name in beneath}
    assert rows <= set(LISTED_AS), f"unverified rows the list does not name: {sorted(rows - set(LISTED_AS))}"
    assert all(LISTED_AS[name] in section for name in rows)
    assert any(not row.verified for row in CONTRACTS) and "oneCCL 2021.15 and later" in section
    for text in ("PMIX_RANK", "PMI_SIZE", "CCL_ATL_TRANSPORT=mpi"):
        assert text in section
    for site in ("aurora", "dawn"):
        assert "xpu-guide.md#what-no-source-settles" in (REPO / "docs" / f"{site}.md").read_text(), site


# ---- one real launch per launcher --------------------------------------------------------------------------

# The first XCCL release of the grid (from the table) and the newest.
FIRST_XCCL = next(version for version in PROFILE_GRID if Profile(version).fact("is_xccl_available") is True)
PROFILES = tuple(dict.fromkeys((FIRST_XCCL, NEWEST_PROFILE)))
WORKER = Path(__file__).with_name("_oneccl_worker.py")
# Which profiles each launch runs: every family of launchers (see the module docstring) covers PROFILES.
PROFILES_OF = {"lightning": PROFILES[:1], "torchrun": PROFILES[-1:], "mpich": PROFILES[:1], "impi": PROFILES[-1:],
               "srun": PROFILES}
# Every rank runs the worker once per profile ($5...), each on its own port from $4: python $1, worker $2, out $3.
# torchrun's workers would otherwise join its agent's store on the first port only.
PER_PROFILE = """unset TORCHELASTIC_USE_AGENT_STORE
port=$4
for profile in "${@:5}"; do
  LXPU_SIM_PROFILE=$profile MASTER_PORT=$port "$1" "$2" "$3" || exit $?
  port=$((port + 1))
done
"""
# The launch that starts the ranks, and the launcher the model must recognise in them.
STARTS = {"lightning": "Lightning", "torchrun": "torchrun", "mpich": "MPICH mpiexec", "impi": "Intel MPI mpiexec",
          "srun": "srun"}


def _per_rank(out: Path, start: str) -> list[str]:
    out.mkdir()
    return ["bash", "-c", PER_PROFILE, "per-profile", sys.executable, str(WORKER), str(out), str(_free_port()),
            *PROFILES_OF[start]]


def _environment(start: str) -> dict[str, str]:
    """A shell with ALCF's oneCCL page set; ranks simulate XPU (tests/bootstrap), the profile set per run."""
    return bootstrap_env(Profile(PROFILES_OF[start][0]), _rank_environment(**ALCF_PAGE))


def _check_ranks(out: Path, output: str, start: str) -> None:
    reports = [json.loads(path.read_text()) for path in sorted(out.glob("*.json"))]
    ran = sorted((report["profile"], report["global_rank"]) for report in reports)
    assert ran == sorted((profile, rank) for profile in PROFILES_OF[start] for rank in (0, 1)), output
    for report in reports:
        launch = identify(report["launch_environment"])
        assert launch.name.startswith(STARTS[start]), (launch.name, report)
        assert report["all_reduce"] == 3.0 and not launch.pmix_server
        mpi = launch.mpi_world  # an MPI world keeps the module's transport and KVS mode
        assert report["oneccl"] == {
            "CCL_PROCESS_LAUNCHER": "none", "CCL_LOCAL_RANK": str(report["local_rank"]), "CCL_LOCAL_SIZE": "2",
            "CCL_ATL_TRANSPORT": ALCF_PAGE["CCL_ATL_TRANSPORT"] if mpi else "ofi",
            "CCL_KVS_MODE": ALCF_PAGE["CCL_KVS_MODE"] if mpi else "pmi",
        }, report
    assert output.count("cannot work under this launch") == len(PROFILES_OF[start]), output  # rank 0 of each run, once


@pytest.mark.parametrize("start", [
    "lightning", "torchrun", pytest.param("mpich", marks=pytest.mark.mpi), pytest.param("impi", marks=pytest.mark.impi)
])
def test_every_rank_gets_onecclplace_under_a_real_launch(start: str, tmp_path: Path,
                                                         newest_lightning_only: Any) -> None:
    prefix = {"lightning": [], "torchrun": [sys.executable, "-m", "torch.distributed.run", "--standalone",
                                            "--nproc-per-node=2", "--no-python"]}
    command = prefix[start] if start in prefix else [_mpiexec(start), "-n", "2"]
    out = tmp_path / "out"
    output = _run([*command, *_per_rank(out, start)], _environment(start))
    _check_ranks(out, output, start)


@pytest.mark.slurm
def test_every_rank_gets_onecclplace_under_srun(tmp_path: Path, newest_lightning_only: Any) -> None:
    out = tmp_path / "out"
    output = srun_job(tmp_path, _per_rank(out, "srun"), _environment("srun"))
    _check_ranks(out, output, "srun")
