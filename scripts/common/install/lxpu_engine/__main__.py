"""`python -m lxpu_engine`: the install engine's command (bin/lightning-xpu-admin runs it)."""

import sys

from lxpu_engine.cli import main

sys.exit(main(sys.argv[1:]))
