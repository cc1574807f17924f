"""What runs on the new environment's own interpreter, as `PYTHONPATH=<lib> <env>/bin/python -B -m
lxpu_admin.envside.<module>` (lxpu_admin/install/commands.py `engine_on`): standard library only, no import from
the engine. setup_lib.py stands alone besides: the install copies it into every prefix."""
