"""lightning-xpu install engine, in Python (issue 19): standard library only, Python 3.9 or newer.

The bash driver (scripts/common/install/engine.sh) runs each module as
    PYTHONPATH=<dir of this package> <python> -B -u -s -m lxpu_engine.<module> COMMAND [ARGS...]
Modules with the engine's state (publish: the lock, leases, links, cleanup, --prune/--uninstall/--rollback) run on
the interpreter the driver resolved once (`_lxpu_engine_python`: the recipe's or --base-python's Python, else
python3), with file descriptor 3 open for the state changes they make (lxpu_engine/state.py), through
`_lxpu_engine`; those that work on the new environment itself (pack, manifest) run on its own interpreter through
`_lxpu_engine_on`.
"""
