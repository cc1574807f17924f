#!/usr/bin/env bash
# lightning-xpu site validation job for generic (docs/xpu-guide.md#site-validation-job): a thin wrapper around
# scripts/common/validate_lightning.sh (--help) with this site's defaults (prefix: recipes/sites/generic.toml).
#SBATCH --job-name=lxpu-validate
#SBATCH --output=lxpu-validate-%j.log
#SBATCH --nodes=1
#SBATCH --ntasks=2
# Submit from this directory: bash validate_lightning.sh --tag 2.13 (or sbatch validate_lightning.sh --tag 2.13)
# The account or project is never written here. Under the scheduler this file is a spool copy: hence the
# submit directory in the search below.
set -euo pipefail
defaults=(--site-prefix "$HOME/lightning-xpu" --site-launchers "srun,mpiexec")
for here in "$(dirname "${BASH_SOURCE[0]}")" "${SLURM_SUBMIT_DIR:-}" "${PBS_O_WORKDIR:-}"; do [ ! -f "$here/../common/validate_lightning.sh" ] || exec bash "$here/../common/validate_lightning.sh" "${defaults[@]}" "$@"; done
echo "validate_lightning.sh: cannot find scripts/common/validate_lightning.sh: submit from scripts/generic of the repository" >&2; exit 2
