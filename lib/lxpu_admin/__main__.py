"""`python -m lxpu_admin`: the admin command (bin/lightning-xpu-admin runs it)."""

import sys

from lxpu_admin.cli import main

try:
    sys.exit(main(sys.argv[1:]))
except BrokenPipeError:  # the reader went away (| head): nothing left to say
    sys.exit(1)
