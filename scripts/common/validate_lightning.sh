#!/usr/bin/env bash
# lightning-xpu site validation job: the body of every site's <prefix>/validate_lightning.sh
# (lxpu_admin/install/tagfiles.py writes it with the site's defaults). It loads lightning-xpu, then hands over to `lightning-xpu validate --site-job`.
set -euo pipefail
prog=validate_lightning.sh prefix="$HOME/lightning-xpu" launchers=srun,mpiexec
tag="" setup="" module="" modulepath="" python=""
die() { echo "$prog: $*" >&2; exit 2; }
while [ "$#" -gt 0 ]; do
  case "$1" in
    -h | --help) cat <<EOF2; exit 0 ;;
Usage: $prog [--prefix DIR --tag TAG | --setup FILE | --module NAME [--modulepath DIR] | --python PYTHON]
             [--nodes N] [--devices N] [--launchers LIST] [--only CHECKS] [--out DIR]
             [--comm-max-bytes SIZE] [--comm-deadline SECONDS] [--link-gbps GBITS] [--node-link-gbps GBITS]
Loads lightning-xpu, runs the site validation checks, writes <out>/validation.json and .md: send the Markdown back
with the "Validation report" issue template. The site's job gives --site-prefix DIR --site-launchers LIST first.
  --prefix DIR --tag TAG  source DIR/lightning-setup-TAG.sh (TAG: 2.13, 2.13-cpu, ...; prefix default: $prefix)
  --setup FILE            source this setup script
  --module NAME           module load NAME (e.g. lightning-xpu/2.13), after 'module use DIR' if --modulepath
  --python PYTHON         use this Python as it is (lightning_xpu importable); loads nothing
The others go to 'python -m lightning_xpu validate --site-job' (its --help explains them): --nodes (default: the
allocation's, 1 or 2), --devices (all visible), --launchers ($launchers), --only (all), --out (in the submit directory),
and the communication check's --comm-max-bytes, --comm-deadline, --link-gbps and --node-link-gbps (the site's
[validation] link_gbps/node_link_gbps, given as --site-link-gbps/--site-node-link-gbps).
EOF2
    --prefix | --site-prefix | --tag | --setup | --module | --modulepath | --python | --nodes | --devices | \
      --launchers | --site-launchers | --only | --out | --comm-max-bytes | --comm-deadline | --link-gbps | \
      --site-link-gbps | --node-link-gbps | --site-node-link-gbps) [ "$#" -ge 2 ] || die "$1 needs a value (see --help)" ;;
    *) die "unknown option '$1' (see --help)" ;;
  esac
  name="${1#--}"; name="${name#site-}"; printf -v "${name//-/_}" '%s' "$2"; shift 2  # --site-X: the site's default for --X, given first
done
[ "${tag:+x}${setup:+x}${module:+x}${python:+x}" = x ] ||
  die "give exactly one of --tag (with --prefix), --setup, --module or --python"
if [ -n "$tag" ]; then
  setup="$prefix/lightning-setup-$tag.sh"
  [ -f "$setup" ] || die "no install of lightning-xpu $tag under $prefix (no $setup): give --prefix, or install it first"
fi
if [ -n "$setup" ]; then
  [ -f "$setup" ] || die "no setup script $setup"
  # shellcheck source=/dev/null
  source "$setup"
elif [ -n "$module" ]; then
  declare -F module >/dev/null 2>&1 || die "no 'module' command in this shell: use --setup or --tag instead"
  [ -z "$modulepath" ] || module use "$modulepath"
  module load "$module" || die "'module load $module' failed (see the message above)"
fi
command -v "${python:=python}" >/dev/null 2>&1 || die "no Python '$python'"
# One prefix's job serves every tag in it: a tag installed from an older checkout lacks --site-job (its allocation
# module: lightning_xpu.commands.allocation, lightning_xpu.report.allocation before the split by role).
"$python" -c 'import lightning_xpu.commands.allocation' 2>/dev/null ||
  "$python" -c 'import lightning_xpu.report.allocation' 2>/dev/null ||
  die "$(command -v "$python") has no lightning_xpu, or one older than this job: load an install of it, or rerun that tag's install job with --force"
args=()
for name in nodes devices launchers only out comm_max_bytes comm_deadline link_gbps node_link_gbps; do
  [ -z "${!name:-}" ] || args+=("--${name//_/-}" "${!name}")
done
exec "$python" -m lightning_xpu validate --site-job "$prog" "${args[@]}"  # checks them, then the defaults
