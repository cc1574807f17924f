#!/usr/bin/env bash
# Installs the real services the tests need, only what is missing:
#   - Debian: munge, Slurm (slurmctld, slurmd, client, and the Torque-style qsub wrapper slurm-wlm-torque,
#     which the Aurora job tests submit through), Lmod, lua5.3 (luac for render.py check), MPICH, shellcheck, iproute2 (network
#     namespaces for the multi-node stage), squashfs-tools, squashfuse and fuse3 (SquashFS images and mount
#     staging, issue 30), plus the venv module for the system python3.11;
#   - Intel MPI from PyPI (impi-rt) into its own venv, build/venvs/impi. Its mpiexec stays off the
#     default PATH so that MPICH's Hydra (/usr/bin/mpiexec.mpich) and Intel's never shadow each other.
# Nothing starts here: ci/services/munge.sh and ci/services/slurm.sh do that.
set -euo pipefail
# shellcheck source=ci/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"

DEBIAN_PACKAGES=(munge slurmctld slurmd slurm-client slurm-wlm-torque lmod lua5.3 mpich shellcheck iproute2 util-linux procps strace zstd
    squashfs-tools squashfuse fuse3)
# 2021.19 needs libfabric>=2.6, which is not on PyPI; 2021.18.1 is the newest self-contained release.
IMPI_VERSION="${LXPU_IMPI_VERSION:-2021.18.1}"
IMPI_VENV="$LXPU_REPO_ROOT/build/venvs/impi"

usage() {
    cat <<USAGE
Usage: bash ci/services/install.sh [shellcheck] [debian] [impi] [--help]

Installs what is missing of: Debian packages ${DEBIAN_PACKAGES[*]}
(apt-get runs only when one is missing) and Intel MPI (PyPI impi-rt==$IMPI_VERSION) into
build/venvs/impi (its launcher: build/venvs/impi/bin/mpiexec). Re-running is a fast no-op.
Naming parts installs only those: shellcheck is that one Debian package (all that
bash ci/test.sh --stage lint needs); the default is debian and impi.

Environment: LXPU_IMPI_VERSION overrides the impi-rt version; LXPU_PYTHON_BIN the python
used for the Intel MPI venv (default: python3.11).
USAGE
}

debian_missing() {
    local pkg status
    for pkg in "$@"; do
        status="$(dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null || true)"
        [[ "$status" == "install ok installed" ]] || printf '%s\n' "$pkg"
    done
}

install_debian() {
    install_debian_packages "${DEBIAN_PACKAGES[@]}"
}

# Lint's one package: shellcheck, and the venv module of the python that builds its ruff venv.
install_shellcheck() {
    install_debian_packages shellcheck
}

# install_debian_packages PACKAGE...: apt-get install those of PACKAGE... (and python3.11-venv) that are missing.
install_debian_packages() {
    local missing=()
    mapfile -t missing < <(debian_missing "$@")
    # The system python3.11 needs Debian's venv module; a python3.11 from elsewhere brings its own.
    if ! "$PYTHON_BIN" -c 'import ensurepip, venv' 2>/dev/null; then
        missing+=(python3.11-venv)
    fi
    if ((${#missing[@]} == 0)); then
        ci_log "Debian packages: all present"
        fuse_for_users
        return
    fi
    ci_require_root
    command -v apt-get >/dev/null || ci_die "missing ${missing[*]} and no apt-get: install them with your package manager"
    ci_log "Debian packages: installing ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -q || ci_die "apt-get update failed: check the machine's Debian mirror, then re-run"
    apt-get install -y -q --no-install-recommends "${missing[@]}" \
        || ci_die "apt-get install ${missing[*]} failed: see the apt output above"
    fuse_for_users
}


# Mount staging (lightning-xpu-stage, issue 30) mounts as the job's own user: FUSE's unprivileged path opens
# /dev/fuse, which fuse3's udev rule makes 0666 on a booted system. A CI container or VM without udev keeps the
# kernel's 0600 (root only), so the node's users could not mount: set the mode the rule would have, as root.
fuse_for_users() {
    [[ -c /dev/fuse ]] || { ci_log "/dev/fuse: not present (no FUSE in this kernel): mount staging tests cannot run"; return; }
    [[ "$(stat -c %a /dev/fuse)" != 666 ]] || return 0
    ci_require_root
    chmod 0666 /dev/fuse || ci_die "chmod 0666 /dev/fuse failed: make /dev/fuse usable by every user (fuse3's udev rule)"
    ci_log "/dev/fuse: mode 0666, as fuse3's udev rule sets it (mount staging as a user)"
}

install_impi() {
    local stamp="$IMPI_VENV/.lxpu-impi-version"
    if [[ -x "$IMPI_VENV/bin/mpiexec" && "$(cat "$stamp" 2>/dev/null)" == "$IMPI_VERSION" ]]; then
        ci_log "Intel MPI $IMPI_VERSION: present in build/venvs/impi"
        return
    fi
    ci_log "Intel MPI: installing impi-rt==$IMPI_VERSION into build/venvs/impi"
    rm -rf "$IMPI_VENV"
    "$PYTHON_BIN" -m venv "$IMPI_VENV" || ci_die "$PYTHON_BIN -m venv failed: install python3.11-venv"
    "$IMPI_VENV/bin/python" -m pip install -q "impi-rt==$IMPI_VERSION" \
        || ci_die "pip install impi-rt==$IMPI_VERSION failed: check PyPI access or set LXPU_IMPI_VERSION"
    [[ -x "$IMPI_VENV/bin/mpiexec" ]] || ci_die "impi-rt $IMPI_VERSION has no bin/mpiexec: pick another LXPU_IMPI_VERSION"
    printf '%s\n' "$IMPI_VERSION" >"$stamp"
}

main() {
    local parts=() part
    for part in "$@"; do
        case "$part" in
            -h | --help) usage; exit 0 ;;
            shellcheck | debian | impi) parts+=("$part") ;;
            *) ci_die "unknown argument '$part': expected shellcheck, debian, impi or --help" ;;
        esac
    done
    ((${#parts[@]})) || parts=(debian impi)
    ci_python311
    for part in "${parts[@]}"; do
        "install_$part"
    done
    ci_log "installed what was missing of: ${parts[*]}"
}

main "$@"
