"""The one error type of the renderer: a bad input, reported as one line naming the fix."""

from __future__ import annotations


class RecipeError(Exception):
    """A bad input (file, key, command-line value). The message is one line and says what to change."""
