#!/usr/bin/env bash
# The project's test command (README): bash ci/test.sh [--stage NAME]... [--keep-services] [--offline]
#
# Prepares what the selected stages need (STAGE_NEEDS), and nothing more: installs what is missing of
# the real services (ci/services/install.sh), starts munge and a single-node Slurm (ci/services/*.sh),
# builds the test venvs (ci/venvs.sh); then runs the stages, each timed, and prints a summary. Any
# failing stage fails the run (exit 1) after all stages ran. --plan prints that preparation and stops.
# --offline skips all of that preparation (no network, no daemons) and runs only the stages that need
# neither (OFFLINE_STAGES) with the venvs already built; tests whose service is missing then skip.
#
# Contract with the tests: every pytest runs with these variables exported.
#   LXPU_REQUIRE_SERVICES=1  a test whose service (Slurm, Lmod, MPI, ...) is missing FAILS, never skips
#   LXPU_PYTHON              python of the base venv (build/venvs/base: torch 2.13.0+cpu, Lightning 2.6.6)
#   LXPU_VENV_DIR            directory holding one venv per supported Lightning version, named by version
#                            (build/venvs/lightning/2.2.5, ...; the base's version is a symlink to base)
#   LXPU_IMPI_MPIEXEC        Intel MPI's mpiexec (build/venvs/impi/bin/mpiexec; not on PATH)
#   LXPU_MPICH_MPIEXEC       MPICH's Hydra mpiexec (/usr/bin/mpiexec.mpich)
#   LXPU_LMOD_INIT           Lmod's bash init (/usr/share/lmod/lmod/init/bash), to source under set -u
#   OMP_NUM_THREADS          1 unless already set (many ranks share 2 cores)
#   SLURM_CONF               the single-node cluster's configuration (ci_slurm_conf, ci/lib.sh; never /etc/slurm)
# Slurm: default partition pvc9, node `hostname -s`; munge is running.
# The venv running a pytest comes first on its PATH (python, pytest, ruff).
set -euo pipefail
# shellcheck source=ci/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

ALL_STAGES=(lint ci recipes unit multinode services security benchmarks docs)
# CI has 2 cores. The services stage is mostly one process (install jobs, Slurm jobs and the waits for them) for most
# of the run: it runs in the background beside the stages in BESIDE_SERVICES that follow it, which touch nothing of
# its (their own prefixes, homes and Slurm jobs on a 16-CPU node). Any other stage waits for it first: lint, ci
# (it restarts and drains the Slurm node), recipes, unit (two pytest processes keep both cores busy) and multinode
# (its own two-host cluster; it rebuilds the shared install the docs stage uses). A new stage whose tests keep to
# their own prefixes, homes and Slurm jobs, and never stop or drain a service, belongs in BESIDE_SERVICES.
BACKGROUND_STAGES=(services)
BESIDE_SERVICES=(security benchmarks docs)
OFFLINE_STAGES=(lint recipes)
UNIT_MARKERS="not slurm and not mpi and not impi and not install and not multinode and not cuda"
SERVICE_MARKERS="slurm or mpi or impi or lmod or install"
# What each stage's pytest runs select: its test directories and, where given, its marker expression (--selection
# prints this table; tests/ci/test_every_test_runs.py checks that every collected test is in some stage's selection).
declare -A STAGE_TESTS=(
    [ci]="tests/ci"
    [recipes]="tests/recipes"
    [unit]="tests/runtime"
    [services]="tests/runtime tests/install"
    [security]="tests/security"
    [multinode]="tests/multinode"
    [benchmarks]="tests/benchmarks"
    [docs]="tests/docs"
)
declare -A STAGE_MARKERS=([unit]="$UNIT_MARKERS" [services]="$SERVICE_MARKERS")
RESULTS_DIR="$LXPU_REPO_ROOT/build/ci-results"
# The HOME the README's install command runs with, once per run: its 2.13-cpu install is SHARED_HOME/lightning-xpu.
SHARED_HOME="$LXPU_REPO_ROOT/build/ci-home"
BASE="$LXPU_REPO_ROOT/build/venvs/base"
LINT="$LXPU_REPO_ROOT/build/venvs/lint"

# What each stage needs prepared (its tests' markers and tools), from PREPARATION: the ci/services/install.sh
# parts (shellcheck: that one package, for lint; debian: every package, shellcheck and Lmod among them; impi:
# Intel MPI), the services started (munge, slurm), the ci/venvs.sh targets (lint: ruff alone; base; lightning:
# one venv per Lightning version; conda-channel: the local conda channel of tests/install/test_conda_layer.py) and
# readme-install: the README's install command run once into SHARED_HOME (a real install takes minutes; the
# stages that need a finished 2.13-cpu install share this one, see tests/docs/readme_install.py).
PREPARATION=(shellcheck debian impi munge slurm lint base lightning conda-channel readme-install)
ALL_NEEDS="debian impi munge slurm base lightning conda-channel"
declare -A STAGE_NEEDS=(
    [lint]="shellcheck lint"
    [ci]="$ALL_NEEDS"
    [recipes]="debian munge slurm base"
    [unit]="debian base lightning"
    [services]="debian impi munge slurm base conda-channel"
    [security]="debian munge slurm base"
    [multinode]="$ALL_NEEDS readme-install"
    [benchmarks]="$ALL_NEEDS"
    [docs]="$ALL_NEEDS readme-install"
)

usage() {
    cat <<USAGE
Usage: bash ci/test.sh [--stage NAME]... [--keep-services] [--offline] [--plan] [--help]

Runs the whole test suite against real services (Slurm, munge, Lmod, MPICH, Intel MPI), installing
and starting what is missing (which needs root and the package repositories) and building the test
venvs (which needs PyPI) before the first stage: only what the selected stages need (lint: shellcheck
and a venv with ruff alone; no service). Stages, in order (default: all):
  lint        ruff check .; shellcheck on every tracked *.sh and .ci/run
  ci          pytest tests/ci (the services and venvs this script relies on)
  recipes     python recipes/render.py check; pytest tests/recipes
  unit        pytest tests/runtime -m "$UNIT_MARKERS",
              once per Lightning venv (the older ones beside the newest's run)
  multinode   pytest tests/multinode, the ranks loading the README's install (made before the stages)
  services    pytest tests/runtime tests/install -m "$SERVICE_MARKERS" (base venv)
  security    pytest tests/security: throwaway Unix accounts attack a shared install (needs root)
  benchmarks  pytest tests/benchmarks
  docs        pytest tests/docs
The services stage runs in the background beside ${BESIDE_SERVICES[*]} (its output follows when it ends).
A stage whose files are not present is skipped with a note; a present test directory that collects
no test fails its stage.

  --stage NAME      run only this stage (repeat for several)
  --keep-services   leave munge and Slurm running at the end even if this run started them
  --plan            print what would be installed, started and built, and the stages; do nothing
  --selection       print each stage's test directories and marker expression (STAGE<TAB>MARKERS<TAB>DIRS); do nothing
  --offline         install, start and build nothing (no network, no daemons, no root): run only
                    ${OFFLINE_STAGES[*]} (the default with --offline) with the venvs already in build/venvs;
                    a test whose service is missing skips instead of failing. E.g. after editing
                    recipes/: bash ci/test.sh --offline --stage recipes
Environment: LXPU_TEST_TIMEOUT per-test timeout in seconds (default 900).
JUnit reports: build/ci-results/.
USAGE
}

# ---- command line ------------------------------------------------------------------------------
SELECTED=()
KEEP_SERVICES=0
OFFLINE=0
PLAN_ONLY=0
while (($#)); do
    case "$1" in
        -h | --help) usage; exit 0 ;;
        --keep-services) KEEP_SERVICES=1 ;;
        --offline) OFFLINE=1 ;;
        --plan) PLAN_ONLY=1 ;;
        --selection)
            for stage in "${ALL_STAGES[@]}"; do
                [[ -z "${STAGE_TESTS[$stage]:-}" ]] || printf '%s\t%s\t%s\n' "$stage" "${STAGE_MARKERS[$stage]:-}" "${STAGE_TESTS[$stage]}"
            done
            exit 0
            ;;
        --stage)
            (($# >= 2)) || ci_die "--stage needs a name: one of ${ALL_STAGES[*]}"
            [[ " ${ALL_STAGES[*]} " == *" $2 "* ]] || ci_die "unknown stage '$2': use one of ${ALL_STAGES[*]}"
            SELECTED+=("$2")
            shift
            ;;
        *) ci_die "unknown argument '$1': see bash ci/test.sh --help" ;;
    esac
    shift
done
if ((OFFLINE)); then
    ((${#SELECTED[@]})) || SELECTED=("${OFFLINE_STAGES[@]}")
    for stage in "${SELECTED[@]}"; do
        [[ " ${OFFLINE_STAGES[*]} " == *" $stage "* ]] ||
            ci_die "stage '$stage' needs services or the network: drop --offline, or run only ${OFFLINE_STAGES[*]}"
    done
fi
((${#SELECTED[@]})) || SELECTED=("${ALL_STAGES[@]}")
TIMEOUT="${LXPU_TEST_TIMEOUT:-900}"
[[ "$TIMEOUT" =~ ^[1-9][0-9]*$ ]] || ci_die "LXPU_TEST_TIMEOUT='$TIMEOUT' is not a number of seconds: e.g. LXPU_TEST_TIMEOUT=900"

cd "$LXPU_REPO_ROOT"

# ---- what to prepare ---------------------------------------------------------------------------
# NEEDS: the PREPARATION steps the selected stages need, in PREPARATION's order. A run that builds base
# lints with base's ruff (the same pin), so the lint venv is built only where base is not: the full run
# prepares exactly what it always did.
needed() {
    local stage step wanted=" "
    for stage in "${SELECTED[@]}"; do
        wanted+="${STAGE_NEEDS[$stage]} "
    done
    for step in "${PREPARATION[@]}"; do
        [[ "$wanted" == *" $step "* ]] || continue
        [[ "$step" != lint || "$wanted" != *" base "* ]] || continue
        [[ "$step" != shellcheck || "$wanted" != *" debian "* ]] || continue  # debian installs shellcheck too
        printf '%s\n' "$step"
    done
}
NEEDS=()
((OFFLINE)) || mapfile -t NEEDS < <(needed)
needs() { [[ " ${NEEDS[*]} " == *" $1 "* ]]; }
# among WORD...: those of WORD... that are in NEEDS.
among() {
    local word
    for word in "$@"; do
        ! needs "$word" || printf '%s ' "$word"
    done
}
INSTALL_PARTS="$(among shellcheck debian impi)"
VENV_TARGETS="$(among lint base lightning conda-channel)"
print_plan() {
    if ((OFFLINE)); then
        printf 'plan: offline: install, start and build nothing\n'
    else
        [[ -z "$INSTALL_PARTS" ]] || printf 'plan: install %s\n' "${INSTALL_PARTS% }"
        ! needs munge || printf 'plan: start munge\n'
        ! needs slurm || printf 'plan: start slurm\n'
        [[ -z "$VENV_TARGETS" ]] || printf 'plan: venvs %s\n' "${VENV_TARGETS% }"
        ! needs readme-install || printf 'plan: readme-install into %s\n' "$SHARED_HOME"
    fi
    printf 'plan: stages %s\n' "${SELECTED[*]}"
}
if ((PLAN_ONLY)); then
    print_plan
    exit 0
fi
ci_python311  # runs ci/junit_summary.py (stdlib only), before any venv exists

# ---- services and venvs ------------------------------------------------------------------------
STARTED=()
stop_started_services() {
    ((KEEP_SERVICES == 0)) || return 0
    local i
    # Reverse order: Slurm before the munge it depends on. Services that ran before us stay up.
    for ((i = ${#STARTED[@]} - 1; i >= 0; i--)); do
        bash "ci/services/${STARTED[i]}.sh" stop || true
    done
}
# Runs a stage started in the background (beside, below): a script's background jobs ignore the terminal's Ctrl-C,
# so an interrupted run ends them (and the pytest each is running) itself.
BESIDE_PIDS=()
BESIDE_LOGS=()
stop_beside() {
    local pid children
    for pid in "${BESIDE_PIDS[@]}"; do
        children="$(pgrep -P "$pid" || true)"
        kill "$pid" 2>/dev/null || true
        # shellcheck disable=SC2086  # a list of process ids
        [[ -z "$children" ]] || kill $children 2>/dev/null || true
    done
}
BACKGROUND_PIDS=()  # a stage running in the background (BACKGROUND_STAGES): ended with the run
stop_background() {
    ((${#BACKGROUND_PIDS[@]})) || return 0
    BESIDE_PIDS=("${BACKGROUND_PIDS[@]}")
    stop_beside
}
trap 'stop_beside; stop_background; stop_started_services' EXIT

# start_service NAME: start ci/services/NAME.sh; remember it only if it was not already running.
start_service() {
    bash "ci/services/$1.sh" status >/dev/null 2>&1 || STARTED+=("$1")
    bash "ci/services/$1.sh" start
}

now() { printf '%s' "$EPOCHREALTIME"; }
disk_free() { df -h --output=avail "$LXPU_REPO_ROOT" | tail -n 1 | tr -d ' '; }
elapsed() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }'; }

RUN_START="$(now)"
if ((OFFLINE)); then
    ci_log "offline: no services, no venv builds; tests whose service is missing skip"
    # Offline lint takes the ruff that is there: the lint venv's, else base's (the same pin).
    [[ -x "$LINT/bin/ruff" ]] || LINT="$BASE"
    [[ " ${SELECTED[*]} " == " lint " ]] || [[ -x "$BASE/bin/python" ]] \
        || ci_die "$BASE/bin/python is missing: build the venvs once with bash ci/venvs.sh (needs PyPI)"
    [[ " ${SELECTED[*]} " != *" lint "* ]] || [[ -x "$LINT/bin/ruff" ]] \
        || ci_die "no ruff in build/venvs: build it once with bash ci/venvs.sh lint (needs PyPI)"
    export LXPU_REQUIRE_SERVICES=0
else
    ci_log "preparing what the stages ${SELECTED[*]} need: $(print_plan | grep -v '^plan: stages' | sed 's/^plan: //' | paste -sd ';' -)"
    # shellcheck disable=SC2086  # word lists of known names
    [[ -z "$INSTALL_PARTS" ]] || bash ci/services/install.sh $INSTALL_PARTS
    ! needs munge || start_service munge
    ! needs slurm || start_service slurm
    # shellcheck disable=SC2086
    [[ -z "$VENV_TARGETS" ]] || bash ci/venvs.sh $VENV_TARGETS
    needs lint || LINT="$BASE"
    export LXPU_REQUIRE_SERVICES=1
fi

export LXPU_PYTHON="$BASE/bin/python"
export LXPU_VENV_DIR="$LXPU_REPO_ROOT/build/venvs/lightning"
export LXPU_IMPI_MPIEXEC="$LXPU_REPO_ROOT/build/venvs/impi/bin/mpiexec"
export LXPU_MPICH_MPIEXEC=/usr/bin/mpiexec.mpich
export LXPU_LMOD_INIT=/usr/share/lmod/lmod/init/bash
export OMP_NUM_THREADS="${OMP_NUM_THREADS:-1}"
SLURM_CONF="$(ci_slurm_conf)"
export SLURM_CONF
if needs impi; then
    [[ -x "$LXPU_IMPI_MPIEXEC" ]] || ci_die "$LXPU_IMPI_MPIEXEC is missing: run bash ci/services/install.sh impi"
fi
if needs debian; then
    [[ -x "$LXPU_MPICH_MPIEXEC" ]] || ci_die "$LXPU_MPICH_MPIEXEC is missing: run bash ci/services/install.sh debian"
    [[ -r "$LXPU_LMOD_INIT" ]] || ci_die "$LXPU_LMOD_INIT is missing: run bash ci/services/install.sh debian"
fi
# make_shared_install: the README's install command, run as the docs test runs it, with a fresh SHARED_HOME (this
# run's checkout, never an older run's install); its output and exit status are recorded beside SHARED_HOME for
# the docs test to check. A failure fails the stages that use it, not the run's preparation.
make_shared_install() {
    local started
    if [[ ! -f tests/docs/readme_install.py ]]; then
        ci_log "no tests/docs/readme_install.py: no shared install (the stages that use one fail)"
        return 0
    fi
    started="$(now)"
    # A previous run's builds are read-only (sealed): make them removable first.
    [[ ! -e "$SHARED_HOME" ]] || chmod -R u+w "$SHARED_HOME"
    rm -rf "$SHARED_HOME"
    ci_log "the README's install command, once for the stages that share it (HOME=$SHARED_HOME)"
    "$BASE/bin/python" -m tests.docs.readme_install "$SHARED_HOME" | tail -n 3 \
        || ci_log "the README's install command FAILED: the stages that use it fail with its output"
    ci_log "shared install made in $(elapsed "$started") s"
    export LXPU_SHARED_INSTALL_HOME="$SHARED_HOME"
}
! needs readme-install || make_shared_install
ci_log "ready after $(elapsed "$RUN_START") s: $(git rev-parse --short HEAD 2>/dev/null || echo 'no git') on $(hostname -s), $(disk_free) free on the disk"

rm -rf "$RESULTS_DIR"
mkdir -p "$RESULTS_DIR/tmp"

# ---- stage helpers -----------------------------------------------------------------------------
STAGE_REPORTS=()  # JUnit reports of the stage now running
STAGE_SKIPPED=""  # set by a stage that has nothing to run: the reason

# present PATH...: the paths among PATH... that exist.
present() {
    local path
    for path in "$@"; do
        [[ ! -e "$path" ]] || printf '%s\n' "$path"
    done
}

# run_pytest VENV ARGS...: pytest from VENV (its bin first on PATH) with a JUnit report. "No tests
# collected" (exit 5) is a failure: a stage whose directory exists must test something. Each run has
# its own --basetemp: pytest deletes old directories of the shared /tmp/pytest-of-<user>, which would
# pull files from under jobs of another pytest running at the same time.
run_pytest() {
    run_pytest_as "$CURRENT_STAGE-$((${#STAGE_REPORTS[@]} + 1))" "$@"
}

# run_pytest_as RUN VENV ARGS...: run_pytest with the report named RUN.
run_pytest_as() {
    local run="$1" venv="$2" report rc=0
    shift 2
    report="$RESULTS_DIR/$run.xml"
    STAGE_REPORTS+=("$report")
    printf -- '--- pytest %s (python: %s)\n' "$*" "$venv/bin/python"
    PATH="$venv/bin:$PATH" VIRTUAL_ENV="$venv" "$venv/bin/python" -m pytest "$@" \
        --junitxml="$report" --timeout="$TIMEOUT" -p no:cacheprovider \
        --basetemp="$RESULTS_DIR/tmp/$run" || rc=$?
    case "$rc" in
        # A passing run's directory goes (its install tests' prefixes are about 1 GiB each; sealed builds are
        # read-only, which stops rm where the run is not root's); a failing run's stays for diagnosis.
        0) chmod -R u+w "$RESULTS_DIR/tmp/$run" 2>/dev/null || true; rm -rf "$RESULTS_DIR/tmp/$run"; return 0 ;;
        5) printf -- '--- FAILED: no tests collected by pytest %s\n' "$*" ;;
        *) printf -- '--- FAILED: pytest %s exited %s\n' "$*" "$rc" ;;
    esac
    return 1
}

# A stage's pytest runs that are mostly one process on one core go side by side on CI's 2 cores.
# beside LOG COMMAND...: COMMAND (run_pytest_as calls, one after another) in the background, its output into
# LOG.log; finish_beside waits for every such command, shows their output and fails if any failed. The reports
# such runs write are registered with expect_report RUN (the background shell's own list is lost).
beside() {
    local log="$RESULTS_DIR/$1.log"
    shift
    "$@" >"$log" 2>&1 &
    BESIDE_PIDS+=("$!")
    BESIDE_LOGS+=("$log")
}
expect_report() {
    STAGE_REPORTS+=("$RESULTS_DIR/$1.xml")
}
finish_beside() {
    local rc=0 index
    for index in "${!BESIDE_PIDS[@]}"; do
        wait "${BESIDE_PIDS[index]}" || rc=1
        cat "${BESIDE_LOGS[index]}"
    done
    BESIDE_PIDS=()
    BESIDE_LOGS=()
    return "$rc"
}

# ---- stages: each returns non-zero on failure, or sets STAGE_SKIPPED -------------------------------
stage_lint() {
    local rc=0 scripts=()
    printf -- '--- ruff check .\n'
    "$LINT/bin/ruff" check . || rc=1
    mapfile -t scripts < <(git ls-files -- '*.sh' .ci/run scripts/common/stage/lightning-xpu-stage)
    printf -- '--- shellcheck on %s files\n' "${#scripts[@]}"
    shellcheck -x "${scripts[@]}" || rc=1
    return "$rc"
}

stage_recipes() {
    local rc=0
    if [[ ! -e recipes/render.py && ! -d tests/recipes ]]; then
        STAGE_SKIPPED="recipes/render.py and tests/recipes not present"
        return 0
    fi
    if [[ -e recipes/render.py ]]; then
        printf -- '--- python recipes/render.py check\n'
        "$BASE/bin/python" recipes/render.py check || rc=1
    fi
    # test_data_only.py runs this stage again in an edited copy (one process tree, mostly one core): beside the rest.
    if [[ -e tests/recipes/test_data_only.py ]]; then
        expect_report "$CURRENT_STAGE-data-only"
        beside "$CURRENT_STAGE-data-only" run_pytest_as "$CURRENT_STAGE-data-only" "$BASE" tests/recipes/test_data_only.py
        run_pytest "$BASE" tests/recipes --ignore=tests/recipes/test_data_only.py || rc=1
        finish_beside || rc=1
    elif [[ -d tests/recipes ]]; then
        run_pytest "$BASE" tests/recipes || rc=1
    fi
    return "$rc"
}

stage_unit() {
    local rc=0 versions=() version
    if [[ ! -d "${STAGE_TESTS[unit]}" ]]; then
        STAGE_SKIPPED="${STAGE_TESTS[unit]} not present"
        return 0
    fi
    mapfile -t versions < <(find "$LXPU_VENV_DIR" -mindepth 1 -maxdepth 1 -printf '%f\n' | sort -V)
    ((${#versions[@]})) || { printf -- '--- FAILED: no venvs in %s: run bash ci/venvs.sh\n' "$LXPU_VENV_DIR"; return 1; }
    # The older venvs' runs are in-process tests on one core (the launches run on the newest only); the newest's is
    # mostly launches of several processes: the older ones run beside it, one at a time.
    local older=("${versions[@]:0:${#versions[@]}-1}")
    for version in "${older[@]}"; do
        expect_report "$CURRENT_STAGE-$version"
    done
    ((${#older[@]} == 0)) || beside "$CURRENT_STAGE-older" unit_in_venvs "${older[@]}"
    run_pytest "$LXPU_VENV_DIR/${versions[-1]}" "${STAGE_TESTS[unit]}" -m "${STAGE_MARKERS[unit]}" || rc=1
    finish_beside || rc=1
    return "$rc"
}

# unit_in_venvs VERSION...: the unit tests in each of these Lightning venvs, one after another.
unit_in_venvs() {
    local version rc=0
    for version in "$@"; do
        run_pytest_as "$CURRENT_STAGE-$version" "$LXPU_VENV_DIR/$version" "${STAGE_TESTS[unit]}" -m "${STAGE_MARKERS[unit]}" || rc=1
    done
    return "$rc"
}

stage_services() {
    local dirs=()
    # shellcheck disable=SC2086  # a list of directories
    mapfile -t dirs < <(present ${STAGE_TESTS[services]})
    if ((${#dirs[@]} == 0)); then
        STAGE_SKIPPED="${STAGE_TESTS[services]} not present"
        return 0
    fi
    run_pytest "$BASE" "${dirs[@]}" -m "${STAGE_MARKERS[services]}"
}

# stage_dir DIR: the stages that are one pytest over one directory.
stage_dir() {
    if [[ ! -d "$1" ]]; then
        STAGE_SKIPPED="$1 not present"
        return 0
    fi
    run_pytest "$BASE" "$1"
}
stage_ci() { stage_dir "${STAGE_TESTS[ci]}"; }
# The multi-node ranks run in an environment the install job built, loaded through its modulefile (issue 5): the
# one the README's install command made before the stages (make_shared_install).
stage_multinode() {
    local prefix="$SHARED_HOME/lightning-xpu" rc=0
    if [[ ! -d tests/multinode ]]; then
        STAGE_SKIPPED="tests/multinode not present"
        return 0
    fi
    printf -- '--- the ranks load the install the README'"'"'s command made in %s\n' "$prefix"
    if [[ ! -f "$prefix/modulefiles/lightning-xpu/2.13-cpu.lua" ]]; then
        printf -- '--- FAILED: no 2.13-cpu install in %s: the README'"'"'s install command failed (see the preparation)\n' "$prefix"
        return 1
    fi
    export LXPU_MULTINODE_MODULE=lightning-xpu/2.13-cpu LXPU_MULTINODE_MODULEPATH="$prefix/modulefiles"
    stage_dir "${STAGE_TESTS[multinode]}" || rc=1
    unset LXPU_MULTINODE_MODULE LXPU_MULTINODE_MODULEPATH
    return "$rc"
}
stage_security() { stage_dir "${STAGE_TESTS[security]}"; }
stage_benchmarks() { stage_dir "${STAGE_TESTS[benchmarks]}"; }
stage_docs() { stage_dir "${STAGE_TESTS[docs]}"; }

# ---- run ---------------------------------------------------------------------------------------
# run_stage STAGE: the stage, timed, with its header, output and closing line. What the summary needs goes into
# files (a stage run in the background keeps no variable of this shell): STAGE.row (its summary line),
# STAGE.reports (its JUnit reports, one a line) and STAGE.failed (present when it failed).
run_stage() {
    CURRENT_STAGE="$1"
    STAGE_REPORTS=()
    STAGE_SKIPPED=""
    local started duration result=passed counts=""
    printf '\n==================== stage %s ====================\n' "$CURRENT_STAGE"
    started="$(now)"
    "stage_$CURRENT_STAGE" || result=FAILED
    duration="$(elapsed "$started")"
    : >"$RESULTS_DIR/$CURRENT_STAGE.reports"
    if [[ -n "$STAGE_SKIPPED" ]]; then
        result=skipped
        counts="not present: $STAGE_SKIPPED"
        printf 'skipped: %s\n' "$counts"
    elif ((${#STAGE_REPORTS[@]})); then
        counts="$("$PYTHON_BIN" ci/junit_summary.py "${STAGE_REPORTS[@]}")"
        printf '%s\n' "${STAGE_REPORTS[@]}" >"$RESULTS_DIR/$CURRENT_STAGE.reports"
    fi
    [[ "$result" != FAILED ]] || : >"$RESULTS_DIR/$CURRENT_STAGE.failed"
    # The disk's free space after each stage: install tests fill it fastest (a full disk fails them all at once).
    printf -- '---- stage %s %s in %s s (%s free on the disk)\n' "$CURRENT_STAGE" "$result" "$duration" "$(disk_free)"
    printf '%-11s %-8s %8s s  %s\n' "$CURRENT_STAGE" "$result" "$duration" "$counts" >"$RESULTS_DIR/$CURRENT_STAGE.row"
}

# is_in WORD LIST...: whether WORD is one of LIST.
is_in() {
    local word="$1"
    shift
    [[ " $* " == *" $word "* ]]
}

# The background stage (one at most): started by start_background, its output shown by join_background.
BACKGROUND_STAGE=""
start_background() {
    BACKGROUND_STAGE="$1"
    printf '\n==================== stage %s: in the background beside %s (its output follows when it ends)\n' \
        "$1" "$2"
    run_stage "$1" >"$RESULTS_DIR/$1.log" 2>&1 &
    BACKGROUND_PIDS=("$!")
}
join_background() {
    [[ -n "$BACKGROUND_STAGE" ]] || return 0
    wait "${BACKGROUND_PIDS[0]}" || true
    BACKGROUND_PIDS=()
    cat "$RESULTS_DIR/$BACKGROUND_STAGE.log"
    BACKGROUND_STAGE=""
}

# beside_next INDEX: the stages selected after SELECTED[INDEX] that may run beside it (the next ones in BESIDE_SERVICES).
beside_next() {
    local stage followers=()
    for stage in "${SELECTED[@]:$1+1}"; do
        is_in "$stage" "${BESIDE_SERVICES[@]}" || break
        followers+=("$stage")
    done
    printf '%s' "${followers[*]}"
}

FAILED_STAGES=0
for index in "${!SELECTED[@]}"; do
    stage="${SELECTED[index]}"
    is_in "$stage" "${BESIDE_SERVICES[@]}" || join_background
    beside="$(beside_next "$index")"
    if is_in "$stage" "${BACKGROUND_STAGES[@]}" && [[ -n "$beside" ]]; then
        start_background "$stage" "$beside"
    else
        run_stage "$stage"
    fi
done
join_background

SUMMARY=()
ALL_REPORTS=()
for stage in "${SELECTED[@]}"; do
    if [[ ! -f "$RESULTS_DIR/$stage.row" ]]; then  # the stage's shell ended before its summary (e.g. killed)
        SUMMARY+=("$(printf '%-11s %-8s %10s  no result: see its output above' "$stage" FAILED -)")
        FAILED_STAGES=$((FAILED_STAGES + 1))
        continue
    fi
    SUMMARY+=("$(cat "$RESULTS_DIR/$stage.row")")
    mapfile -t -O "${#ALL_REPORTS[@]}" ALL_REPORTS <"$RESULTS_DIR/$stage.reports"
    [[ ! -e "$RESULTS_DIR/$stage.failed" ]] || FAILED_STAGES=$((FAILED_STAGES + 1))
done
printf '\n==================== summary ====================\n'
printf '%-11s %-8s %10s  %s\n' stage result duration tests
printf '%s\n' "${SUMMARY[@]}"
# Every skip must be on tests/ci/expected_skips.toml's short, reasoned list: junit_summary.py names each other one on
# stderr and exits 1 (a scratch copy of ci/ without tests/ only counts).
skips=()
[[ ! -f tests/ci/expected_skips.toml ]] || skips=(--expected-skips tests/ci/expected_skips.toml)
skips_ok=1
total="$("$PYTHON_BIN" ci/junit_summary.py "${skips[@]}" "${ALL_REPORTS[@]}")" || skips_ok=0
printf '==================== %s in %s s ====================\n' "$total" "$(elapsed "$RUN_START")"
((skips_ok)) || ci_log "a test was skipped that tests/ci/expected_skips.toml does not list (see above): make it run, or add it there with its reason"
if ((FAILED_STAGES)) || ! ((skips_ok)); then
    ((FAILED_STAGES == 0)) || ci_log "$FAILED_STAGES stage(s) failed: see the FAILED lines above"
    exit 1
fi
