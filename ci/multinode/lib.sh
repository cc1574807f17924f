#!/usr/bin/env bash
# The two-host cluster's layout, shared by ci/multinode/{up,down,status,client} (sourced, never run).
#
# Three network namespaces stand for three hosts: `ctl` (slurmctld) and the compute nodes `node1` and
# `node2` (one slurmd each). The ctl namespace holds a bridge with one veth pair to each node, so nothing
# is added to the root namespace: no interface, no address, no route, and no port (slurmctld's 6817 lives
# in ctl's own port space, beside the single-node cluster ci/services/slurm.sh runs on the machine).
# Each daemon runs in a private UTS and mount namespace too: its own hostname (slurmd refuses a node
# name that differs from it), a hosts file naming the three hosts (gloo, Hydra and c10d resolve peers
# by name), a private /dev/shm and its own boot id (MPI libraries use shared memory between processes
# with the same boot id), and its own node-local directory (MN_NODE_LOCAL). Job tasks inherit all of it from
# their slurmd.
# shellcheck source=ci/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"

# State (slurm.conf, hosts file, spool, logs, pid files); Slurm cannot quote paths, so no whitespace.
MN_DIR="${LXPU_MULTINODE_DIR:-${TMPDIR:-/tmp}/lxpu-multinode}"
# First three octets of the private /24 on the links the harness creates.
MN_SUBNET="${LXPU_MULTINODE_SUBNET:-10.251.77}"
# Names of the namespaces: <prefix>ctl, <prefix>node1, <prefix>node2 (another prefix, subnet and state
# directory give a second, independent cluster).
MN_NS_PREFIX="${LXPU_MULTINODE_PREFIX:-lxpu-mn-}"
MN_HOSTS=(ctl node1 node2)
MN_NODES=(node1 node2)
MN_CONF="$MN_DIR/slurm.conf"
# Node-local storage: the same path on every host, privately bind-mounted per host from $MN_NODE_LOCAL.<host>
# (the hosts share one file system otherwise), as /tmp or an NVMe disk is on a real compute node. Jobs that
# stage the environment there (lightning-xpu-stage) read nothing of it from another host.
# shellcheck disable=SC2034  # used by up.sh and status.sh
MN_NODE_LOCAL="$MN_DIR/node-local"

mn_check_settings() {
    [[ "$MN_DIR" != *[[:space:]]* ]] \
        || ci_die "LXPU_MULTINODE_DIR='$MN_DIR' contains whitespace, which slurm.conf cannot hold: pick a path without"
    [[ "$MN_DIR" == /* ]] || ci_die "LXPU_MULTINODE_DIR='$MN_DIR' is not absolute: give an absolute path"
    [[ "$MN_NS_PREFIX" =~ ^[a-z][a-z0-9-]{0,30}$ ]] \
        || ci_die "LXPU_MULTINODE_PREFIX='$MN_NS_PREFIX' is not a short lower-case name: use e.g. lxpu-mn-"
    local octet
    [[ "$MN_SUBNET" =~ ^(10\.[0-9]+|172\.(1[6-9]|2[0-9]|3[01])|192\.168)\.[0-9]+$ ]] \
        || ci_die "LXPU_MULTINODE_SUBNET='$MN_SUBNET' is not the first three octets of a private /24: use e.g. 10.251.77"
    for octet in ${MN_SUBNET//./ }; do
        ((10#$octet <= 255)) || ci_die "LXPU_MULTINODE_SUBNET='$MN_SUBNET' has an octet above 255: use e.g. 10.251.77"
    done
}

# mn_ns HOST: the network namespace standing for HOST.
mn_ns() {
    printf '%s%s\n' "$MN_NS_PREFIX" "$1"
}

# mn_addr HOST: HOST's address on the cluster link.
mn_addr() {
    case "$1" in
        ctl) printf '%s.1\n' "$MN_SUBNET" ;;
        node1) printf '%s.11\n' "$MN_SUBNET" ;;
        node2) printf '%s.12\n' "$MN_SUBNET" ;;
        *) ci_die "internal: unknown host '$1'" ;;
    esac
}

mn_ns_exists() {
    [[ -e "/run/netns/$(mn_ns "$1")" ]]
}

# mn_ns_pids HOST: every process whose network namespace is HOST's (daemons, job steps, ranks).
mn_ns_pids() {
    mn_ns_exists "$1" || return 0
    ip netns pids "$(mn_ns "$1")" 2>/dev/null || true
}

# mn_client CMD...: a Slurm client command talking to this cluster (run from the ctl namespace: the
# controller's address exists only on the cluster link).
mn_client() {
    nsenter --net="/run/netns/$(mn_ns ctl)" -- env SLURM_CONF="$MN_CONF" "$@"
}

# mn_node_states: "node1 idle" lines, one per node, as the controller sees them; nothing when it is down.
mn_node_states() {
    mn_ns_exists ctl && [[ -e "$MN_CONF" ]] || return 0
    mn_client timeout 10 sinfo -h -N -o '%N %T' 2>/dev/null | sort -u || true
}

# mn_nodes_usable: true when every node is up (idle, or running a job) for the controller.
mn_nodes_usable() {
    local states node
    states="$(mn_node_states)"
    for node in "${MN_NODES[@]}"; do
        grep -Eq "^$node (idle|mixed|allocated|completing)$" <<<"$states" || return 1
    done
}

# mn_teardown: stop every process in the cluster's namespaces (daemons, job steps, ranks), then delete the
# namespaces, which removes the bridge and veth links with them. Safe to run when nothing is up.
mn_teardown() {
    local host pids=() round
    for round in term term term term term term term term term term kill; do
        pids=()
        for host in "${MN_HOSTS[@]}"; do
            mapfile -t -O "${#pids[@]}" pids < <(mn_ns_pids "$host")
        done
        ((${#pids[@]})) || break
        if [[ "$round" == kill ]]; then
            ci_log "killing what did not stop in 10 s: pids ${pids[*]}"
            kill -KILL "${pids[@]}" 2>/dev/null || true
            sleep 0.5
        else
            kill -TERM "${pids[@]}" 2>/dev/null || true
            sleep 1
        fi
    done
    for host in "${MN_HOSTS[@]}"; do
        if mn_ns_exists "$host"; then
            ip netns del "$(mn_ns "$host")" || ci_log "could not delete namespace $(mn_ns "$host"): see 'ip netns pids $(mn_ns "$host")'"
        fi
    done
}
