"""lightning-xpu install engine, in Python (issue 19): standard library only, Python 3.9 or newer.

The bash driver (scripts/common/install/engine.sh) runs each module as
    PYTHONPATH=<dir of this package> <python> -B -u -s -m lxpu_engine.<module> COMMAND [ARGS...]
with the interpreter the driver resolved once (`_lxpu_engine_python`: the recipe's or --base-python's Python,
else python3), and with file descriptor 3 open for the state changes a module makes (lxpu_engine/state.py).
"""
