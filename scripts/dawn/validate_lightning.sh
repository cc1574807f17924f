#!/usr/bin/env bash
# lightning-xpu site validation job for dawn (docs/xpu-guide.md#site-validation-job): a thin wrapper around
# scripts/common/validate_lightning.sh (--help) with this site's defaults (prefix: recipes/sites/dawn.toml).
#SBATCH --job-name=lxpu-validate
#SBATCH --output=lxpu-validate-%j.log
#SBATCH --partition=pvc9
#SBATCH --nodes=2
#SBATCH --ntasks-per-node=8
#SBATCH --gres=gpu:4
#SBATCH --time=00:30:00
# Submit from this directory: sbatch --account=<project> validate_lightning.sh --tag 2.13
# The account or project is never written here. Under the scheduler this file is a spool copy: hence the
# submit directory in the search below.
set -euo pipefail
defaults=(--site-prefix "$HOME/rds/hpc-work/lightning-xpu" --site-launchers "srun,mpiexec")
for here in "$(dirname "${BASH_SOURCE[0]}")" "${SLURM_SUBMIT_DIR:-}" "${PBS_O_WORKDIR:-}"; do [ ! -f "$here/../common/validate_lightning.sh" ] || exec bash "$here/../common/validate_lightning.sh" "${defaults[@]}" "$@"; done
echo "validate_lightning.sh: cannot find scripts/common/validate_lightning.sh: submit from scripts/dawn of the repository" >&2; exit 2
