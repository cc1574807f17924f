"""lightning-xpu install engine, in Python (issue 19): standard library only, Python 3.9 or newer.

`bin/lightning-xpu-admin` runs `python -B -s -m lxpu_admin` (lxpu_admin/cli.py); an install runs in this
process (driver.py) on the Python the shim found. The modules that read the new environment's own packages
(lxpu_admin/envside: manifest, pins, pack) run on its interpreter as
`PYTHONPATH=<lib> <env>/bin/python -B -m lxpu_admin.envside.<module>` (commands.py `engine_on`).
"""
