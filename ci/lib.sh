#!/usr/bin/env bash
# Helpers shared by every script under ci/ (sourced, never run). One place for logging, errors and
# the repository root so the scripts stay short and consistent.

# shellcheck disable=SC2034  # LXPU_REPO_ROOT is used by the scripts that source this file
LXPU_REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"

# ci_log MSG...: progress line on stderr, prefixed by the calling script's name.
ci_log() {
    printf '[%s] %s\n' "$(basename "$0")" "$*" >&2
}

# ci_die MSG...: one actionable line on stderr, then exit 1.
ci_die() {
    printf '[%s] error: %s\n' "$(basename "$0")" "$*" >&2
    exit 1
}

# ci_require_root: the services are machine daemons; only root may install and start them.
ci_require_root() {
    [[ "$(id -u)" -eq 0 ]] || ci_die "must run as root (CI runs as root); re-run with sudo"
}

# ci_pid_alive PIDFILE: true when PIDFILE names a live process.
ci_pid_alive() {
    local pid
    [[ -s "$1" ]] || return 1
    pid="$(cat "$1")"
    [[ "$pid" =~ ^[0-9]+$ ]] && kill -0 "$pid" 2>/dev/null
}

# ci_wait_for SECONDS CMD...: run CMD every 0.5 s until it succeeds or SECONDS pass.
ci_wait_for() {
    local deadline=$((SECONDS + $1))
    shift
    until "$@"; do
        ((SECONDS < deadline)) || return 1
        sleep 0.5
    done
}

# ci_stop_pidfile NAME PIDFILE: SIGTERM the daemon PIDFILE names and wait up to 20 s for it to exit.
ci_stop_pidfile() {
    local name="$1" pidfile="$2" pid
    if ! ci_pid_alive "$pidfile"; then
        ci_log "$name not running"
        return
    fi
    pid="$(cat "$pidfile")"
    kill "$pid"
    local deadline=$((SECONDS + 20))
    while kill -0 "$pid" 2>/dev/null; do
        ((SECONDS < deadline)) || ci_die "$name (pid $pid) did not stop in 20 s: kill -9 $pid"
        sleep 0.2
    done
    ci_log "$name stopped"
}

# ci_python311: set PYTHON_BIN to the Python 3.11 that builds our venvs (LXPU_PYTHON_BIN, default
# python3.11): the machine's local torch wheel is a CPython 3.11 one.
ci_python311() {
    PYTHON_BIN="${LXPU_PYTHON_BIN:-python3.11}"
    command -v "$PYTHON_BIN" >/dev/null || ci_die "$PYTHON_BIN not found: install Python 3.11 or set LXPU_PYTHON_BIN"
    [[ "$("$PYTHON_BIN" -c 'import sys; print(sys.version_info[:2] == (3, 11))')" == True ]] \
        || ci_die "$PYTHON_BIN is not Python 3.11 (the local torch wheel is cp311): set LXPU_PYTHON_BIN to a python3.11"
}

# The single-node cluster's state directory and its private configuration: ci/services/slurm.sh writes it and
# starts the daemons with it (-f), ci/test.sh exports it as SLURM_CONF to every test. The machine's own
# /etc/slurm is never read or written (a Slurm daemon already on Slurm's ports stops `start` with one line).
ci_slurm_state_dir() { printf '%s' "${LXPU_SLURM_STATE_DIR:-/var/lib/lightning-xpu-ci/slurm}"; }
ci_slurm_conf() { printf '%s/slurm.conf' "$(ci_slurm_state_dir)"; }

# The slurm.conf lines both CI clusters share (ci/services/slurm.sh: one host; ci/multinode/up.sh: two): root
# daemons, munge, no accounting, CPUs as the consumable, and no mail.
ci_slurm_common_conf() {
    cat <<'CONF'
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
MpiDefault=none
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SlurmdParameters=config_overrides
ReturnToService=2
MailProg=/bin/true
CONF
}

# ci_help_only USAGE_FUNCTION ARGS...: for scripts whose only option is --help.
ci_help_only() {
    local usage_fn="$1" script
    shift
    script="$(realpath "$0")"
    case "${1:-}" in
        -h | --help) "$usage_fn"; exit 0 ;;
        "") ;;
        *) ci_die "unknown argument '$1': see bash ${script#"$LXPU_REPO_ROOT"/} --help" ;;
    esac
}
