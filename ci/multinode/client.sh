#!/usr/bin/env bash
# Runs a Slurm client command (sbatch, srun, squeue, scontrol, sinfo, ...) against the two-host cluster.
# The controller's address exists only on the cluster's own link, so the command runs in the ctl host's
# network namespace, with SLURM_CONF naming the cluster's configuration; a batch job's environment
# carries that SLURM_CONF to its srun and mpiexec calls.
set -euo pipefail
# shellcheck source=ci/multinode/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

usage() {
    cat <<USAGE
Usage: bash ci/multinode/client.sh COMMAND [ARGS...]
       bash ci/multinode/client.sh --help

Runs COMMAND against the two-host cluster started by bash ci/multinode/up.sh, e.g.
  bash ci/multinode/client.sh sinfo -N
  bash ci/multinode/client.sh sbatch -N 2 --ntasks-per-node=2 job.sh
The command's exit status is returned.
USAGE
}

main() {
    case "${1:-}" in
        -h | --help) usage; return ;;
        "") ci_die "no command given: see bash ci/multinode/client.sh --help" ;;
    esac
    mn_check_settings
    ci_require_root
    if ! mn_ns_exists ctl || [[ ! -e "$MN_CONF" ]]; then
        ci_die "the two-host cluster is not up: run bash ci/multinode/up.sh"
    fi
    mn_client "$@"
}

main "$@"
