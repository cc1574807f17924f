"""lightning-xpu's administration package (issue 28), as Spack's `lib/spack/spack/`: one package, imported
normally, found through `PYTHONPATH=lib` (the `bin/lightning-xpu-admin` shim; pytest's `pythonpath`).

  cli.py       `python -m lxpu_admin`: the one admin command (install, prune, rollback, uninstall, status, verify,
               and the renderer's list, render, check, lock)
  install/     the install engine (standard library only, Python 3.9 or newer), run on the Python the shim found
  render/      the renderer (Python 3.11, jinja2, packaging): recipes/ data and templates to committed renders
  envside/     what runs on the new environment's own interpreter (`python -m lxpu_admin.envside.<module>`, with
               PYTHONPATH set to lib/; standard library only): the manifest, pins, pack and pip-source readers,
               the file-hash record, and the setup library's Python half (copied into every prefix)
  lockbind.py  the rule that binds a lock to its recipe (renderer and install)
  paths.py     where this package sits in the repository (the one place that knows)
"""
