#!/usr/bin/env bash
# Multi-node training under SLURM: one task per node, each running `accelerate launch`, which starts
# that node's ranks; the node rank and the rendezvous address come from SLURM's environment.
#
#   sbatch --nodes 2 scripts/launch_slurm.sh configs/accelerate/zero3.yaml configs/train/demo.yaml [--name value ...]
#
# Every start passes `--resume auto` (a --resume of yours after the configs wins): it continues from
# output_dir/latest when there is a complete checkpoint, else starts fresh.
# Time limit and requeue (both on below; delete the #SBATCH lines to turn them off): 120 s before the
# limit SLURM sends SIGUSR1 to every process of the training step (--signal=USR1@120; not to this
# batch shell, that would be B:USR1); the ranks finish their optimizer step, write checkpoint-N and
# stop, and this script then requeues the job (`scontrol requeue`, needs --requeue), whose next start
# resumes. Only a run that stopped on SIGUSR1 is requeued (its metrics.jsonl ends with an
# `"event": "stopped"` record), never a crash or a success: one that wrote a checkpoint at the step
# reached, or one stopped before its first step (featurisation or loading outlasted the time left)
# when output_dir holds a checkpoint to resume from; with none, requeueing would only start over.
# SIGTERM (scancel, preemption) also saves a checkpoint, and SLURM itself requeues a preempted job
# where it is set up to. A hang (a rank without progress for hang_timeout: metrics.jsonl ends with an
# `"event": "hang"` record) is requeued too when output_dir holds a checkpoint, at most HANG_REQUEUES
# times (3) over the run's life.
# Environment knobs: HANG_REQUEUES (3), GPUS_PER_NODE (default: GPUs visible, else 1 CPU rank), MAIN_PROCESS_PORT
# (29500), MAIN_PROCESS_IP (default: the first host of the allocation), PYTHON (python),
# TORCH_ELASTIC_SHUTDOWN_TIMEOUT (100: seconds the launcher lets its ranks save after a signal before
# SIGKILL; keep it under the --signal lead time).
#SBATCH --job-name=nq-bert-qa
#SBATCH --ntasks-per-node=1
#SBATCH --exclusive
#SBATCH --output=slurm-%j.out
#SBATCH --open-mode=append
#SBATCH --signal=USR1@120
#SBATCH --requeue
set -euo pipefail

if [ "${1:-}" = "-h" ] || [ "${1:-}" = "--help" ]; then
  # The usage is the comment block above, without the #SBATCH lines.
  sed -n '2,/^#SBATCH/{/^#SBATCH/!s/^# \{0,1\}//p}' "$0"
  exit 0
fi
if [ $# -lt 2 ]; then
  echo "usage: sbatch --nodes N $0 ACCELERATE_YAML TRAIN_CONFIG [--name value ...]" >&2
  exit 2
fi
ACCEL_CONFIG=$1; TRAIN_CONFIG=$2; shift 2
PYTHON=${PYTHON:-python}

output_dir() {
  # The training's own reading of the config and overrides, so the batch step finds metrics.jsonl.
  "$PYTHON" - --config "$TRAIN_CONFIG" "$@" <<'EOF'
import sys

from solution.training.config import load_config, parse_command_line

try:
    print(load_config(*parse_command_line(sys.argv[1:], "launch_slurm.sh", "")).output_dir)
except (ValueError, FileNotFoundError) as e:  # as the training would: one line, exit 2
    print(f"error: {e}", file=sys.stderr)
    sys.exit(2)
EOF
}

if [ -z "${SLURM_STEP_ID:-}" ] || [ "${SLURM_STEP_ID}" = "batch" ]; then
  # The batch step: start one task per node, each running this script again; then requeue the job if
  # the training stopped on SIGUSR1 (a new "stopped" record, last in the file) with a checkpoint to resume.
  OUT=$(output_dir "$@")
  METRICS="$OUT/metrics.jsonl"
  SEEN=0
  if [ -f "$METRICS" ]; then SEEN=$(wc -l < "$METRICS"); fi
  RC=0
  srun --ntasks-per-node=1 --kill-on-bad-exit=1 bash "$0" "$ACCEL_CONFIG" "$TRAIN_CONFIG" "$@" || RC=$?
  LAST=""
  if [ -f "$METRICS" ]; then LAST=$(tail -n +$((SEEN + 1)) "$METRICS" | tail -n 1); fi
  if [[ "$LAST" == *'"event": "stopped", "signal": "SIGUSR1"'* ]]; then
    # `latest` is written after every complete checkpoint (before the first step, the stop wrote none).
    if [[ "$LAST" != *'"checkpoint": null'* ]] || [ -f "$OUT/latest" ]; then
      echo "stopped on SIGUSR1: requeueing job $SLURM_JOB_ID; it resumes from $OUT/latest with --resume auto"
      scontrol requeue "$SLURM_JOB_ID"
      exit 0
    fi
    echo "stopped on SIGUSR1 before the first optimizer step, and $OUT holds no checkpoint: not requeueing" \
      "(a new start would only begin again; give the job more time)" >&2
  fi
  if [[ "$LAST" == *'"event": "hang"'* ]] && [ -f "$OUT/latest" ]; then
    # A hang (the watchdog's record: a rank made no progress for hang_timeout) is requeued a few times, not
    # forever: one that recurs at the same place is a bug, not a sick node.
    HANGS=$(grep -c '"event": "hang"' "$METRICS")
    if [ "$HANGS" -le "${HANG_REQUEUES:-3}" ]; then
      echo "a hang ended the run (hang $HANGS of at most ${HANG_REQUEUES:-3}; stacks in $OUT/hang-stacks):" \
        "requeueing job $SLURM_JOB_ID; it resumes from $OUT/latest with --resume auto"
      scontrol requeue "$SLURM_JOB_ID"
      exit 0
    fi
    echo "a hang ended the run again (hang $HANGS, more than HANG_REQUEUES=${HANG_REQUEUES:-3}): not requeueing;" \
      "see the hang: lines and $OUT/hang-stacks" >&2
  fi
  exit "$RC"
fi

NNODES=${SLURM_NNODES:?SLURM_NNODES not set}
NODE_RANK=${SLURM_NODEID:?SLURM_NODEID not set}
if [ -z "${MAIN_PROCESS_IP:-}" ]; then
  MAIN_PROCESS_IP=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)
fi
if [ -z "${GPUS_PER_NODE:-}" ]; then
  GPUS_PER_NODE=$("$PYTHON" -c "import torch; print(max(torch.cuda.device_count(), 1))")
fi
# torch's launcher agent (under accelerate launch) dies on SIGUSR1 unless told to handle it; handled, it
# passes the signal on to its ranks and waits for them, up to the shutdown timeout, before SIGKILL.
export PET_SIGNALS_TO_HANDLE=${PET_SIGNALS_TO_HANDLE:-SIGTERM,SIGINT,SIGHUP,SIGQUIT,SIGUSR1}
export TORCH_ELASTIC_SHUTDOWN_TIMEOUT=${TORCH_ELASTIC_SHUTDOWN_TIMEOUT:-100}
echo "node $NODE_RANK/$NNODES: $GPUS_PER_NODE ranks, rendezvous $MAIN_PROCESS_IP:${MAIN_PROCESS_PORT:-29500}"
# exec: the launcher itself is the task SLURM signals (a bash in between would not pass the signal on).
exec "$PYTHON" -m accelerate.commands.launch --config_file "$ACCEL_CONFIG" \
  --num_machines "$NNODES" --machine_rank "$NODE_RANK" \
  --num_processes $((NNODES * GPUS_PER_NODE)) \
  --main_process_ip "$MAIN_PROCESS_IP" --main_process_port "${MAIN_PROCESS_PORT:-29500}" \
  -m solution.train --config "$TRAIN_CONFIG" --resume auto "$@"
