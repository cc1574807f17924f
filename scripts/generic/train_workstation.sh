#!/usr/bin/env bash
# A workstation (one or more Intel Arc cards, no scheduler): Lightning starts one process per card itself. Run
# it from the directory of your train.py: bash "$LIGHTNING_XPU_REPO/scripts/generic/train_workstation.sh" [ARGS]
# It runs python train.py --devices <LIGHTNING_XPU_DEVICES, default 1> --num-nodes 1 [ARGS], the cores shared out
# (OMP_NUM_THREADS), and fails unless the Trainer used the XPU. Settings: the LIGHTNING_XPU_* variables listed in
# scripts/common/job.sh (default setup script ~/lightning-xpu/lightning-setup-2.13.sh: no Lmod needed).
set -euo pipefail
: "${LIGHTNING_XPU_SETUP:=$HOME/lightning-xpu/lightning-setup-2.13.sh}" "${LIGHTNING_XPU_DEVICES:=1}"
# shellcheck source=scripts/common/job.sh
source "${LIGHTNING_XPU_REPO:-$(dirname "${BASH_SOURCE[0]}")/../..}/scripts/common/job.sh"
lxpu_job_start "$0" "$LIGHTNING_XPU_DEVICES" "$(($(nproc) / LIGHTNING_XPU_DEVICES))" "$@"
lxpu_job_launch env  # no launcher: Lightning starts the processes
