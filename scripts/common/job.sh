# shellcheck shell=bash
# The shared part of the training job scripts in scripts/<site>/ (train_*.sbatch on Dawn, train_*.pbs on Aurora,
# train_*.sh on a workstation). They source this file; it does nothing by itself. Everything sites do the same
# way lives here once: --help, the working directory, loading the environment, thread settings, running the
# launch into a log, and checking in that log that the Trainer used the device the job asked for.
#
# Settings (environment variables; a job script sets its site's defaults only where you have not):
#   LIGHTNING_XPU_MODULE      the module to load (lightning-xpu/2.13; lightning-xpu/2.13-cpu is a CPU build)
#   LIGHTNING_XPU_MODULEPATH  where that module is (<install prefix>/modulefiles), for `module use`
#   LIGHTNING_XPU_SETUP       a setup script to source instead of loading the module
#                             (<install prefix>/lightning-setup-<tag>.sh; for shells without Lmod)
#   LIGHTNING_XPU_TRAIN       your training script (default: train.py in the working directory). It is run as
#                             python TRAIN --devices <ranks per node> --num-nodes <nodes> [ARGS...], ARGS being
#                             the job script's own arguments, then the words of LIGHTNING_XPU_TRAIN_ARGS (for qsub -v)
#   LIGHTNING_XPU_EXPECT      xpu or cpu: the device the Trainer's banner must show (default: cpu for a module or
#                             setup script whose name ends in -cpu, else xpu); anything else fails the job
#   LIGHTNING_XPU_REPO        this clone of lightning-xpu, where the job scripts find this file when they are not
#                             run from inside the clone

# The line the Trainer's banner prints when the fit runs on an XPU (lightning_xpu/trainer.py); the job log is
# checked against it, and tests/runtime/test_job_device_check.py checks it against the real banner.
LXPU_JOB_XPU_USED='XPU available: True \([0-9]+ devices?\), used: True'
LXPU_JOB_BANNER='GPU available: '

lxpu_job_say() { printf '%s: %s\n' "${LXPU_JOB_NAME:-job}" "$*"; }

lxpu_job_die() {
  printf '%s: %s\n' "${LXPU_JOB_NAME:-job}" "$*" >&2
  exit 2
}

# lxpu_job_help SCRIPT: the comment block at the top of SCRIPT, without the shebang and scheduler lines.
lxpu_job_help() {
  sed -n '2,/^[^#]/{/^#\(SBATCH\|PBS\)/d;/^#/!d;s/^# \{0,1\}//;p}' "$1"
}

# lxpu_job_start SCRIPT RANKS_PER_NODE CORES_PER_RANK ARGS...: --help; else the working directory, the
# environment, the node count, the threads and the training command (ARGS go to the training script).
lxpu_job_start() {
  local script=$1 ranks=$2 cores=$3
  shift 3
  LXPU_JOB_NAME=${SLURM_JOB_NAME:-${PBS_JOBNAME:-${script##*/}}}  # the scheduler runs a copy of the script
  if [[ "${1:-}" == "-h" || "${1:-}" == "--help" ]]; then
    lxpu_job_help "$script"
    exit 0
  fi
  [[ "$ranks" =~ ^[1-9][0-9]*$ && "$cores" =~ ^[1-9][0-9]*$ ]] ||
    lxpu_job_die "ranks per node '$ranks' or cores per rank '$cores' is not a count: submit the job script with its scheduler (sbatch, qsub) as its header says"
  lxpu_job_workdir
  lxpu_job_environment
  lxpu_job_nodes
  lxpu_job_threads "$cores"
  lxpu_job_train "$ranks" "$@"
  lxpu_job_say "devices: ZE_FLAT_DEVICE_HIERARCHY=${ZE_FLAT_DEVICE_HIERARCHY-unset} ZE_AFFINITY_MASK=${ZE_AFFINITY_MASK-unset} SLURM_GPUS_ON_NODE=${SLURM_GPUS_ON_NODE-unset}"
}

# PBS Pro starts a job in $HOME and names the submit directory PBS_O_WORKDIR; Slurm starts it in the submit
# directory. Debian's Torque wrapper over Slurm (slurm-wlm-torque) sets no PBS_O_WORKDIR: fall back to Slurm's.
lxpu_job_workdir() {
  local dir from
  if [[ -n "${PBS_O_WORKDIR:-}" ]]; then
    dir=$PBS_O_WORKDIR from="PBS_O_WORKDIR, set by the scheduler"
  elif [[ -n "${SLURM_SUBMIT_DIR:-}" ]]; then
    dir=$SLURM_SUBMIT_DIR from="SLURM_SUBMIT_DIR: PBS_O_WORKDIR is not set"
  else
    dir=$PWD from="the current directory: no scheduler"
  fi
  cd "$dir" || lxpu_job_die "cannot enter the working directory $dir"
  lxpu_job_say "working directory: $dir (from $from)"
}

lxpu_job_environment() {
  local init
  if [[ -n "${LIGHTNING_XPU_SETUP:-}" ]]; then
    [[ -f "$LIGHTNING_XPU_SETUP" ]] ||
      lxpu_job_die "LIGHTNING_XPU_SETUP=$LIGHTNING_XPU_SETUP is not a file: give an install's <prefix>/lightning-setup-<tag>.sh"
    # shellcheck source=/dev/null
    source "$LIGHTNING_XPU_SETUP"
    lxpu_job_say "environment: setup script $LIGHTNING_XPU_SETUP"
  else
    if ! declare -F module >/dev/null; then  # a batch shell may not have Lmod's function yet
      init="${LMOD_PKG:-/usr/share/lmod/lmod}/init/bash"
      [[ -f "$init" ]] || lxpu_job_die "no module command and no Lmod at $init: set LMOD_PKG, or LIGHTNING_XPU_SETUP"
      # shellcheck source=/dev/null
      source "$init"
    fi
    module use "$LIGHTNING_XPU_MODULEPATH"
    module load "$LIGHTNING_XPU_MODULE"
    lxpu_job_say "environment: module $LIGHTNING_XPU_MODULE from $LIGHTNING_XPU_MODULEPATH"
  fi
  command -v python >/dev/null || lxpu_job_die "the environment put no python on PATH: check the module or setup script"
  LXPU_JOB_TRAIN=${LIGHTNING_XPU_TRAIN:-train.py}
  [[ -f "$LXPU_JOB_TRAIN" ]] ||
    lxpu_job_die "no training script $LXPU_JOB_TRAIN in $PWD: submit from its directory or set LIGHTNING_XPU_TRAIN"
}

# lxpu_job_nodes: LXPU_JOB_NODES, the number of nodes of the job (PBS node file, else Slurm's count, else 1).
lxpu_job_nodes() {
  local from
  if [[ -n "${PBS_NODEFILE:-}" ]]; then
    LXPU_JOB_NODES=$(sort -u "$PBS_NODEFILE" | wc -l) from="PBS_NODEFILE"
  elif [[ -n "${SLURM_JOB_NUM_NODES:-}" ]]; then
    LXPU_JOB_NODES=$SLURM_JOB_NUM_NODES from="SLURM_JOB_NUM_NODES: PBS_NODEFILE is not set"
  else
    LXPU_JOB_NODES=1 from="no scheduler"
  fi
  lxpu_job_say "nodes: $LXPU_JOB_NODES (from $from)"
}

# lxpu_job_threads CORES: CORES is what each rank is bound to. The rank's own threads get them
# (OMP_NUM_THREADS, unless you set it); PyTorch gives each DataLoader worker one thread.
lxpu_job_threads() {
  export OMP_NUM_THREADS="${OMP_NUM_THREADS:-$1}"
  lxpu_job_say "threads: $1 cores per rank, OMP_NUM_THREADS=$OMP_NUM_THREADS; DataLoader num_workers up to $(($1 > 2 ? $1 - 2 : 0))"
}

# lxpu_job_train RANKS_PER_NODE ARGS...: LXPU_JOB_COMMAND, the training command every rank runs.
lxpu_job_train() {
  local ranks=$1 extra=()
  shift
  read -r -a extra <<<"${LIGHTNING_XPU_TRAIN_ARGS:-}"
  LXPU_JOB_COMMAND=(python "$LXPU_JOB_TRAIN" --devices "$ranks" --num-nodes "$LXPU_JOB_NODES" "$@" "${extra[@]}")
}

# lxpu_job_launch LAUNCHER...: runs LAUNCHER... LXPU_JOB_COMMAND, its output also into a log, then checks the log.
lxpu_job_launch() {
  local log="lxpu-train-${SLURM_JOB_ID:-${PBS_JOBID:-$$}}.log"
  lxpu_job_say "launch: $(printf '%q ' "$@" "${LXPU_JOB_COMMAND[@]}")"
  lxpu_job_say "launcher: $(command -v "${1:-python}")"
  lxpu_job_say "log: $PWD/$log"
  "$@" "${LXPU_JOB_COMMAND[@]}" 2>&1 | tee "$log"
  lxpu_job_check_device "$log"
}

# lxpu_job_check_device LOG: the Trainer's banner in LOG shows the device the job expected.
lxpu_job_check_device() {
  local log=$1 expect=${LIGHTNING_XPU_EXPECT:-} line
  if [[ -z "$expect" ]]; then
    case "${LIGHTNING_XPU_SETUP:-${LIGHTNING_XPU_MODULE:-}}" in
      *-cpu | *-cpu.sh) expect=cpu ;;
      *) expect=xpu ;;
    esac
  fi
  line=$(grep -Em1 "$LXPU_JOB_XPU_USED" "$log" || true)
  case "$expect" in
    xpu)
      [[ -n "$line" ]] || lxpu_job_die "device check FAILED: $log has no '$LXPU_JOB_XPU_USED' line: the fit did not run on an XPU (see the banner lines above, and docs/xpu-guide.md)"
      ;;
    cpu)
      [[ -z "$line" ]] || lxpu_job_die "device check FAILED: expected cpu, but the Trainer used an XPU: $line"
      line=$(grep -m1 "$LXPU_JOB_BANNER" "$log" || true)
      [[ -n "$line" ]] || lxpu_job_die "device check FAILED: $log has no Trainer banner ('$LXPU_JOB_BANNER...'): did the fit start?"
      ;;
    *) lxpu_job_die "LIGHTNING_XPU_EXPECT=$expect: use xpu or cpu" ;;
  esac
  lxpu_job_say "device check passed ($expect): $line"
}
