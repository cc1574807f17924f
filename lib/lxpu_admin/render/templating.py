"""Jinja2 set-up: StrictUndefined (an undefined variable fails the render, naming template and line), quoting
filters for shell, Lua and YAML."""

from __future__ import annotations

import json
import shlex
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jinja2

from .errors import RecipeError


def lua_string(value: object) -> str:
    text = str(value)
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def lua_long(value: object) -> str:
    """A Lua long bracket string, for help() text."""
    text = str(value)
    if "]==]" in text:
        raise RecipeError(f"text for a Lua long string holds ']==]': {text[:40]!r}")
    return "[==[\n" + text + "]==]"


def yaml_string(value: object) -> str:
    return json.dumps(str(value))


def shell_word(value: object) -> str:
    return shlex.quote(str(value))


def shell_path(value: object) -> str:
    """A path for bash, where a leading $HOME/ stays an expansion and the rest is quoted."""
    text = str(value)
    if text.startswith("$HOME/"):
        return '"$HOME"/' + shlex.quote(text[len("$HOME/") :])
    return shlex.quote(text)


def make_environment(templates_dir: Path) -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(templates_dir)),
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
        trim_blocks=True,
        lstrip_blocks=True,
        autoescape=False,
    )
    env.filters.update(sh=shell_word, sh_path=shell_path, lua=lua_string, lua_long=lua_long, yaml=yaml_string)
    return env


def _template_location(exc: BaseException, templates_dir: Path, shown: Callable[[Path], str]) -> str:
    """template:line of the innermost template frame of a rendering error (Jinja rewrites tracebacks so that
    template frames carry the template's file name and line)."""
    root = str(templates_dir.resolve())
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if f.filename.startswith(root)]
    if not frames:
        return shown(templates_dir)
    return f"{shown(Path(frames[-1].filename))}:{frames[-1].lineno}"


def render(
    env: jinja2.Environment,
    templates_dir: Path,
    name: str,
    context: dict[str, Any],
    shown: Callable[[Path], str],
) -> str:
    """Render one template; every failure becomes a one-line RecipeError naming template and line."""
    try:
        return env.get_template(name).render(context)
    except jinja2.UndefinedError as exc:
        where = _template_location(exc, templates_dir, shown)
        raise RecipeError(f"{where}: undefined template variable ({exc.message})") from None
    except jinja2.TemplateSyntaxError as exc:
        where = shown(Path(exc.filename)) if exc.filename else shown(templates_dir / name)
        raise RecipeError(f"{where}:{exc.lineno}: template syntax error: {exc.message}") from None
    except jinja2.TemplateNotFound as exc:
        raise RecipeError(f"{shown(templates_dir)}: template not found: {exc.name}") from None
    except (TypeError, ValueError, AttributeError, KeyError) as exc:
        where = _template_location(exc, templates_dir, shown)
        raise RecipeError(f"{where}: template error: {type(exc).__name__}: {exc}") from None
