#!/usr/bin/env bash
# lightning-xpu site validation job: the body shared by every site's <prefix>/validate_lightning.sh, which the
# install writes with the site's defaults (lxpu_engine/tagfiles.py). Loads an installed lightning-xpu, then runs
# `python -m lightning_xpu validate` once, on the first node of the allocation; the checks that need several
# processes start them themselves. Exit status: 0 when no check failed, 1 when one failed, 2 for bad arguments.
set -euo pipefail

prog=validate_lightning.sh
usage() {
  cat <<EOF2
Usage: $prog [--prefix DIR --tag TAG | --setup FILE | --module NAME [--modulepath DIR] | --python PYTHON]
             [--nodes N] [--devices N] [--launchers LIST] [--only CHECKS] [--out DIR]

Runs the lightning-xpu site validation checks in an installed environment and writes <out>/validation.json and
<out>/validation.md. Send the Markdown back through the repository's "Validation report" issue template
(.github/ISSUE_TEMPLATE/validation-report.md).

  --prefix DIR --tag TAG  source DIR/lightning-setup-TAG.sh (TAG: 2.13, 2.13-cpu, ...; prefix default: $prefix)
  --setup FILE            source this setup script
  --module NAME           module load NAME (e.g. lightning-xpu/2.13), after 'module use DIR' if --modulepath
  --python PYTHON         use this Python as it is (lightning_xpu importable); loads nothing
  --nodes N               nodes to use, 1 or 2 (default: the allocation's, at most 2)
  --devices N             devices (tiles) per node (default: all visible)
  --launchers LIST        site launchers for the launched checks (default: $launchers)
  --only CHECKS           comma-separated check names (python -m lightning_xpu validate --list)
  --out DIR               report directory (default: ./lightning-xpu-validation-<job id or date>)
The site's job passes its defaults first: --site-prefix DIR --site-launchers LIST (recipes/sites/<site>.toml).
EOF2
}
die() {
  echo "$prog: $*" >&2
  exit 2
}

prefix="$HOME/lightning-xpu" launchers=srun,mpiexec
tag="" setup="" module="" modulepath="" python="" nodes="" devices="" only="" out=""
while [ "$#" -gt 0 ]; do
  case "$1" in
    -h | --help) usage; exit 0 ;;
    --prefix | --site-prefix | --tag | --setup | --module | --modulepath | --python | --nodes | --devices | \
      --launchers | --site-launchers | --only | --out) [ "$#" -ge 2 ] || die "$1 needs a value (see --help)" ;;
    *) die "unknown option '$1' (see --help)" ;;
  esac
  name="${1#--}"
  printf -v "${name#site-}" '%s' "$2"  # --site-X: the site's default for --X, given first
  shift 2
done

chosen=0
for given in "$tag" "$setup" "$module" "$python"; do [ -z "$given" ] || chosen=$((chosen + 1)); done
[ "$chosen" -eq 1 ] || die "give exactly one of --tag (with --prefix), --setup, --module or --python"
case "${nodes:-1}" in 1 | 2) ;; *) die "--nodes must be 1 or 2, got '$nodes'" ;; esac
case "${devices:-1}" in *[!0-9]* | 0) die "--devices must be a positive number, got '$devices'" ;; esac

if [ -n "$tag" ]; then
  setup="$prefix/lightning-setup-$tag.sh"
  [ -f "$setup" ] || die "no install of lightning-xpu $tag under $prefix (no $setup): give --prefix, or install it first"
fi
if [ -n "$setup" ]; then
  [ -f "$setup" ] || die "no setup script $setup"
  # shellcheck source=/dev/null
  source "$setup"
  python=python
elif [ -n "$module" ]; then
  declare -F module >/dev/null 2>&1 || die "no 'module' command in this shell: use --setup or --tag instead"
  [ -z "$modulepath" ] || module use "$modulepath"
  module load "$module" || die "'module load $module' failed (see the message above)"
  python=python
fi
command -v "$python" >/dev/null 2>&1 || die "no Python '$python'"

# The allocation: nodes from the scheduler (at most 2), the report next to where the job was submitted.
if [ -z "$nodes" ]; then
  nodes="${SLURM_JOB_NUM_NODES:-1}"
  [ -n "${SLURM_JOB_NUM_NODES:-}" ] || [ ! -f "${PBS_NODEFILE:-}" ] || nodes="$(sort -u "$PBS_NODEFILE" | wc -l)"
  [ "$nodes" -le 2 ] || nodes=2
fi
job="${SLURM_JOB_ID:-${PBS_JOBID:-$(date +%Y%m%d-%H%M%S)}}"
[ -n "$out" ] || out="${SLURM_SUBMIT_DIR:-${PBS_O_WORKDIR:-$PWD}}/lightning-xpu-validation-${job%%.*}"
mkdir -p "$out"

args=(validate --nodes "$nodes" --launchers "$launchers" --json "$out/validation.json" --markdown "$out/validation.md")
[ -z "$devices" ] || args+=(--devices "$devices")
[ -z "$only" ] || args+=(--only "$only")
echo "$prog: $("$python" -c 'import sys; print(sys.executable)'), $nodes node(s); report in $out"
exec "$python" -m lightning_xpu "${args[@]}"
