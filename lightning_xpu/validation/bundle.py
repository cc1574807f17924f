"""The one file a site sends back: `lightning-xpu validate` packs the report (JSON, Markdown, the communication
picture) and a few facts about the machine into `<report>.tar.gz`, to attach to the "Validation report" issue
(docs/reports/README.md says where returned reports go).

What it must not carry: secrets. The report itself records only the variables of lightning_xpu/validation/model.py
(`ENV_PREFIXES`, `ENV_NAMES`), never the whole environment; the bundle adds no environment dump, and every text it
packs has the values of this process's secret-looking variables (names with TOKEN, SECRET, PASSWORD, PASSWD,
CREDENTIAL, APIKEY, API_KEY, PRIVATE or AUTH) replaced by `<redacted>`, and the home directory by `~`.
"""

from __future__ import annotations

import io
import json
import os
import platform
import re
import tarfile
import time
from collections.abc import Mapping
from pathlib import Path

SECRET_NAME = re.compile(r"TOKEN|SECRET|PASSW(OR)?D|CREDENTIAL|API_?KEY|PRIVATE|AUTH", re.IGNORECASE)
REDACTED = "<redacted>"
MIN_SECRET_LENGTH = 4  # shorter values would redact ordinary words


def redact(text: str, environ: Mapping[str, str]) -> str:
    """`text` with every secret-looking variable's value and the home directory replaced."""
    for name, value in environ.items():
        if SECRET_NAME.search(name) and len(value) >= MIN_SECRET_LENGTH:
            text = text.replace(value, REDACTED)
    home = environ.get("HOME", "").rstrip("/")
    if len(home) > 1:
        text = re.sub(re.escape(home) + r"(?=/|\b)", "~", text)
    return text


def machine_facts() -> dict[str, object]:
    """The facts about the machine a report does not hold already (no environment variables)."""
    facts: dict[str, object] = {"system": platform.system(), "release": platform.release(),
                                "machine": platform.machine(), "cpus": os.cpu_count(),
                                "bundled": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
    try:
        pretty = next(line.split("=", 1)[1].strip().strip('"') for line in
                      Path("/etc/os-release").read_text().splitlines() if line.startswith("PRETTY_NAME="))
        facts["os"] = pretty
    except (OSError, StopIteration):
        pass
    return facts


def write_bundle(json_path: Path, files: list[Path], environ: Mapping[str, str] | None = None) -> Path:
    """Write `<json stem>.tar.gz` next to the JSON report: the report, `files` (Markdown, pictures) and
    `machine.json`, each redacted; return its path."""
    environ = os.environ if environ is None else environ
    target = json_path.with_suffix(".tar.gz")
    members = {path.name: path.read_text(errors="replace") for path in [json_path, *files] if path.is_file()}
    members["machine.json"] = json.dumps(machine_facts(), indent=2) + "\n"
    tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    with tarfile.open(tmp, "w:gz") as archive:
        for name, text in sorted(members.items()):
            data = redact(text, environ).encode()
            info = tarfile.TarInfo(f"{json_path.stem}/{name}")
            info.size, info.mtime, info.mode = len(data), int(time.time()), 0o644
            archive.addfile(info, io.BytesIO(data))
    os.replace(tmp, target)
    return target
