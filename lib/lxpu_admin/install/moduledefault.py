"""The default of a bare `module load lightning-xpu`: the newest published xpu tag (the `<ver>` tags; the cpu and
cuda variants are `<ver>-<variant>`, lxpu_admin.render.matrix.tag_of). Without a marked default Lmod picks the highest
version string, so 2.13, 2.13-cpu and 2.14-cuda would load 2.14-cuda on an Intel GPU machine.

The install keeps one `module_version("lightning-xpu/<tag>", "default")` line in the prefix's
modulefiles/lightning-xpu/.modulerc.lua. A site that wants another default makes a `default` link in that
directory (`ln -s 2.13-cpu.lua default`): Lmod prefers the link over .modulerc.lua, and the install never touches
it (docs/administrators.md, "The default of a bare module load"). Standard library only.
"""

from __future__ import annotations

import re
from pathlib import Path

_XPU_TAG = re.compile(r"(\d+)\.(\d+)")
_HIDDEN = re.compile(r'^hide_version\("lightning-xpu/([^"]+)"\)$')
_DEFAULT = re.compile(r'^module_version\("lightning-xpu/[^"]+", "default"\)$')


def shown_tags(module_dir: Path, rc_lines: list[str], published: str = "") -> list[str]:
    """The tags whose modulefile is in MODULE_DIR (and PUBLISHED, about to be written), less the hidden ones."""
    hidden = {match[1] for line in rc_lines if (match := _HIDDEN.match(line))}
    files = {path.stem for path in module_dir.glob("*.lua") if not path.name.startswith(".")}
    return sorted((files | ({published} if published else set())) - hidden)


def newest_xpu_tag(tags: list[str]) -> str | None:
    """The xpu tag of the newest PyTorch version, or None where no xpu tag is shown."""
    xpu = [(int(match[1]), int(match[2]), tag) for tag in tags if (match := _XPU_TAG.fullmatch(tag))]
    return max(xpu)[2] if xpu else None


def with_default(rc_lines: list[str], tag: str | None) -> list[str]:
    """The .modulerc.lua lines with the one default line naming TAG (none where TAG is None)."""
    kept = [line for line in rc_lines if not _DEFAULT.match(line)]
    return kept + ([f'module_version("lightning-xpu/{tag}", "default")'] if tag else [])
