#!/usr/bin/env bash
#SBATCH --job-name=lxpu-validate
#SBATCH --output=lxpu-validate-%j.log
#SBATCH --nodes=1
#SBATCH --ntasks=2
# lightning-xpu site validation job for generic: runs every check of `lightning-xpu validate` on this site's
# Intel GPUs and writes a JSON + Markdown report to send back (docs/xpu-guide.md#site-validation-job).
# A thin wrapper: the job itself is scripts/common/validate_lightning.sh (--help lists the options).
#
# Submit from this directory: bash validate_lightning.sh --tag 2.13 (or sbatch validate_lightning.sh --tag 2.13)
# The account or project is never written here: give yours when you submit.
set -euo pipefail

# Under the scheduler this file runs from a spool copy: find the repository through the submit directory.
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
common="$here/../common/validate_lightning.sh"
[ -f "$common" ] || common="${SLURM_SUBMIT_DIR:-${PBS_O_WORKDIR:-$PWD}}/../common/validate_lightning.sh"
if [ ! -f "$common" ]; then
  echo "validate_lightning.sh: cannot find scripts/common/validate_lightning.sh: submit from scripts/generic of the repository" >&2
  exit 2
fi
export LXPU_VALIDATE_PROG=validate_lightning.sh
export LXPU_VALIDATE_PREFIX="${LXPU_VALIDATE_PREFIX:-$HOME/lightning-xpu}"
export LXPU_VALIDATE_LAUNCHERS="${LXPU_VALIDATE_LAUNCHERS:-srun,mpiexec}"
exec bash "$common" "$@"
