"""The report model: JSON validated by the committed schema, the Markdown rendering, and the schema validator."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from lightning_xpu.install_facts import environment_tag, environment_variant
from lightning_xpu.validation import FAIL, PASS, SKIP, Check, Report
from lightning_xpu.validation.framework import LEVELS
from lightning_xpu.validation.markdown import render
from lightning_xpu.validation.model import relevant_environment, versions
from lightning_xpu.validation.schema import SchemaError, check_report, errors, load_schema


def sample_report() -> Report:
    checks = [Check("device_properties", PASS, "2 x Max 1550"), Check("bf16_fit", FAIL, "loss did not decrease"),
              Check("ddp_srun", SKIP, "not inside a Slurm allocation")]
    return Report("validation", versions(), checks=checks, devices=[{"index": 0, "name": "a | b"}],
                  environment={"ZE_FLAT_DEVICE_HIERARCHY": "FLAT"}, notes=["one note"])


def test_a_report_writes_valid_json_and_readable_markdown(tmp_path: Path) -> None:
    sample_report().write(tmp_path / "r.json", tmp_path / "r.md")
    data = json.loads((tmp_path / "r.json").read_text())
    check_report(data)
    assert data["ok"] is False and data["summary"] == {"pass": 1, "fail": 1, "skip": 1}
    assert data["versions"]["torch"].startswith("2.") and data["versions"]["lightning_xpu"]
    markdown = (tmp_path / "r.md").read_text()
    assert "| `bf16_fit` | **FAILED** | loss did not decrease |" in markdown
    assert "a \\| b" in markdown and "ZE_FLAT_DEVICE_HIERARCHY=FLAT" in markdown
    assert render(data) == markdown


@pytest.mark.parametrize(
    ("change", "problem"),
    [
        (lambda d: d["checks"][0].update(status="ok"), "$.checks[0].status: 'ok' is not one of"),
        (lambda d: d.pop("versions"), "$: missing 'versions'"),
        (lambda d: d.update(extra=1), "$: unexpected key 'extra'"),
        (lambda d: d["checks"][1].update(reason=""), "$.checks[1].reason: shorter than 1"),
        (lambda d: d["summary"].update(skip=True), "$.summary.skip: expected integer, got bool"),
        (lambda d: d["checks"][0].update(name="Bad Name"), "does not match"),
        (lambda d: d["versions"].update(torch=2), "$.versions.torch: expected string or null"),
        (lambda d: d["checks"][0].update(oneccl=[{"rank": 0, "variables": {"CCL_LOCAL_RANK": 0}}]),
         "$.checks[0].oneccl[0].variables.CCL_LOCAL_RANK: expected string, got int"),
        (lambda d: d["checks"][0].update(oneccl=[{"variables": {}}]), "$.checks[0].oneccl[0]: missing 'rank'"),
        (lambda d: d.update(level="quick"), "$.level: 'quick' is not one of"),
    ],
)
def test_the_schema_names_each_violation(change, problem) -> None:
    data = sample_report().to_dict()
    change(data)
    with pytest.raises(SchemaError, match=problem.replace("[", r"\[").replace("$", r"\$").replace("(", r"\(")):
        check_report(data)


def test_the_schema_knows_the_framework_levels() -> None:
    assert load_schema()["properties"]["level"]["enum"] == list(LEVELS)


def test_a_report_that_breaks_the_schema_is_not_written(tmp_path: Path) -> None:
    report = sample_report()
    report.versions.pop("torch")
    with pytest.raises(SchemaError, match="missing 'torch'"):
        report.write(tmp_path / "r.json")
    assert not list(tmp_path.iterdir())


def test_a_check_status_is_pass_fail_or_skip() -> None:
    with pytest.raises(ValueError, match="status must be one of pass, fail, skip"):
        Check("x", "passed", "why")


def test_the_validator_refuses_keywords_it_does_not_implement() -> None:
    with pytest.raises(ValueError, match="unsupported keywords"):
        errors({}, {"type": "object", "oneOf": []})
    assert load_schema()["properties"]["checks"]["items"]["properties"]["status"]["enum"] == [PASS, FAIL, SKIP]


def test_the_variant_comes_from_the_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("LIGHTNING_XPU_VARIANT", raising=False)
    monkeypatch.setenv("LIGHTNING_XPU_ROOT", str(tmp_path / "2.13-cpu"))
    assert environment_variant() == ("cpu", "LIGHTNING_XPU_ROOT (2.13-cpu)")
    monkeypatch.setenv("LIGHTNING_XPU_ROOT", str(tmp_path / "2.13"))
    assert environment_variant()[0] == "xpu"
    (tmp_path / "2.13").mkdir()
    (tmp_path / "2.13" / "manifest.json").write_text(json.dumps({"tag": "2.13", "recipe": {"variant": "xpu"}}))
    assert environment_variant() == ("xpu", "the install manifest")
    monkeypatch.setenv("LIGHTNING_XPU_VARIANT", "cuda")
    assert environment_variant() == ("cuda", "LIGHTNING_XPU_VARIANT")


def test_a_pinned_build_keeps_its_tag(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """The module pins the build it loads (<prefix>/.envs/<tag>.<build-id>): the tag is not the build id's."""
    monkeypatch.delenv("LIGHTNING_XPU_VARIANT", raising=False)
    monkeypatch.setenv("LIGHTNING_XPU_ROOT", str(tmp_path / ".envs" / "2.13-cpu.20261126T090402-17451"))
    assert environment_tag() == "2.13-cpu"
    assert environment_variant() == ("cpu", "LIGHTNING_XPU_ROOT (2.13-cpu)")
    monkeypatch.setenv("LIGHTNING_XPU_ROOT", str(tmp_path / ".envs" / "2.13.20261126T090402-17451"))
    assert environment_tag() == "2.13" and environment_variant()[0] == "xpu"


def test_versions_and_environment_never_ask_for_xpu_devices(monkeypatch: pytest.MonkeyPatch) -> None:
    """Counting XPU devices poisons fork (PyTorch 2.5-2.11): nothing outside an explicit XPU request may do it."""
    import torch

    def poisoned() -> None:
        raise AssertionError("counted XPU devices")

    monkeypatch.setattr(torch.xpu, "device_count", poisoned)
    monkeypatch.setattr(torch.xpu, "is_available", poisoned)
    monkeypatch.setenv("ZE_AFFINITY_MASK", "0.1")
    found = versions()
    assert found["python"] == ".".join(map(str, sys.version_info[:3])) and found["torch_build"] == "cpu"
    assert relevant_environment()["ZE_AFFINITY_MASK"] == "0.1"


def test_a_213_report_names_triton_from_the_triton_xpu_distribution(tmp_path: Path, monkeypatch) -> None:
    """Fails on main: the report knew only `pytorch-triton-xpu`, the name before PyTorch 2.10/2.11; the 2.13 XPU
    wheel depends on `triton-xpu` (3.7.2, intel/intel-xpu-backend-for-triton#7363)."""
    info = tmp_path / "triton_xpu-3.7.2.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: triton-xpu\nVersion: 3.7.2\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    report = Report("validation", {**versions(), "torch": "2.13.0+xpu"}, checks=[Check("import", PASS, "ok")])
    report.write(tmp_path / "r.json", tmp_path / "r.md")
    assert json.loads((tmp_path / "r.json").read_text())["versions"]["triton_xpu"] == "3.7.2"
    assert "| triton_xpu | 3.7.2 |" in (tmp_path / "r.md").read_text()
