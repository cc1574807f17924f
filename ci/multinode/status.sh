#!/usr/bin/env bash
# Reports the two-host cluster: which namespaces exist, what runs in them, and how the controller sees
# the nodes. Exit 0 only when both nodes are usable.
set -euo pipefail
# shellcheck source=ci/multinode/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

usage() {
    cat <<USAGE
Usage: bash ci/multinode/status.sh [--json] [--help]

Prints each host's namespace, address and processes, then the node states from slurmctld.
--json prints one JSON object instead: {"usable": bool, "slurm_conf": path, "state_dir": path,
"node_local": path (each host's own directory there is node_local.<host>), "hosts": {"ctl": {"namespace", "address", "up"}, "node1": {...}, "node2": {...}}}.
Exit status: 0 when both nodes are idle or running jobs, 1 otherwise.
USAGE
}

human() {
    local host states
    for host in "${MN_HOSTS[@]}"; do
        if mn_ns_exists "$host"; then
            printf '%-6s %-15s namespace %s, %s process(es)\n' "$host" "$(mn_addr "$host")" "$(mn_ns "$host")" \
                "$(mn_ns_pids "$host" | wc -l)"
        else
            printf '%-6s %-15s no namespace\n' "$host" "$(mn_addr "$host")"
        fi
    done
    states="$(mn_node_states | tr '\n' ' ')"
    printf 'slurmctld sees: %s\n' "${states:-nothing (controller down)}"
}

json() {
    local host sep="" usable=false
    mn_nodes_usable && usable=true
    printf '{"usable": %s, "slurm_conf": "%s", "state_dir": "%s", "node_local": "%s", "hosts": {' "$usable" "$MN_CONF" \
        "$MN_DIR" "$MN_NODE_LOCAL"
    for host in "${MN_HOSTS[@]}"; do
        local up=false
        mn_ns_exists "$host" && up=true
        printf '%s"%s": {"namespace": "%s", "address": "%s", "up": %s}' "$sep" "$host" "$(mn_ns "$host")" \
            "$(mn_addr "$host")" "$up"
        sep=", "
    done
    printf '}}\n'
}

main() {
    local mode=human
    case "${1:-}" in
        -h | --help) usage; return ;;
        --json) mode=json ;;
        "") ;;
        *) ci_die "unknown argument '$1': see bash ci/multinode/status.sh --help" ;;
    esac
    mn_check_settings
    ci_require_root
    "$mode"
    mn_nodes_usable
}

main "$@"
