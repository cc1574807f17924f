#!/usr/bin/env bash
# Tears the two-host cluster down: every process in its namespaces (slurmctld, the slurmds, job steps and
# their ranks), then the namespaces with their bridge and links, then the state directory.
# Safe to run at any time, also when nothing or only part of the cluster is up.
set -euo pipefail
# shellcheck source=ci/multinode/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

usage() {
    cat <<USAGE
Usage: bash ci/multinode/down.sh [--keep-logs] [--help]

Stops everything running in the namespaces $(mn_ns ctl), $(mn_ns node1) and $(mn_ns node2), deletes them
(with their bridge and veth links) and removes the state directory $MN_DIR
(LXPU_MULTINODE_DIR), except with --keep-logs, which keeps it for reading the daemons' logs.
USAGE
}

main() {
    local keep_logs=0
    case "${1:-}" in
        -h | --help) usage; return ;;
        --keep-logs) keep_logs=1 ;;
        "") ;;
        *) ci_die "unknown argument '$1': see bash ci/multinode/down.sh --help" ;;
    esac
    mn_check_settings
    ci_require_root
    mn_teardown
    if ((keep_logs)); then
        ci_log "two-host cluster down; logs kept in $MN_DIR/log"
    else
        rm -rf "$MN_DIR"
        ci_log "two-host cluster down"
    fi
}

main "$@"
