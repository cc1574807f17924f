"""lightning_xpu's version (pyproject.toml's), in a module of its own: the patch report and the reports read it
without importing the package's __init__ from inside the package (an import cycle)."""

__version__ = "0.1.0"
