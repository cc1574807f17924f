"""The lightning-xpu install engine (issue 19), standard library only: it runs on the Python the install job
already has, with nothing installed. The bash driver (scripts/common/install/engine.sh) runs each module as
`PYTHONPATH=<scripts/common/install> python3 -B -m lxpu_engine.<module> ...`."""
