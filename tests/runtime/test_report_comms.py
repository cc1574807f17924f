"""The site validation job's communication check (lightning_xpu/validation/comms.py): oneCCL's log read in the format
oneCCL prints (oneapi-src/oneCCL@2021.14, cited line by line in lightning_xpu/validation/oneccl_log.py), nccl-tests'
bus bandwidth, the order of the alternatives, the picture, the bundle's redaction, and the check for real on CPU
(gloo stands in): one node, the picture written, and a first combination that hangs (a test-side sitecustomize
blocks every all-reduce of the ranks that run with the site's CCL_ATL_TRANSPORT, as a transport that never
completes) making it try the next, name it and print the site-file lines within its deadline."""

from __future__ import annotations

import json
import tarfile
import time
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from lightning_grid import newest_lightning_only

from lightning_xpu.commands.cli import main
from lightning_xpu.validation import comms
from lightning_xpu.validation.bundle import REDACTED, write_bundle
from lightning_xpu.validation.comms_report import svg_chart
from lightning_xpu.validation.comms_worker import message_sizes
from lightning_xpu.validation.oneccl_log import mapped_mpi_library, parse_oneccl_log
from lightning_xpu.validation.schema import check_report

# Rank 0 and rank 5 of a 2-node ATL-mpi run, line by line as oneCCL 2021.14 writes them: the prefix
# (src/common/log/log.cpp write_prefix), env_data::print (src/common/env/env.cpp, rank 0 only),
# set_local_coord (src/common/global/global.cpp), atl_mpi_ctx::to_string (src/atl/mpi/atl_mpi_ctx.cpp); the
# version as CMakeLists.txt's CCL_PRODUCT_FULL composes it.
RANK0_LOG = """\
2026:11:28-10:00:01:( 4242) |CCL_INFO| library version: Gold-2021.14.0 2024-11-06T 10:42:12Z (master/1a2b3c4)
2026:11:28-10:00:01:( 4242) |CCL_INFO| process launcher: hydra, local_proc_idx: 0, local_proc_count: 4
2026:11:28-10:00:01:( 4242) |CCL_INFO| CCL_ATL_TRANSPORT: mpi
2026:11:28-10:00:01:( 4242) |CCL_INFO| CCL_KVS_MODE: pmi
2026:11:28-10:00:01:( 4242) |CCL_INFO| CCL_PROCESS_LAUNCHER: hydra
2026:11:28-10:00:01:( 4242) |CCL_INFO| CCL_MPI_LIBRARY_PATH: <not specified>
2026:11:28-10:00:02:( 4242) |CCL_INFO| atl-mpi:
{
  is_external_init: 0
  mpi_lib_attr.type: mpich
  mpi_lib_attr.hmem: 1
}
[rank 0] some other program output
"""
RANK5_LOG = """\
2026:11:28-10:00:01:(   17) |CCL_WARN| could not get local_idx/count from environment variables, trying to get \
them from ATL
2026:11:28-10:00:01:(   17) |CCL_WARN| OFI transport was not initialized, fallback to MPI transport
2026:11:28-10:00:01:(   17) |CCL_DEBUG| mpi_api_wrapper.cpp:40 mpi_api_init: MPI lib path: /opt/mpich/lib/libmpi.so.12
2026:11:28-10:00:01:(   17) |CCL_INFO| process launcher: none, local_proc_idx: -1, local_proc_count: -1
"""


def test_the_oneccl_log_of_rank_0_names_launcher_place_transport_kvs_and_mpi() -> None:
    assert parse_oneccl_log(RANK0_LOG) == {
        "library_version": "2021.14.0", "launcher": "hydra", "local_index": 0, "local_count": 4,
        "atl_transport": "mpi", "kvs_mode": "pmi", "process_launcher_setting": "hydra",
        "mpi_library_path_setting": "<not specified>", "mpi_library_type": "mpich",
    }


def test_the_oneccl_log_of_a_rank_without_a_place_keeps_the_warnings_and_the_fallback() -> None:
    found = parse_oneccl_log(RANK5_LOG)
    assert found["local_place_from_environment"] is False
    assert found["atl_fallback"] == "ofi -> mpi"
    assert found["mpi_library_path"] == "/opt/mpich/lib/libmpi.so.12"
    assert (found["launcher"], found["local_index"], found["local_count"]) == ("none", -1, -1)
    assert found["warnings"][1] == "OFI transport was not initialized, fallback to MPI transport"
    assert parse_oneccl_log("no oneCCL here\n") == {}


def test_the_mapped_libmpi_is_read_from_proc_maps() -> None:
    maps = ("7f00-7f01 r-xp 00000000 08:01 12 /usr/lib/libc.so.6\n"
            "7f02-7f03 r-xp 00000000 08:01 13 /opt/cray/pe/lib64/libmpi_intel.so.12.0.0\n")
    assert mapped_mpi_library(maps) == "/opt/cray/pe/lib64/libmpi_intel.so.12.0.0"
    assert mapped_mpi_library("7f00-7f01 r-xp 0 08:01 12 /usr/lib/libmpich_mpi.a\n") is None


def test_bus_bandwidth_follows_nccl_tests() -> None:
    # 1 GB in 1 s on 4 ranks: busbw = algbw * 2*3/4 for all-reduce, * 3/4 for all-gather and reduce-scatter.
    assert comms.bandwidths("all_reduce", 10**9, 1.0, 4) == (1.0, 1.5)
    assert comms.bandwidths("all_gather", 10**9, 1.0, 4) == (1.0, 0.75)
    assert comms.bandwidths("reduce_scatter", 2 * 10**9, 1.0, 2) == (2.0, 1.0)


def test_message_sizes_go_from_8_bytes_to_the_cap() -> None:
    assert message_sizes(64 << 10) == [8, 32, 128, 512, 2048, 8192, 32768, 65536]
    assert message_sizes(1 << 30)[-1] == 1 << 30
    assert comms.parse_bytes("64MiB") == 64 << 20 and comms.parse_bytes("1GiB") == 1 << 30
    with pytest.raises(ValueError, match="at least 8 bytes"):
        comms.parse_bytes("64 parsecs")


def test_the_alternatives_come_one_by_one_after_the_sites_settings() -> None:
    tried = comms.combinations({"CCL_ATL_TRANSPORT": "ofi", "CCL_OP_SYNC": "1"}, ("mpiexec", "srun"))
    environ = {"CCL_ATL_TRANSPORT": "ofi", "CCL_OP_SYNC": "1"}
    assert [c.label(environ) for c in tried] == [
        "the site's settings (CCL_ATL_TRANSPORT=ofi, CCL_KVS_MODE=unset, CCL_OP_SYNC=1), launcher mpiexec",
        "CCL_ATL_TRANSPORT=mpi, launcher mpiexec",
        "CCL_KVS_MODE=pmi, launcher mpiexec",
        "CCL_KVS_MODE=mpi, launcher mpiexec",
        "CCL_OP_SYNC=0, launcher mpiexec",
        "the site's settings (CCL_ATL_TRANSPORT=ofi, CCL_KVS_MODE=unset, CCL_OP_SYNC=1), launcher srun",
    ]


def test_the_picture_is_svg_with_a_line_per_collective_and_the_nominal_figure() -> None:
    rows = [{"operation": op, "bytes": size, "busbw_gbs": size / 1e6} for op in comms.BUSBW_FACTOR
            for size in (8, 1024, 1 << 20)]
    root = ET.fromstring(svg_chart({"nodes": {"results": rows, "nominal_gbps": 200.0}}))
    polylines = root.findall("{http://www.w3.org/2000/svg}polyline")
    assert len(polylines) == 3 and all(len(p.get("points", "").split()) == 3 for p in polylines)
    assert any("nominal nodes: 200 Gb/s" in (t.text or "") for t in root.iter("{http://www.w3.org/2000/svg}text"))


def test_the_bundle_carries_the_report_redacted(tmp_path: Path) -> None:
    report = tmp_path / "validation.json"
    report.write_text(json.dumps({"environment": {"CCL_TOKEN_FILE": "s3cr3t-value"}, "python": "/home/ada/x"}))
    markdown = tmp_path / "validation.md"
    markdown.write_text("token s3cr3t-value in /home/ada/run, /home/adam kept\n")
    environ = {"HOME": "/home/ada", "GITHUB_TOKEN": "s3cr3t-value", "PATH": "/usr/bin"}
    bundle = write_bundle(report, [markdown], environ)
    with tarfile.open(bundle) as archive:
        names = sorted(archive.getnames())
        texts = {name: archive.extractfile(name).read().decode() for name in names}  # type: ignore[union-attr]
    assert names == ["validation/machine.json", "validation/validation.json", "validation/validation.md"]
    assert not any("s3cr3t" in text or "/usr/bin" in text for text in texts.values())
    assert texts["validation/validation.md"] == f"token {REDACTED} in ~/run, /home/adam kept\n"


def test_bad_communication_options_are_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["validate", "--only", "communication", "--comm-max-bytes", "lots"]) == 2
    assert capsys.readouterr().err == ("lightning-xpu validate: --comm-max-bytes must be a size of at least 8 bytes,"
                                       " such as 1048576, 64MiB or 1GiB; got 'lots'\n")
    assert main(["validate", "--only", "communication", "--link-gbps", "0"]) == 2
    assert capsys.readouterr().err == "lightning-xpu validate: --link-gbps must be a positive number, got '0'\n"


def run_check(tmp_path: Path, *options: str) -> tuple[int, dict, str, Path]:
    out = tmp_path / "report"
    code = main(["validate", "--only", "communication", "--comm-max-bytes", "4KiB", "--out", str(out), *options])
    data = json.loads((out / "validation.json").read_text())
    check_report(data)
    return code, data["checks"][0], (out / "validation.md").read_text(), out


# The communication check launches ranks of torch.distributed only: no Lightning in them, so once per CI run.
@newest_lightning_only
def test_on_one_node_on_cpu_the_check_measures_and_draws(tmp_path: Path) -> None:
    code, result, markdown, out = run_check(tmp_path, "--node-link-gbps", "100")
    assert (code, result["status"]) == (0, "pass"), result["reason"]
    assert result["reason"].startswith("within a node, 2 ranks (gloo): all-reduce ")
    assert "across nodes skipped: one node" in result["reason"]
    node = result["detail"]["scopes"]["node"]
    assert {row["operation"] for row in node["results"]} == set(comms.BUSBW_FACTOR)
    assert max(row["bytes"] for row in node["results"]) == 4096 and node["nominal_gbps"] == 100.0
    assert [rank["rank"] for rank in node["oneccl_log"]] == [0, 1]
    assert "![bus bandwidth against message size](validation-communication.svg)" in markdown
    ET.parse(out / "validation-communication.svg")
    with tarfile.open(out / "validation.tar.gz") as archive:
        assert "validation/validation-communication.svg" in archive.getnames()


HANG_SITECUSTOMIZE = '''\
import os
import threading

if os.environ.get("CCL_ATL_TRANSPORT") == "ofi":  # the site's setting: its all-reduce never completes
    import torch.distributed as dist

    def _never_completes(*args, **kwargs):
        threading.Event().wait()

    dist.all_reduce = _never_completes
'''
DEADLINE_S = 40  # above one good attempt on a loaded 2-core runner (about 20 s), so the second one completes


@newest_lightning_only
def test_a_hung_first_combination_moves_on_and_names_the_one_that_works(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "site").mkdir()
    (tmp_path / "site" / "sitecustomize.py").write_text(HANG_SITECUSTOMIZE)
    monkeypatch.setenv("PYTHONPATH", str(tmp_path / "site"))
    monkeypatch.setenv("CCL_ATL_TRANSPORT", "ofi")
    start = time.monotonic()
    code, result, markdown, _ = run_check(tmp_path, "--comm-deadline", str(DEADLINE_S))
    elapsed = time.monotonic() - start
    attempts = result["detail"]["scopes"]["node"]["attempts"]
    assert [(a["combination"], a["status"]) for a in attempts] == [
        ("the site's settings (CCL_ATL_TRANSPORT=ofi, CCL_KVS_MODE=unset, CCL_OP_SYNC=unset)", "fail"),
        ("CCL_ATL_TRANSPORT=mpi", "pass")]
    assert f"timed out after {DEADLINE_S} s" in attempts[0]["reason"]
    assert code == 1 and result["status"] == "fail"
    assert "works with CCL_ATL_TRANSPORT=mpi: put in the site file: [env] / CCL_ATL_TRANSPORT = " in result["reason"]
    line = result["detail"]["scopes"]["node"]["site_lines"][2]
    assert line.startswith('CCL_ATL_TRANSPORT = { value = "mpi", source = "lightning-xpu validate (communication)')
    assert line in capsys.readouterr().out and line in markdown
    assert elapsed < 2 * DEADLINE_S + 30  # the hung attempt's deadline plus one good attempt
