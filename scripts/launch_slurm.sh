#!/usr/bin/env bash
# Multi-node training under SLURM: one task per node, each running `accelerate launch`, which starts
# that node's ranks; the node rank and the rendezvous address come from SLURM's environment.
#
#   sbatch --nodes 2 scripts/launch_slurm.sh configs/accelerate/zero3.yaml configs/train/demo.yaml [--name value ...]
#
# Environment knobs: GPUS_PER_NODE (default: GPUs visible, else 1 CPU rank), MAIN_PROCESS_PORT
# (29500), MAIN_PROCESS_IP (default: the first host of the allocation), PYTHON (python).
#SBATCH --job-name=nq-bert-qa
#SBATCH --ntasks-per-node=1
#SBATCH --exclusive
#SBATCH --output=slurm-%j.out
set -euo pipefail

if [ "${1:-}" = "-h" ] || [ "${1:-}" = "--help" ]; then
  # The usage is the comment block above, without the #SBATCH lines.
  sed -n '2,8s/^# \{0,1\}//p' "$0"
  exit 0
fi
if [ $# -lt 2 ]; then
  echo "usage: sbatch --nodes N $0 ACCELERATE_YAML TRAIN_CONFIG [--name value ...]" >&2
  exit 2
fi
ACCEL_CONFIG=$1; TRAIN_CONFIG=$2; shift 2

if [ -z "${SLURM_STEP_ID:-}" ] || [ "${SLURM_STEP_ID}" = "batch" ]; then
  # The batch step: start one task per node, each running this script again.
  exec srun --ntasks-per-node=1 --kill-on-bad-exit=1 bash "$0" "$ACCEL_CONFIG" "$TRAIN_CONFIG" "$@"
fi

PYTHON=${PYTHON:-python}
NNODES=${SLURM_NNODES:?SLURM_NNODES not set}
NODE_RANK=${SLURM_NODEID:?SLURM_NODEID not set}
if [ -z "${MAIN_PROCESS_IP:-}" ]; then
  MAIN_PROCESS_IP=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)
fi
if [ -z "${GPUS_PER_NODE:-}" ]; then
  GPUS_PER_NODE=$("$PYTHON" -c "import torch; print(max(torch.cuda.device_count(), 1))")
fi
echo "node $NODE_RANK/$NNODES: $GPUS_PER_NODE ranks, rendezvous $MAIN_PROCESS_IP:${MAIN_PROCESS_PORT:-29500}"
exec "$PYTHON" -m accelerate.commands.launch --config_file "$ACCEL_CONFIG" \
  --num_machines "$NNODES" --machine_rank "$NODE_RANK" \
  --num_processes $((NNODES * GPUS_PER_NODE)) \
  --main_process_ip "$MAIN_PROCESS_IP" --main_process_port "${MAIN_PROCESS_PORT:-29500}" \
  -m solution.train --config "$TRAIN_CONFIG" "$@"
