"""The recipe renderer behind `python recipes/render.py`: matrix + site profiles -> install artifacts."""
