"""The `lightning-xpu` command and the user's tools: `cli` (the command: doctor, validate, report, user-env),
`job` (the training jobs' launcher, run by scripts/common/job.sh), `allocation` (what a batch job's allocation
says), `pipguard` (the pip/uv guard of an environment's pins) and `userenv` (the user's writable layer).

A tool: the runtime (everything in lightning_xpu outside `commands/` and `validation/`) never imports it
(tests/runtime/test_import_graph.py).
"""
