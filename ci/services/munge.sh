#!/usr/bin/env bash
# Starts, stops or reports munged, the authentication daemon Slurm needs (no systemd here: we run
# the daemon ourselves as user munge, the way Debian's unit would).
set -euo pipefail
# shellcheck source=ci/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"

KEY=/etc/munge/munge.key
RUN_DIR=/run/munge
PID_FILE="$RUN_DIR/munged.pid"
LOG_FILE=/var/log/munge/munged.log

usage() {
    cat <<USAGE
Usage: bash ci/services/munge.sh {start|stop|status|--help}

  start   create the key ($KEY) if missing and start munged; does nothing when it already works
  stop    stop the munged this machine runs (pid from $PID_FILE)
  status  exit 0 when 'munge -n | unmunge' works, 1 otherwise
Log: $LOG_FILE
USAGE
}

healthy() {
    munge -n 2>/dev/null | unmunge >/dev/null 2>&1
}

prepare() {
    getent passwd munge >/dev/null || ci_die "no user 'munge': run bash ci/services/install.sh first"
    install -d -o munge -g munge -m 0700 /etc/munge /var/lib/munge /var/log/munge
    install -d -o munge -g munge -m 0755 "$RUN_DIR"
    if [[ ! -s "$KEY" ]]; then
        ci_log "creating $KEY"
        mungekey --create --keyfile="$KEY" || ci_die "mungekey failed: check that /etc/munge is writable"
    fi
    # munged refuses a log file it does not own; create it before the shell appends its stderr there.
    [[ -e "$LOG_FILE" ]] || install -o munge -g munge -m 0640 /dev/null "$LOG_FILE"
    chown munge:munge "$KEY"
    chmod 0400 "$KEY"
}

start() {
    ci_require_root
    if healthy; then
        ci_log "munged already running"
        return
    fi
    command -v munged >/dev/null || ci_die "munged not found: run bash ci/services/install.sh first"
    prepare
    # --force: a socket or pid file left by a killed munged would otherwise stop it from starting.
    setsid runuser -u munge -- munged --force --log-file="$LOG_FILE" --pid-file="$PID_FILE" \
        </dev/null >>"$LOG_FILE" 2>&1 || true
    if ! ci_wait_for 10 healthy; then
        tail -n 20 "$LOG_FILE" >&2 || true
        ci_die "munged did not come up (log tail above, $LOG_FILE): fix the cause and re-run start"
    fi
    ci_log "munged running (pid $(cat "$PID_FILE"))"
}

stop() {
    ci_require_root
    ci_stop_pidfile munged "$PID_FILE"
}

case "${1:-}" in
    start) start ;;
    stop) stop ;;
    status)
        if healthy; then echo "munge: running"; else echo "munge: not running"; exit 1; fi
        ;;
    -h | --help) usage ;;
    *) ci_die "expected start, stop or status, got '${1:-}': see bash ci/services/munge.sh --help" ;;
esac
