"""The fact table (tests/xpu_profiles.py): every supported release builds a profile, its 2.13 rows against the torch
installed here, the strictness of the simulation, representative runtime paths on every profile of the grid and the
process-group setup on every supported release (newest Lightning only, see conftest)."""

from __future__ import annotations

import ast
import inspect
from pathlib import Path
from types import SimpleNamespace

import pytest
import tomllib
import torch
from packaging.version import Version

import lightning_xpu
from lightning_xpu._namespaces import LIGHTNING
from lightning_xpu.flops import peak_flops
from lightning_xpu.profiler import xpu_activity
from lightning_xpu.rng import XPU_KEY
from lightning_xpu.strategies.fork_guard import fork_refusal
from tests.xpu_profiles import (
    ABSENT,
    FACTS,
    MATRIX,
    MODELLED,
    NEWEST_PROFILE,
    NEWEST_READ,
    PROFILE_GRID,
    SUPPORTED_RELEASES,
    TABLE_RELEASES,
    Profile,
    UnknownFact,
    check_device_id,
    fact,
    fact_names,
    is_modelled,
    newest_lightning_in,
)

RUNTIME = Path(lightning_xpu.__file__).parent
INSTALLED = torch.__version__.split("+")[0]
MAX_1550 = "Simulated Intel(R) Data Center GPU Max 1550"
XPU0 = torch.device("xpu", 0)


# ---- the table ------------------------------------------------------------------------------------------------


def test_every_row_names_its_source_and_no_two_rows_of_a_fact_overlap() -> None:
    for row in FACTS:
        assert "@" in row.source, f"{row.name} {row.versions}: the source names file@tag"
        assert row.verified or row.note, f"{row.name} {row.versions}: an unverified row says what is inferred"
        assert "shared/" not in row.source, f"{row.name}: cite the upstream source, not a research note"
    for name in fact_names():
        for version in TABLE_RELEASES:
            covering = [row for row in FACTS if row.name == name and row.covers(version)]
            assert len(covering) <= 1, f"{name} has overlapping rows at {version}"


def test_every_supported_release_and_every_release_read_builds_a_profile() -> None:
    """The supported releases are recipes/matrix.toml's; each must build from the table (issue 18), and so must
    every release the rows were read from, so a release added to the matrix later is ready."""
    assert SUPPORTED_RELEASES and set(SUPPORTED_RELEASES) <= set(TABLE_RELEASES), (
        f"recipes/matrix.toml supports {SUPPORTED_RELEASES}, the table was read for {TABLE_RELEASES}")
    failures = []
    for version in TABLE_RELEASES:
        try:
            Profile(version)
        except UnknownFact as gap:
            failures.append(str(gap))
    assert failures == []


def test_the_matrix_backend_of_each_release_is_the_one_the_table_gives() -> None:
    matrix = tomllib.loads(MATRIX.read_text())["versions"]
    for version in SUPPORTED_RELEASES:
        expected = "xccl" if fact("is_xccl_available", version) is True else "ccl"
        assert matrix[version]["backend"]["name"] == expected, version


def test_a_release_without_a_row_is_refused_naming_the_gap() -> None:
    major, minor = Version(TABLE_RELEASES[0]).release[:2]
    with pytest.raises(UnknownFact, match=rf"no single row .* at torch {major}\.{minor - 1} .*add one with its source"):
        Profile(f"{major}.{minor - 1}")  # older than any row: the table says nothing rather than guess
    major, minor = Version(NEWEST_READ).release[:2]
    with pytest.raises(UnknownFact, match=rf"newer than any release the table was read from \({NEWEST_READ}\)"):
        Profile(f"{major}.{minor + 1}")  # open-ended rows must not speak for a release nobody read


def test_the_grid_is_the_oldest_the_last_ccl_the_first_xccl_and_the_newest_release() -> None:
    assert PROFILE_GRID[0] == SUPPORTED_RELEASES[0] and PROFILE_GRID[-1] == NEWEST_PROFILE == SUPPORTED_RELEASES[-1]
    xccl = [fact("is_xccl_available", version) is True for version in SUPPORTED_RELEASES]
    switch = xccl.index(True)
    assert SUPPORTED_RELEASES[switch - 1] in PROFILE_GRID and SUPPORTED_RELEASES[switch] in PROFILE_GRID
    assert len(PROFILE_GRID) == len(set(PROFILE_GRID)) <= 4
    eras = {(fact("is_xccl_available", v), fact("device_id_rule", v), fact("onednn_fp32_precision_api", v))
            for v in PROFILE_GRID}
    assert len(eras) == len(PROFILE_GRID)  # each grid release stands for a different behaviour era


def test_the_grid_runs_on_the_newest_lightning_venv_only(tmp_path: Path) -> None:
    for name in ("2.2.5", "2.10.1", "2.6.6", "logs"):
        (tmp_path / name).mkdir()
    assert str(newest_lightning_in(str(tmp_path))) == "2.10.1"
    assert newest_lightning_in(str(tmp_path / "missing")) is None


# ---- the 2.13 rows against the torch installed here (2.13.0+cpu) ------------------------------------------------


@pytest.fixture
def installed_profile() -> Profile:
    if not Profile.__dataclass_fields__ or INSTALLED.rsplit(".", 1)[0] != "2.13":
        pytest.fail(f"these checks read torch 2.13, the CI venvs have {torch.__version__}: update the 2.13 rows")
    return Profile(INSTALLED)


def test_2_13_tf32_api_matches_the_installed_torch(installed_profile: Profile) -> None:
    mkldnn = torch.backends.mkldnn
    assert hasattr(mkldnn, "allow_tf32") == (installed_profile.fact("onednn_allow_tf32") != ABSENT)
    assert hasattr(mkldnn, "matmul") == (installed_profile.fact("onednn_fp32_precision_api") != ABSENT)
    try:
        mkldnn.matmul.fp32_precision = "tf32"
        with pytest.raises(RuntimeError, match="mix of the legacy and new APIs"):
            torch.get_float32_matmul_precision()
        assert installed_profile.fact("mixed_precision_api_raises") is True
    finally:
        mkldnn.matmul.fp32_precision = "none"
    assert torch.get_float32_matmul_precision() == "highest"


def test_2_13_sharded_grad_scaler_devices_match_the_installed_torch(installed_profile: Profile) -> None:
    from torch.distributed.fsdp.sharded_grad_scaler import _is_supported_device

    xpu_tensor = SimpleNamespace(is_cuda=False, device=torch.device("xpu"))
    assert _is_supported_device(xpu_tensor) is installed_profile.fact("sharded_scaler_xpu")


def test_2_13_backend_names_match_the_installed_torch(installed_profile: Profile) -> None:
    backend = torch.distributed.Backend
    has_xccl = "xccl" in backend.backend_list and backend.default_device_backend_map.get("xpu") == "xccl"
    assert has_xccl is installed_profile.fact("backend_xccl_name")
    assert hasattr(torch.distributed, "is_xccl_available") == (installed_profile.fact("is_xccl_available") != ABSENT)


@pytest.mark.parametrize("device_id", [torch.device("xpu", 0), torch.device("xpu"), torch.device("cpu"), 0, None],
                         ids=["xpu0", "xpu-no-index", "cpu", "int", "none"])
def test_2_13_device_id_rules_match_the_installed_torch(installed_profile: Profile, device_id, tmp_path) -> None:
    """The model, given this CPU build's accelerator (none), accepts and refuses what the real call does."""
    import torch.distributed as dist

    accelerator = torch.accelerator.current_accelerator()
    try:
        check_device_id(installed_profile, device_id, accelerator and accelerator.type, 0)
        expected = None
    except ValueError as refused:
        expected = refused
    try:
        dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1,
                                device_id=device_id)
        real = None
    except ValueError as refused:
        real = refused
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()
    assert (expected is None) == (real is None), f"model: {expected!r}, torch: {real!r}"


def test_2_13_initialising_and_deferred_calls_match_the_installed_torch(installed_profile: Profile) -> None:
    for name in installed_profile.fact("initialising_calls"):
        function = getattr(torch.xpu, name)
        if inspect.isfunction(function) and name != "get_device_name" and name != "get_rng_state_all":
            assert "_lazy_init()" in inspect.getsource(function), name
    deferred = installed_profile.fact("deferred_calls")
    for name in deferred:
        source = inspect.getsource(getattr(torch.xpu, name))
        assert "_lazy_call(" in source or any(f" {other}(" in source for other in deferred if other != name), name
    assert hasattr(torch.xpu, "_device_count_zes") == (installed_profile.fact("count_poisons_fork") == "unless-pyzes")
    assert hasattr(torch.profiler.ProfilerActivity, "XPU")
    assert torch.profiler.ProfilerActivity.XPU not in torch.profiler.supported_activities()  # no PTI in a CPU build


# ---- strictness -------------------------------------------------------------------------------------------------


def _torch_paths(tree: ast.AST) -> set[str]:
    """Dotted paths below `torch.` into xpu/distributed/backends that the code names (attributes, imports,
    getattr with a constant name)."""
    roots = ("xpu", "distributed", "backends")
    paths: set[str] = set()

    def dotted(node: ast.AST) -> str | None:
        if isinstance(node, ast.Name):
            return node.id
        if isinstance(node, ast.Attribute):
            base = dotted(node.value)
            return None if base is None else f"{base}.{node.attr}"
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "getattr":
            if len(node.args) >= 2 and isinstance(node.args[1], ast.Constant):
                base = dotted(node.args[0])
                return None if base is None else f"{base}.{node.args[1].value}"
        return None

    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("torch."):
            paths.update(f"{node.module}.{alias.name}" for alias in node.names)
        elif isinstance(node, (ast.Attribute, ast.Call)):
            path = dotted(node)
            if path:
                paths.add(path)
    return {path.removeprefix("torch.") for path in paths
            if path.startswith("torch.") and path.split(".")[1] in roots and path.count(".") >= 2}


def test_every_torch_xpu_distributed_backends_attribute_the_runtime_names_is_modelled() -> None:
    named = set().union(*(_torch_paths(ast.parse(path.read_text())) for path in RUNTIME.rglob("*.py")))
    assert "xpu.get_rng_state_all" in named and "distributed.is_xccl_available" in named  # the scan sees them
    assert sorted(path for path in named if not is_modelled(path)) == []


def test_an_unmodelled_runtime_access_is_recorded(simulated_xpu) -> None:
    sim = simulated_xpu(torch="2.13")
    runtime_code = compile("torch.xpu.mem_get_info", "<runtime>", "eval")
    eval(runtime_code, {"__name__": "lightning_xpu.example", "torch": torch})
    assert sim.unmodelled == ["xpu.mem_get_info"]
    sim.unmodelled.clear()  # the fixture would fail this test otherwise: that is the point being shown
    torch.xpu.mem_get_info  # noqa: B018  (tests and torch itself are not the runtime: not recorded)
    assert sim.unmodelled == [] and "xpu.mem_get_info" not in MODELLED


# ---- the grid: representative runtime paths on each profile ----------------------------------------------------





@pytest.fixture(autouse=True)
def _rank(request: pytest.FixtureRequest) -> None:
    if {"xpu_profile", "every_xpu_profile"} & set(request.fixturenames):
        request.getfixturevalue("rank_zero_only_rank")


def profile_stack(simulated_xpu, version: str, **kwargs):
    """A healthy XPU stack of that release: IPEX and the oneCCL bindings where the release needs them for ccl."""
    needs_ccl = fact("is_xccl_available", version) is not True
    return simulated_xpu(torch=version, oneccl=needs_ccl, ipex=needs_ccl, **kwargs)


def test_ddp_process_group_and_a_users_mesh_on_every_profile(simulated_xpu, recorded_process_group,
                                                             every_xpu_profile: str) -> None:
    """The DDP process group on each supported release, and a user's 2-D `init_device_mesh` over it (as in
    `configure_model`): from 2.12 DeviceMesh splits a group bound to a device, which XCCL cannot do (row
    mesh_splits_bound_group), so the group must not be bound."""
    sim = profile_stack(simulated_xpu, every_xpu_profile)
    pg = recorded_process_group(sim.events)
    from torch.distributed.device_mesh import init_device_mesh  # the recorded one
    trainer = LIGHTNING.pytorch_module("").Trainer(accelerator="xpu", devices=2, strategy="ddp", logger=False)
    trainer.strategy.setup_environment()  # device_id passes the release's rules (checked by recorded_process_group)
    assert pg.backend == ("xccl" if fact("is_xccl_available", every_xpu_profile) is True else "ccl")
    assert torch.device("xpu", 0) in sim.set_device_calls
    init_device_mesh("xpu", (1, 2), mesh_dim_names=("replicate", "shard"))
    assert [mesh.mesh_shape for mesh in pg.meshes] == [(1, 2)]
    assert not sim.unmodelled


def test_trainer_precision_rng_memory_profiler_and_mfu_on_each_profile(simulated_xpu, xpu_profile: str) -> None:
    sim = profile_stack(simulated_xpu, xpu_profile, eu_count=None, pyzes=False)  # the stricter case
    trainer = LIGHTNING.pytorch_module("").Trainer(accelerator="xpu", devices=2, strategy="ddp",
                                                   precision="bf16-mixed", logger=False)
    assert trainer.precision_plugin.device == "xpu"
    assert XPU_KEY in LIGHTNING.fabric_module("utilities.seed")._collect_rng_states()
    LIGHTNING.pytorch_module("utilities.memory").garbage_collection_cuda()
    assert xpu_activity() == torch.profiler.ProfilerActivity.XPU
    flops = LIGHTNING.fabric_module("utilities.throughput").get_available_flops(XPU0, torch.float32)
    assert flops == peak_flops(MAX_1550, 512, torch.float32, tf32_matmul=False)  # 512: the filled EU count
    assert fork_refusal() is not None  # counting poisoned fork here (no pyzes)
    assert not sim.unmodelled


def test_fsdp_16_mixed_on_each_profile(simulated_xpu, xpu_profile: str) -> None:
    profile_stack(simulated_xpu, xpu_profile)

    def build():
        return LIGHTNING.pytorch_module("").Trainer(accelerator="xpu", devices=2, strategy="fsdp",
                                                    precision="16-mixed", logger=False)

    if fact("sharded_scaler_xpu", xpu_profile):
        assert build().precision_plugin.scaler is not None
    else:
        with pytest.raises(ValueError, match="bf16-mixed"):
            build()


def test_profiler_activity_only_on_pti_builds(simulated_xpu) -> None:
    simulated_xpu(torch="2.8", pti=False)  # row profiler_xpu_activity: an XPU build without Kineto/PTI
    assert xpu_activity() is None


def test_reported_eu_count_wins_over_the_512_fill(simulated_xpu) -> None:
    simulated_xpu(torch="2.13", eu_count=448)  # an Aurora Max 1550 tile (row eu_count_default)
    flops = LIGHTNING.fabric_module("utilities.throughput").get_available_flops(XPU0, torch.bfloat16)
    assert flops == peak_flops(MAX_1550, 448, torch.bfloat16, tf32_matmul=False)


def test_fsdp_device_mesh_on_each_profile(simulated_xpu, recorded_process_group, xpu_profile: str) -> None:
    """Row mesh_splits_bound_group: on 2.13 a mesh over an XCCL group bound to a device fails, so the runtime must
    not bind FSDP's group (it drops device_id for the mesh-based strategies)."""
    sim = profile_stack(simulated_xpu, xpu_profile)
    pg = recorded_process_group(sim.events)
    strategy = LIGHTNING.pytorch_module("strategies").FSDPStrategy(device_mesh=(1, 2))
    trainer = LIGHTNING.pytorch_module("").Trainer(accelerator="xpu", devices=2, strategy=strategy, logger=False)
    trainer.strategy.setup_environment()
    assert [mesh.device_type for mesh in pg.meshes] == ["xpu"]
    assert pg.init_kwargs.get("device_id") is None


def test_a_mesh_over_a_bound_xccl_group_splits_where_the_table_says(simulated_xpu, every_xpu_profile: str) -> None:
    from tests.xpu_simulation import check_init_device_mesh

    simulated_xpu(torch=every_xpu_profile)
    check_init_device_mesh(None, "xccl", (1, 2))  # an unbound group is always fine
    check_init_device_mesh(XPU0, "xccl", (2,))  # a 1-D mesh over every rank reuses the default group
    if fact("mesh_splits_bound_group", every_xpu_profile):
        with pytest.raises(RuntimeError, match="does not support splitting"):
            check_init_device_mesh(XPU0, "xccl", (1, 2))
    else:
        check_init_device_mesh(XPU0, "xccl", (1, 2))


def test_the_newest_profile_counts_through_sysman_by_default(simulated_xpu) -> None:
    """Fails on main: from 2.14 the XPU wheels install pyzes (row wheel_requires_pyzes, pytorch/pytorch#185969), so
    a stack of the newest release counts devices through Level Zero Sysman without poisoning fork; a profile without
    pyzes must say so."""
    assert Profile(NEWEST_PROFILE).pyzes is True and Profile("2.12").pyzes is False
    assert Profile.from_env(Profile(NEWEST_PROFILE, pyzes=False).as_env()).pyzes is False
    sim = simulated_xpu(torch=NEWEST_PROFILE)
    LIGHTNING.pytorch_module("").Trainer(accelerator="xpu", devices=2, strategy="ddp", logger=False)
    assert not sim.fork_poisoned and fork_refusal() is None
