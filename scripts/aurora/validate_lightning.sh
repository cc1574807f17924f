#!/usr/bin/env bash
# lightning-xpu site validation job for aurora (docs/xpu-guide.md#site-validation-job): a thin wrapper around
# scripts/common/validate_lightning.sh (--help) with this site's defaults (prefix: recipes/sites/aurora.toml).
#PBS -N lxpu-validate
#PBS -l select=2
#PBS -l walltime=00:30:00
#PBS -l filesystems=home:flare
#PBS -q debug
#PBS -k doe
#PBS -j oe
# Submit from this directory: qsub -A <project> -F "--tag 2.13" validate_lightning.sh
# The account or project is never written here. Under the scheduler this file is a spool copy: hence the
# submit directory in the search below.
set -euo pipefail
defaults=(--site-prefix "$HOME/lightning-xpu" --site-launchers "mpiexec")
for here in "$(dirname "${BASH_SOURCE[0]}")" "${SLURM_SUBMIT_DIR:-}" "${PBS_O_WORKDIR:-}"; do [ ! -f "$here/../common/validate_lightning.sh" ] || exec bash "$here/../common/validate_lightning.sh" "${defaults[@]}" "$@"; done
echo "validate_lightning.sh: cannot find scripts/common/validate_lightning.sh: submit from scripts/aurora of the repository" >&2; exit 2
