"""lxpu_admin.envside.uv_sources: this machine's pip configuration and the recipe's pip options, passed on to uv.

uv reads neither pip's configuration files nor PIP_* variables, so the install engine maps them; a key it
cannot map must stop the install in one line rather than resolve differently from pip.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from lxpu_admin import paths
from lxpu_admin.envside import uv_sources

CONFIG = """\
:env:.cert='/etc/ssl/certs/ca.crt'
:env:.default-timeout='180'
:env:.disable-pip-version-check='1'
:env:.find-links='/opt/wheels'
global.constraint='/etc/pip/constraints.txt'
global.extra-index-url='file:///opt/a/simple file:///opt/b/simple'
global.find-links='/ignored/because/env/wins'
install.index-url='https://mirror.example/simple'
global.index-url='https://ignored.example/simple'
download.no-index='true'
"""


def test_every_resolution_key_is_mapped_with_pips_precedence() -> None:
    settings = uv_sources.settings_from_config(uv_sources.parse_config_list(CONFIG))
    assert sorted(settings) == sorted(
        [
            ("env", "SSL_CERT_FILE", "/etc/ssl/certs/ca.crt"),
            ("env", "UV_HTTP_TIMEOUT", "180"),
            ("arg", "--find-links", "/opt/wheels"),
            ("constraint", "/etc/pip/constraints.txt"),
            ("arg", "--extra-index-url", "file:///opt/a/simple"),
            ("arg", "--extra-index-url", "file:///opt/b/simple"),
            ("arg", "--index-url", "https://mirror.example/simple"),
        ]
    ), "env beats [install] beats [global]; [download] is not read by pip install"


@pytest.mark.parametrize("line", ["global.pre='true'", "install.client-cert='/c.pem'", ":env:.only-binary=':all:'"])
def test_a_key_uv_cannot_honour_is_refused_by_name(line: str) -> None:
    refused = r"pip configuration key '.*' has no uv equivalent.*--installer pip"
    with pytest.raises(uv_sources.Unmappable, match=refused):
        uv_sources.settings_from_config(uv_sources.parse_config_list(line))


def test_pip_source_options_map_one_to_one() -> None:
    words = ["--index-url", "https://a/simple", "--extra-index-url=https://b/simple", "--no-index",
             "--find-links", "/w"]
    assert uv_sources.settings_from_options(words) == [
        ("arg", "--index-url", "https://a/simple"),
        ("arg", "--extra-index-url", "https://b/simple"),
        ("arg", "--no-index"),
        ("arg", "--find-links", "/w"),
    ]
    with pytest.raises(uv_sources.Unmappable, match="'--pre' has no uv equivalent"):
        uv_sources.settings_from_options(["--pre"])


def test_a_locks_pins_are_checked_against_constraints() -> None:
    lock = "torch==2.13.0+cpu \\\n    --hash=sha256:00\nlightning==2.6.6 \\\n    --hash=sha256:11\n"
    assert uv_sources.constraint_violations(lock, ["torch<=2.14.1\n# comment\n"]) == []
    assert uv_sources.constraint_violations(lock, ["torch<2.13\nlightning!=2.6.6\n"]) == [
        "torch==2.13.0+cpu violates the constraint torch<2.13",
        "lightning==2.6.6 violates the constraint lightning!=2.6.6",
    ]


def _run(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """The module as the engine runs it: on another Python, with lib/ on PYTHONPATH."""
    env = {**env, "PYTHONPATH": str(paths.LIB)}
    argv = [sys.executable, "-B", "-m", "lxpu_admin.envside.uv_sources", *args]
    return subprocess.run(argv, capture_output=True, text=True, env=env, check=False)


def test_reads_this_machines_real_pip_configuration(tmp_path: Path) -> None:
    """Through `python -m pip config list`, the PIP_* variables included; an unmappable one exits 2, one line."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_")}
    env.update(PIP_CONFIG_FILE=os.devnull, PIP_FIND_LINKS=str(tmp_path), PIP_DEFAULT_TIMEOUT="42")
    done = _run("from-pip-config", env=env)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {
        "args": ["--find-links", str(tmp_path)], "env": {"UV_HTTP_TIMEOUT": "42"}, "constraints": []
    }
    env["PIP_PRE"] = "1"
    done = _run("from-pip-config", env=env)
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.count("\n") == 1 and "':env:.pre'" in done.stderr and "--installer pip" in done.stderr
