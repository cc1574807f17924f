"""The rules the docs keep: well-formed runnable marks, a runnable block in every guide, the README's two
commands, links that resolve, known limitations that name their upstream issue, and a migration table that
covers every code change of the lit-GPT walkthrough."""

from __future__ import annotations

import re
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from tests.docs.docs_blocks import (
    NOT_GUIDES,
    REPO,
    Block,
    block_env,
    documents,
    outside_fences,
    parse_document,
    run_block,
    user_guides,
)
from tests.docs.docs_blocks import _inside_fences as inside_fences
from tests.docs.docs_services import readme_block

# ---- runnable marks -----------------------------------------------------------------------------------


def test_runnable_marks_are_well_formed() -> None:
    errors = [error for document in documents() for error in document.errors]
    assert not errors, "\n".join(errors)


def guides_without_runnable_blocks(root: Path) -> list[str]:
    return [
        path.relative_to(root).as_posix()
        for path in user_guides(root)
        if not parse_document(path, root).runnable()
    ]


def test_every_user_guide_has_a_runnable_block() -> None:
    assert user_guides(), "docs/ has no user guide"
    assert guides_without_runnable_blocks(REPO) == []


def test_a_guide_without_a_runnable_block_is_reported(tmp_path: Path) -> None:
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "tested.md").write_text("# T\n<!-- runnable -->\n```bash\ntrue\n```\n")
    (tmp_path / "docs" / "untested.md").write_text("# U\n```bash\ntrue\n```\n")
    (tmp_path / "docs" / next(iter(NOT_GUIDES))).write_text("# not a guide\n")
    assert guides_without_runnable_blocks(tmp_path) == ["docs/untested.md"]


def _parse(tmp_path: Path, text: str) -> tuple[list[Block], list[str]]:
    path = tmp_path / "doc.md"
    path.write_text(text)
    document = parse_document(path, tmp_path)
    return document.blocks, document.errors


def test_marks_are_read_with_their_options(tmp_path: Path) -> None:
    blocks, errors = _parse(
        tmp_path,
        "intro\n"
        '<!-- runnable: needs=install,lmod expect="a b" expect=c -->\n'
        "```bash\nmodule load x\n```\n"
        "- in a list:\n"
        "  <!-- file: job.sh -->\n"
        "  ```bash\n  #!/bin/bash\n    indented\n  ```\n"
        "  <!-- runnable: files=job.sh -->\n"
        "  ```sh\n  bash job.sh\n  ```\n"
        "````markdown\n<!-- runnable -->\n```bash\nnot a block: inside another fence\n```\n````\n",
    )
    assert errors == []
    first, job, run = blocks
    assert (first.needs, first.expect, first.cwd, first.text) == (
        frozenset({"install", "lmod"}),
        ("a b", "c"),
        "repo",
        "module load x\n",
    )
    assert (job.kind, job.name, job.text) == ("file", "job.sh", "#!/bin/bash\n  indented\n")
    assert (run.files, run.cwd, run.line) == (("job.sh",), "work", 12)


@pytest.mark.parametrize(
    ("text", "error"),
    [
        ("<!-- runnable -->\n\n```bash\ntrue\n```\n", "right before a ``` fence"),
        ("<!-- runnable: needs=gpu -->\n```bash\ntrue\n```\n", "unknown needs gpu"),
        ("<!-- runnable -->\n```python\nprint()\n```\n", "must be a ```bash fence"),
        ("<!-- runnable: role=deploy -->\n```bash\ntrue\n```\n", "role must be one of"),
        ("<!-- runnable: timeout=5 -->\n```bash\ntrue\n```\n", "is not one of needs, files"),
        ("<!-- runnable: files=a.py -->\n```bash\ntrue\n```\n", "names no <!-- file: a.py -->"),
        ("<!-- file: a.py -->\n```python\npass\n```\n", "used by no runnable block"),
        ('<!-- runnable: expect="open -->\n```bash\ntrue\n```\n', "cannot read the runnable options"),
        ("<!-- runnable: cwd=/tmp -->\n```bash\ntrue\n```\n", "cwd must be repo or work"),
    ],
)
def test_bad_marks_are_reported(tmp_path: Path, text: str, error: str) -> None:
    _, errors = _parse(tmp_path, text)
    assert len(errors) == 1 and error in errors[0], errors


def test_a_block_that_runs_too_long_is_killed_with_its_children(tmp_path: Path) -> None:
    block = Block("doc.md", 1, "runnable", "bash", f"sleep 60 &\necho $! > {tmp_path}/child\nsleep 60\n")
    result = run_block(block, cwd=tmp_path, env=block_env(tmp_path), script=tmp_path / "b.sh", timeout=1)
    assert result.returncode == 124
    status = Path(f"/proc/{int((tmp_path / 'child').read_text())}/status")
    deadline = time.monotonic() + 10  # a killed process takes a moment to go
    while _running(status) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _running(status)


def _running(status: Path) -> bool:
    try:
        return "zombie" not in status.read_text()
    except FileNotFoundError:
        return False


# ---- the README's two commands ------------------------------------------------------------------------


def test_ci_entry_point_runs_exactly_the_readme_test_command(tmp_path: Path) -> None:
    """`.ci/run` (what CI runs) and the README's test command start the same script, from the same
    directory, with the same arguments. In a copy, the script records its call: the real one is the suite."""
    command = readme_block("test-suite")
    assert (REPO / ".ci" / "run").is_file(), ".ci/run is missing: CI must run the README's test command"
    fake = tmp_path / "repo"
    (fake / ".ci").mkdir(parents=True)
    (fake / "ci").mkdir()
    shutil.copy2(REPO / ".ci" / "run", fake / ".ci" / "run")
    recorder = 'printf "%s\\n" "$(pwd -P)" "$0" "$@" > "$LXPU_DOCS_RECORD"\n'
    for script in ("ci/test.sh", *re.findall(r"\bci/[\w./-]+\.sh\b", command.text)):
        (fake / script).write_text(recorder)
    env = block_env(tmp_path)

    readme = run_block(
        command,
        cwd=fake,
        env={**env, "LXPU_DOCS_RECORD": str(tmp_path / "readme")},
        script=tmp_path / "r.sh",
        timeout=60,
    )
    ci = subprocess.run(
        ["bash", str(fake / ".ci" / "run")],
        cwd=tmp_path,
        env={**env, "LXPU_DOCS_RECORD": str(tmp_path / "ci")},
        capture_output=True,
        text=True,
        timeout=60,
    )

    assert readme.returncode == 0 and ci.returncode == 0, readme.stderr + ci.stderr
    recorded = (tmp_path / "readme").read_text()
    assert recorded.splitlines()[0] == str(fake.resolve())
    assert (tmp_path / "ci").read_text() == recorded


def test_readme_test_command_is_the_test_suite() -> None:
    result = subprocess.run(
        ["bash", "ci/test.sh", "--help"], cwd=REPO, capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0 and "Usage: bash ci/test.sh" in result.stdout, result.stdout + result.stderr
    assert readme_block("test-suite").text.strip() == "bash ci/test.sh"


# ---- links --------------------------------------------------------------------------------------------

_LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)")
_INLINE_CODE = re.compile(r"`[^`]*`")
_HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")


def github_anchors(path: Path) -> set[str]:
    """The anchors GitHub gives headings: lower case, punctuation dropped, spaces to dashes, -1 on repeats."""
    anchors: set[str] = set()
    seen: dict[str, int] = {}
    for line in outside_fences(path):
        heading = _HEADING.match(line)
        if not heading:
            continue
        text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading[2]).replace("`", "")
        slug = re.sub(r"[^\w\- ]", "", text.strip().lower()).replace(" ", "-")
        count = seen.get(slug, 0)
        seen[slug] = count + 1
        anchors.add(slug if count == 0 else f"{slug}-{count}")
    return anchors


def broken_links(path: Path, root: Path = REPO) -> list[str]:
    broken = []
    for line in outside_fences(path):
        for target in _LINK.findall(_INLINE_CODE.sub("", line)):
            if re.match(r"^[a-z][a-z0-9+.-]*:", target):
                continue  # https:, mailto:
            file_part, _, anchor = target.partition("#")
            resolved = (path.parent / file_part).resolve() if file_part else path
            if not resolved.exists() or root.resolve() not in (resolved, *resolved.parents):
                broken.append(f"{target}: no such file in the repository")
            elif anchor and resolved.suffix == ".md" and anchor not in github_anchors(resolved):
                broken.append(f"{target}: no heading with anchor #{anchor} in {resolved.name}")
    return broken


@pytest.mark.parametrize("document", [document.path for document in documents()])
def test_links_resolve(document: str) -> None:
    assert broken_links(REPO / document) == []


def test_a_broken_link_or_anchor_is_reported(tmp_path: Path) -> None:
    (tmp_path / "other.md").write_text("# Known `limitations`, here\n## Setup\n## Setup\n")
    doc = tmp_path / "doc.md"
    doc.write_text(
        "[ok](other.md#known-limitations-here) [dup](other.md#setup-1) [web](https://example.org/x)\n"
        "[gone](missing.md) [bad anchor](other.md#nope) `[code](ignored.md)`\n"
        "```\n[fenced](ignored.md)\n```\n"
    )
    assert broken_links(doc, tmp_path) == [
        "missing.md: no such file in the repository",
        "other.md#nope: no heading with anchor #nope in other.md",
    ]


# ---- known limitations --------------------------------------------------------------------------------

UPSTREAM_ISSUE = re.compile(
    r"github\.com/[\w.-]+/[\w.-]+/(?:issues|pull)/\d+|\b[\w.-]+/[\w.-]+#\d+|no upstream issue (?:was )?found",
    re.I,
)


def limitation_items(path: Path) -> list[str]:
    """The top-level list items of every section headed "Known limitations" (continuation lines included)."""
    items: list[str] = []
    level = None
    for line in outside_fences(path):
        heading = _HEADING.match(line)
        if heading:
            if level is not None and len(heading[1]) <= level:
                level = None
            if "known limitations" in heading[2].lower():
                level = len(heading[1])
            continue
        if level is None:
            continue
        if re.match(r"^[-*] ", line):
            items.append(line)
        elif items and line.startswith(" ") and line.strip():
            items[-1] += " " + line.strip()
    return items


def test_every_known_limitation_names_its_upstream_issue() -> None:
    items = [
        (document.path, item) for document in documents() for item in limitation_items(REPO / document.path)
    ]
    assert items, "no document has a Known limitations section"
    unnamed = [f"{path}: {item[:100]}" for path, item in items if not UPSTREAM_ISSUE.search(item)]
    assert unnamed == [], "name the upstream issue (owner/repo#N) or say 'no upstream issue found'"


def test_a_limitation_without_an_issue_is_found(tmp_path: Path) -> None:
    doc = tmp_path / "doc.md"
    doc.write_text(
        "## Known limitations\n- a: [pytorch/pytorch#1](https://github.com/pytorch/pytorch/issues/1)\n"
        "- b: no upstream issue found\n- c: nothing\n  named\n### Details\n- d\n## Other\n- e\n"
    )
    items = limitation_items(doc)
    assert [item for item in items if not UPSTREAM_ISSUE.search(item)] == ["- c: nothing named", "- d"]


# ---- migration ----------------------------------------------------------------------------------------

# Each code change the lit-GPT walkthrough for Dawn makes by hand ("PyTorch Lightning on DAWN", the source
# document of the migration guide), as it is written there: the migration table must give each a replacement.
WALKTHROUGH_CHANGES = (
    "cp xpu.py gpt_lightning/",
    "import xpu",
    "from torch.distributed import init_process_group, destroy_process_group",
    "import oneccl_bindings_for_pytorch",
    "from lightning.pytorch.strategies import DDPStrategy",
    'os.environ["RANK"] = str(int(os.environ["PMI_RANK"]))',
    'os.environ["WORLD_SIZE"] = str(int(os.environ["PMI_SIZE"]))',
    "init_process_group(backend='ccl')",
    "class XPUMetricsCallback(Callback):",
    'torch.set_float32_matmul_precision("high")',
    "callback_list.append(callbacks.XPUMetricsCallback())",
    "strategy = xpu.DDPXPUStrategy(process_group_backend='nccl')",
    "trainer = xpu.Trainer.from_argparse_args(",
    "strategy=strategy,",
    "python3.9 -m venv ${VENV_PATH}",
    "intel-extension-for-pytorch==2.0.120+xpu oneccl-bind-pt==2.0.200",
    'source $(python -c "import oneccl_bindings_for_pytorch as torch_ccl;print(torch_ccl.cwd)")/env/vars.sh',
    "mpirun -n ${CONFIG_PROCESSES_TOTAL} -ppn ${SLURM_NTASKS_PER_NODE} -prepend-rank python train.py",
    "--num_nodes ${CONFIG_PROCESSES_TOTAL}",
    "--devices ${CONFIG_GPUS_PER_PROCESS}",
    '--precision "bf16"',
)


def table_rows(path: Path) -> list[list[str]]:
    rows = []
    for line in outside_fences(path):
        if line.startswith("|") and not re.match(r"^\|[\s:|-]+\|$", line):
            rows.append([cell.strip() for cell in re.split(r"(?<!\\)\|", line.strip())[1:-1]])
    return rows


def test_migration_table_replaces_every_walkthrough_change() -> None:
    rows = table_rows(REPO / "docs" / "migration.md")
    replaced = {
        change
        for change in WALKTHROUGH_CHANGES
        for row in rows
        if len(row) >= 2 and f"`{change}`" in row[0].replace("\\|", "|") and row[1]
    }
    assert [change for change in WALKTHROUGH_CHANGES if change not in replaced] == []


def test_no_guide_tells_users_to_run_fabric_run_without_click() -> None:
    """`fabric run` needs click, which the environments do not carry (no lock pins it): no command block in the
    README or a guide runs it (issue 20: it failed with ImportError as the XPU guide showed it)."""
    locks = (REPO / "recipes" / "locks").glob("*.txt")
    if any(re.search(r"^click==", lock.read_text(), re.MULTILINE) for lock in locks):
        pytest.skip("a lock pins click: fabric run works in that environment")
    shown = []
    for path in [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]:
        lines = path.read_text().splitlines()
        inside = [i for i in sorted(inside_fences(lines)) if re.match(r"\s*(\$\s+)?fabric run\b", lines[i])]
        shown += [f"{path.relative_to(REPO)}:{i + 1}" for i in inside]
    assert shown == [], f"`fabric run` in a command block, but click is not in the environment: {shown}"
