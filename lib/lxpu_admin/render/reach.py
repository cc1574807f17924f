"""Whether a pip index answers at all: `pip index versions` says nothing when one of several indexes is
unreachable (it lists what the others hold), so a PyTorch index that is down would read as "no cpu builds"."""

from __future__ import annotations

import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path


def index_unreachable(url: str, timeout: float) -> str | None:
    """Why the index at `url` cannot be read, or None where it answers. An HTTP error status (404 for a project
    page it lacks) is an answer: the index is there. A file:// index must be a directory (PEP 503 layout)."""
    parts = urllib.parse.urlsplit(url)
    if parts.scheme == "file":
        path = Path(urllib.request.url2pathname(parts.path))
        return None if path.is_dir() else f"{path} is not a directory"
    try:
        with urllib.request.urlopen(url.rstrip("/") + "/", timeout=timeout):
            return None
    except urllib.error.HTTPError:
        return None
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        return str(reason) or type(exc).__name__


def unreachable_index_line(urls: list[str], timeout: float) -> str | None:
    """One line naming the first unreachable index of `urls` and the override, or None where all answer."""
    for url in urls:
        why = index_unreachable(url, timeout)
        if why is not None:
            return (
                f"the index {url} is unreachable ({why}): lock where it is reachable, or from a mirror with "
                "--pip-source system (this machine's pip configuration)"
            )
    return None
