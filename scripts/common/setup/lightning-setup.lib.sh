# shellcheck shell=bash
# lightning-setup.lib.sh: the code of every setup script lightning-setup-<tag>.sh, which holds only its data and
# runs `. <prefix>/.lightning-setup.lib.sh CONTRACT TAG INSTALL_JOB VARIANT` (the install writes both,
# lxpu_engine/tagfiles.py). It sets up <prefix>/<TAG>, never changes shell options and leaves no function or
# variable behind besides what it exports. One library serves every tag of a prefix, whose install jobs may come
# from different checkouts: bump the contract (recipes/render.py reads the line `local contract=N`) with any change
# to the arguments or their meaning; the check reads only CONTRACT, TAG, INSTALL_JOB and VARIANT: keep those four.

if [ "${BASH_SOURCE[1]:-}" = "$0" ]; then
  echo "${BASH_SOURCE[1]##*/}: source this file (source ${BASH_SOURCE[1]}), do not run it" >&2
  exit 1
fi

_lxpu_setup_contract() {
  local contract=1
  local here
  if [ "$#" -lt 4 ]; then
    echo "${BASH_SOURCE[0]##*/}: source a setup script (lightning-setup-<tag>.sh next to it), not this library" >&2
    return 1
  fi
  [ "$1" = "$contract" ] && return 0
  here=$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")" && pwd)
  echo "lightning-setup-$2.sh: this setup script was rendered for setup library contract $1, but" \
    "$here/${BASH_SOURCE[0]##*/} has contract $contract (an install from another checkout wrote it): rerun $3" \
    "--variant $4 --prefix $here from the checkout that installed the other versions here" >&2
  return 1
}

# _lxpu_file_url PATH: file://PATH, each byte outside [A-Za-z0-9/._~-] percent-encoded.
_lxpu_file_url() {
  local LC_ALL=C path="$1" url="" char i
  for ((i = 0; i < ${#path}; i++)); do
    char="${path:i:1}"
    case "$char" in
      [A-Za-z0-9/._~-]) url+="$char" ;;
      *) printf -v char '%%%02X' "'$char" && url+="$char" ;;
    esac
  done
  printf 'file://%s' "$url"
}

_lxpu_setup() {
  local tag="$2" install_job="$3" variant="$4" me="lightning-setup-$2.sh"
  local here root old modules_file name entries layer
  local target hops lease_dir host lease job fd
  here=$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")" && pwd) || return 1
  root="$here/$tag"
  # BEGIN build pinning and lease (as in the modulefile body; lxpu_engine/leases.py): pin the ONE build
  # <prefix>/<tag> points to now, and lease it while this job (outside a scheduler, this shell) lives.
  hops=0
  while [ -L "$root" ] && [ "$hops" -lt 8 ]; do
    target=$(readlink -- "$root") || break
    case "$target" in /*) root=$target ;; *) root="${root%/*}/$target" ;; esac
    hops=$((hops + 1))
  done
  if [ "${root%/*}" = "$here/.envs" ] && [ -x "$root/bin/python" ]; then
    lease_dir="$here/.leases"
    host=$(cat /proc/sys/kernel/hostname 2>/dev/null || uname -n)
    job="" lease="pid-$$"
    if [ -n "${SLURM_JOB_ID:-}" ]; then
      job="slurm:$SLURM_JOB_ID" lease="slurm-$SLURM_JOB_ID"
    elif [ -n "${PBS_JOBID:-}" ]; then
      job="pbs:$PBS_JOBID" lease="pbs-$PBS_JOBID"
    fi
    lease="$lease_dir/${root##*/}@$host.$lease"
    if ! { mkdir -p -- "$lease_dir" && (umask 022 &&
      printf 'build=%s\nhost=%s\njob=%s\ncluster=%s\npid=%s\nuser=%s\ncreated=%s\nwhat=setup-script\n' \
        "${root##*/}" "$host" "$job" "${SLURM_CLUSTER_NAME:-}" "$$" "${USER:-}" "$(date +%s)" >"$lease"); } 2>/dev/null; then
      echo "$me: warning: cannot record a lease in $lease_dir: a --prune or --uninstall may remove ${root##*/} while you use it" >&2
    else
      # This shell and every process it starts (a nohup job that outlives it, too) hold the lease's shared flock.
      { exec {fd}<"$lease" && flock -s "$fd" && echo held=flock >>"$lease"; } 2>/dev/null || :
    fi
  fi
  # END build pinning and lease
  if [ ! -x "$root/bin/python" ] || [ ! -f "$root/lightning-xpu-site.sh" ]; then
    echo "$me: no complete environment at $root: run $install_job --variant $variant --prefix $here" >&2
    return 1
  fi

  # Site prerequisite modules (one per line; none on most sites).
  modules_file="$root/lightning-xpu-site-modules.txt"
  if [ -s "$modules_file" ]; then
    if declare -F module >/dev/null 2>&1; then
      while IFS= read -r name || [ -n "$name" ]; do
        case "$name" in '' | '#'*) continue ;; esac
        module load "$name" || echo "$me: warning: 'module load $name' failed" >&2
      done <"$modules_file"
    else
      echo "$me: note: this site expects the modules in $modules_file; no 'module' command here, so they were not loaded" >&2
    fi
  fi

  # Another lightning-xpu environment set up in this shell: take its bin directory out of PATH first.
  old="${LIGHTNING_XPU_ROOT:-}"
  if [ -n "$old" ] && [ "$old" != "$root" ]; then
    entries=":${PATH:-}:"
    entries="${entries//":$old/bin:"/:}"
    entries="${entries#:}"
    PATH="${entries%:}"
  fi
  [[ ":${PATH:-}:" == *":$root/bin:"* ]] || PATH="$root/bin${PATH:+:$PATH}"
  export PATH
  if [ -d "$root/conda-meta" ]; then export CONDA_PREFIX="$root"; else export VIRTUAL_ENV="$root"; fi
  export PYTHONUSERBASE="$HOME/.local/lightning-xpu/$tag"  # pip install --user in a conda environment
  export LIGHTNING_XPU_ROOT="$root"
  # The environment's pins bind every pip and uv install (lxpu_engine/pins.py); a percent-encoded file: URL,
  # since both variables are lists split at white space.
  if [ -f "$root/share/lightning-xpu/constraints.txt" ]; then
    PIP_CONSTRAINT="$(_lxpu_file_url "$root/share/lightning-xpu/constraints.txt")"
    export PIP_CONSTRAINT UV_CONSTRAINT="$PIP_CONSTRAINT"
  fi
  # The user's writable layer (`lightning-xpu user-env`): its bin/ first, and the venv pip and uv install into.
  layer="${LIGHTNING_XPU_USER_BASE:-$HOME/.local/lightning-xpu}/$tag"
  if [ -f "$layer/pyvenv.cfg" ]; then
    [[ ":$PATH:" == *":$layer/bin:"* ]] || PATH="$layer/bin:$PATH"
    export VIRTUAL_ENV="$layer"
  fi
  # shellcheck source=/dev/null
  . "$root/lightning-xpu-site.sh"
  hash -r

  # Node-local staging (issue 15, lightning-xpu-stage --help).
  if [ "${LIGHTNING_XPU_STAGE:-0}" = 1 ] && [ -x "$root/bin/lightning-xpu-stage" ]; then
    eval "$("$root/bin/lightning-xpu-stage" --shell-if-job)"
  fi
}

# No `set --` here: bash keeps positional parameters a sourced file sets, and they are the caller's.
if _lxpu_setup_contract "$@" && _lxpu_setup "$@"; then
  unset -f _lxpu_setup _lxpu_setup_contract _lxpu_file_url
else
  unset -f _lxpu_setup _lxpu_setup_contract _lxpu_file_url
  return 1
fi
