# Placeholder for the install engine (recipes/templates/install/engine.sh is owned by the install job's
# author and replaced at merge). It only lets the recipes render.
lxpu_main() { echo "engine not yet merged" >&2; exit 1; }
