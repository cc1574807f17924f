#!/usr/bin/env bash
#PBS -N lxpu-validate
#PBS -l select=2
#PBS -l walltime=00:30:00
#PBS -l filesystems=home:flare
#PBS -q debug
#PBS -k doe
#PBS -j oe
# lightning-xpu site validation job for aurora: runs every check of `lightning-xpu validate` on this site's
# Intel GPUs and writes a JSON + Markdown report to send back (docs/xpu-guide.md#site-validation-job).
# A thin wrapper: the job itself is scripts/common/validate_lightning.sh (--help lists the options).
#
# Submit from this directory: qsub -A <project> -F "--tag 2.13" validate_lightning.sh
# The account or project is never written here: give yours when you submit.
set -euo pipefail

# Under the scheduler this file runs from a spool copy: find the repository through the submit directory.
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
common="$here/../common/validate_lightning.sh"
[ -f "$common" ] || common="${SLURM_SUBMIT_DIR:-${PBS_O_WORKDIR:-$PWD}}/../common/validate_lightning.sh"
if [ ! -f "$common" ]; then
  echo "validate_lightning.sh: cannot find scripts/common/validate_lightning.sh: submit from scripts/aurora of the repository" >&2
  exit 2
fi
export LXPU_VALIDATE_PROG=validate_lightning.sh
export LXPU_VALIDATE_PREFIX="${LXPU_VALIDATE_PREFIX:-$HOME/lightning-xpu}"
export LXPU_VALIDATE_LAUNCHERS="${LXPU_VALIDATE_LAUNCHERS:-mpiexec}"
exec bash "$common" "$@"
