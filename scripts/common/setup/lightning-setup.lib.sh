# shellcheck shell=bash
# lightning-setup.lib.sh: the code of every setup script lightning-setup-<tag>.sh, which holds only its data and
# runs `. <prefix>/.lightning-setup.lib.sh CONTRACT TAG INSTALL_JOB VARIANT` (the install writes both,
# lxpu_admin/install/tagfiles.py). It sets up <prefix>/<TAG>, never changes shell options and leaves no function or
# variable behind besides what it exports. One library serves every tag of a prefix, whose install jobs may come
# from different checkouts: bump the contract (recipes/render.py reads the line `local contract=N`) with any change
# to the arguments or their meaning; the check reads only CONTRACT, TAG, INSTALL_JOB and VARIANT: keep those four.
# Here is what must run in this shell; the rest is lxpu_admin/envside/setup_lib.py, which every install writes with this
# file, next to it (.lightning-setup.lib.py), and which prints the lines evaluated here.

if [ "${BASH_SOURCE[1]:-}" = "$0" ]; then
  echo "${BASH_SOURCE[1]##*/}: source this file (source ${BASH_SOURCE[1]}), do not run it" >&2
  exit 1
fi

_lxpu_setup() {
  local contract=1
  # shellcheck disable=SC2034  # fd: the lease's descriptor, opened by the lines evaluated below
  local here lines fd
  here=$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")" && pwd) || return 1
  if [ "$#" -lt 4 ]; then
    echo "${BASH_SOURCE[0]##*/}: source a setup script (lightning-setup-<tag>.sh next to it), not this library" >&2
    return 1
  elif [ "$1" != "$contract" ]; then
    echo "lightning-setup-$2.sh: this setup script was rendered for setup library contract $1, but" \
      "$here/${BASH_SOURCE[0]##*/} has contract $contract (an install from another checkout wrote it): rerun $3" \
      "--variant $4 --prefix $here from the checkout that installed the other versions here" >&2
    return 1
  elif [ ! -x "$here/$2/bin/python" ] || [ ! -f "$here/$2/lightning-xpu-site.sh" ]; then
    echo "lightning-setup-$2.sh: no complete environment at $(readlink -m -- "$here/$2"): run $3 --variant $4" \
      "--prefix $here" >&2
    return 1
  fi
  # The ONE build <prefix>/<TAG> points to now, its lease (whose shared flock this shell and every process it
  # starts hold, a nohup job too), the site's modules and the variables, by the environment's own Python.
  lines=$("$here/$2/bin/python" -I -S "${BASH_SOURCE[0]%.sh}.py" "$here" "$2" "$$") && eval "$lines" || return 1
  # shellcheck source=/dev/null
  . "$LIGHTNING_XPU_ROOT/lightning-xpu-site.sh"
  hash -r
  # Node-local staging (issue 15, lightning-xpu-stage --help).
  # LIGHTNING_XPU_STAGE=1 picks mount or copy, =mount and =copy force one (issue 30).
  case "${LIGHTNING_XPU_STAGE:-0}" in
  1 | mount | copy)
    if [ -x "$LIGHTNING_XPU_ROOT/bin/lightning-xpu-stage" ]; then
      eval "$("$LIGHTNING_XPU_ROOT/bin/lightning-xpu-stage" --shell-if-job)"
    fi
    ;;
  esac
}

# No `set --` here: bash keeps positional parameters a sourced file sets, and they are the caller's.
if _lxpu_setup "$@"; then unset -f _lxpu_setup; else unset -f _lxpu_setup && return 1; fi
