# shellcheck shell=bash
# shellcheck disable=SC2034,SC2016  # data read by the engine; literal $HOME and ${VAR:-...} on purpose
# TEST HARNESS data part (hand-written stand-in for the recipes renderer's output, version 2.13, site
# generic): exactly the contract's variables and functions. Used only while recipes/render.py cannot render
# the real install job; see tests/install/harness.py.
LXPU_VERSION="2.13"
LXPU_SITE="generic"
LXPU_SITE_SCHEDULER="none"
LXPU_VARIANTS="cpu"
LXPU_SITE_VARIANT="auto"
LXPU_DEFAULT_PREFIX='$HOME/lightning-xpu'
LXPU_SITE_ENV_MANAGER="venv"
LXPU_SITE_MODULES=""
LXPU_RECIPE_HASH="0000000000000000000000000000000000000000000000000000000000000000"
LXPU_LIGHTNING_VERSION="2.6.6"

lxpu_python_version() { printf '3.11\n'; }

lxpu_requirements() {
	printf '%s\n' "torch==2.13.0" "lightning==2.6.6"
}

lxpu_pip_sources() {
	printf '%s\n' "--index-url https://download.pytorch.org/whl/cpu" "--extra-index-url https://pypi.org/simple"
}

lxpu_lock_file() { :; }

lxpu_environment_yml() {
	cat <<'YML'
name: lightning-xpu-2.13-cpu
channels:
  - conda-forge
dependencies:
  - python=3.11
  - pip
  - pip:
      - torch==2.13.0
      - lightning==2.6.6
pip-repositories:
  - https://download.pytorch.org/whl/cpu
YML
}

lxpu_site_env() {
	printf '%s\n' 'export ZE_FLAT_DEVICE_HIERARCHY="${ZE_FLAT_DEVICE_HIERARCHY:-FLAT}"'
}

lxpu_setup_script() {
	sed "s/@TAG@/$1/g" <<'SETUP'
# lightning-setup-@TAG@.sh (TEST HARNESS stand-in): source this file to use lightning-xpu @TAG@.
_lxpu_setup_root="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/@TAG@"
if [ ! -x "$_lxpu_setup_root/bin/python" ]; then
	echo "lightning-setup-@TAG@.sh: no environment at $_lxpu_setup_root" >&2
	return 1
fi
case ":$PATH:" in
*":$_lxpu_setup_root/bin:"*) ;;
*) export PATH="$_lxpu_setup_root/bin:$PATH" ;;
esac
export VIRTUAL_ENV="$_lxpu_setup_root" LIGHTNING_XPU_ROOT="$_lxpu_setup_root"
export PYTHONUSERBASE="$HOME/.local/lightning-xpu/@TAG@"
. "$_lxpu_setup_root/lightning-xpu-site.sh"
unset _lxpu_setup_root
SETUP
}
