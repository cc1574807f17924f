# shellcheck shell=bash
# The shared part of the training job scripts in scripts/<site>/, which source it: --help, the working directory
# and the environment (what must happen in the job's shell); the node count, the threads, the launch into a log
# and the check that the Trainer used the expected device: lightning_xpu/commands/job.py.
# Settings (environment variables; a job script sets its site's defaults only where you have not):
#   LIGHTNING_XPU_MODULE, LIGHTNING_XPU_MODULEPATH  the module to load (lightning-xpu/2.13; lightning-xpu/2.13-cpu is
#                 a CPU build) and where it is (<install prefix>/modulefiles)
#   LIGHTNING_XPU_SETUP  a setup script to source instead (<install prefix>/lightning-setup-<tag>.sh; without Lmod)
#   LIGHTNING_XPU_TRAIN  your training script (default: train.py in the working directory), run as python TRAIN
#                 --devices <ranks per node> --num-nodes <nodes> [ARGS...]: the job script's own arguments, then the
#                 words of LIGHTNING_XPU_TRAIN_ARGS (for qsub -v)
#   LIGHTNING_XPU_EXPECT  xpu or cpu: the device the Trainer's banner must show (default: cpu for a CPU build, by
#                 the install's manifest, or a module or setup script name ending in -cpu; else xpu)
#   LIGHTNING_XPU_REPO  this clone, where a job script run from elsewhere (a scheduler's copy) finds this file

lxpu_job_die() { printf '%s: %s\n' "$LXPU_JOB_NAME" "$*" >&2; exit 2; }

# lxpu_job_start SCRIPT RANKS_PER_NODE CORES_PER_RANK ARGS...: --help (SCRIPT's first comment block); else the
# working directory, the environment and LXPU_JOB_NODES. ARGS go to the training script.
lxpu_job_start() {
  export LXPU_JOB_NAME=${SLURM_JOB_NAME:-${PBS_JOBNAME:-${1##*/}}}  # the scheduler runs a copy of the script
  if [[ "${4:-}" == "-h" || "${4:-}" == "--help" ]]; then
    sed -n '2,/^[^#]/{/^#\(SBATCH\|PBS\)/d;/^#/!d;s/^# \{0,1\}//;p}' "$1"; exit 0
  fi
  [[ "$2" =~ ^[1-9][0-9]*$ && "$3" =~ ^[1-9][0-9]*$ ]] ||
    lxpu_job_die "ranks per node '$2' or cores per rank '$3' is not a count: submit the job script with its scheduler (sbatch, qsub) as its header says"
  LXPU_JOB_SHAPE=("$2" "$3") LXPU_JOB_ARGS=("${@:4}")
  # The submit directory (lightning_xpu/commands/allocation.py says why), first: a relative setup script is there.
  local dir=${PBS_O_WORKDIR:-${SLURM_SUBMIT_DIR:-$PWD}} init=${LMOD_PKG:-/usr/share/lmod/lmod}/init/bash
  cd "$dir" || lxpu_job_die "cannot enter the working directory $dir"
  if [[ -n "${LIGHTNING_XPU_SETUP:-}" ]]; then
    [[ -f "$LIGHTNING_XPU_SETUP" ]] ||
      lxpu_job_die "LIGHTNING_XPU_SETUP=$LIGHTNING_XPU_SETUP is not a file: give an install's <prefix>/lightning-setup-<tag>.sh"
    # shellcheck source=/dev/null
    source "$LIGHTNING_XPU_SETUP"
  else
    # shellcheck source=/dev/null
    declare -F module >/dev/null || [[ ! -f "$init" ]] || source "$init"  # a batch shell may not have Lmod's yet
    declare -F module >/dev/null || lxpu_job_die "no module command and no Lmod at $init: set LMOD_PKG, or LIGHTNING_XPU_SETUP"
    module use "$LIGHTNING_XPU_MODULEPATH"; module load "$LIGHTNING_XPU_MODULE"
  fi
  command -v python >/dev/null || lxpu_job_die "the environment put no python on PATH: check the module or setup script"
  # An environment installed from a checkout before lightning_xpu's split by role has the job tool under its old name.
  LXPU_JOB_TOOL=lightning_xpu.commands.job
  python -c "import $LXPU_JOB_TOOL" 2>/dev/null || LXPU_JOB_TOOL=lightning_xpu.report.job
  LXPU_JOB_NODES=$(python -m "$LXPU_JOB_TOOL" nodes) || exit
}

# lxpu_job_launch LAUNCHER...: every rank runs the training command under LAUNCHER... (lightning_xpu/commands/job.py).
lxpu_job_launch() {
  python -m "$LXPU_JOB_TOOL" launch "${LXPU_JOB_SHAPE[@]}" "$LXPU_JOB_NODES" "${#LXPU_JOB_ARGS[@]}" \
    "${LXPU_JOB_ARGS[@]}" "$@"
}
