"""`python -m lxpu_admin.render`: the renderer's command (recipes/render.py and `lightning-xpu-admin render` run
it)."""

import sys

if sys.version_info < (3, 11):
    sys.exit("render.py: error: needs Python 3.11 or newer (for tomllib): run it with python3.11")
try:
    from lxpu_admin.render.cli import main
except ImportError as exc:
    sys.exit(f"render.py: error: {exc}: install the renderer's packages (pip install jinja2 packaging)")
from lxpu_admin.paths import RECIPES

sys.exit(main(sys.argv[1:], default_recipes=RECIPES))
