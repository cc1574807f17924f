"""`python -m lxpu_engine`: the install engine's command (bin/lightning-xpu-admin runs it)."""

import sys

from lxpu_engine.cli import main

try:
    sys.exit(main(sys.argv[1:]))
except BrokenPipeError:  # the reader went away (| head): nothing left to say
    sys.exit(1)
