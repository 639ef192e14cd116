#!/usr/bin/env bash
# The GPU check on a bare GPU machine without network, as one command:
#
#   bash scripts/gpu_run.sh --out DIR [--pack FILE] [--work WORK] [--bundle .gpu-bundle] [--budget-s 450]
#                           [gpu_check.py options]
#   bash scripts/gpu_run.sh --out /tmp/gpu --pack $OUT/gpu.tgz --parts recipe --budget-s 530  # the recipe alone
#
# 1. installs the bundle's wheels (scripts/make_gpu_bundle.py: deepspeed and what it imports that the image
#    lacks) offline into WORK/site (`pip install --no-index --no-deps --target`; where the image has no pip,
#    the wheels are unpacked there, which is what that install does for them), put first on PYTHONPATH;
# 2. prints the versions it got and stops (exit 3) when torch, transformers, accelerate or deepspeed is
#    outside the range the project supports (scripts/gpu_check.py --check-versions);
# 3. runs scripts/gpu_check.py within --budget-s seconds (default 450: with the install, well inside the
#    device tool's 10 minutes a command), with the bundle's MiniLM and NQ lines.
# DIR gets the small files: versions.json, gpu_check.json (rewritten as each part finishes), one NAME.log per
# part, the predictions, and gpu_run.log (this script's own output). The installed wheels and the runs' folders
# (BERT-base models of 440 MB) go to WORK (default ${TMPDIR:-/tmp}/gpu_run), outside DIR, which the device tool
# copies back. --pack FILE writes DIR as one .tgz when the script ends, however it ends short of a kill: the
# device tool brings back at most 8 files, and the recipe part alone writes 13 (a log a command, OUT/recipe).
# The device call: run(carry=[".gpu-bundle"], timeout_s=600,
#                      command="bash scripts/gpu_run.sh --out /tmp/gpu --pack $OUT/gpu.tgz --parts recipe --budget-s 530
#                               --recipe-batch 32 --recipe-pages 32000").
# Exit: gpu_check's own status (0 every run passed); 2 a bad argument (--work inside --out, --pack inside it) or
# no bundle; 3 versions outside the supported range; 4 the wheels did not install; 5 nothing ran (gpu_check
# wrote no JSON) or the --pack tar failed: nothing would come back from the machine.
set -uo pipefail

self="$(cd "$(dirname "$0")" && pwd)/$(basename "$0")"
cd "$(dirname "$0")/.."
out="" pack="" work="${TMPDIR:-/tmp}/gpu_run" bundle=".gpu-bundle" budget=450 rest=()
while [ $# -gt 0 ]; do
  case "$1" in
    --out) out="$2"; shift 2 ;;
    --pack) pack="$2"; shift 2 ;;
    --bundle) bundle="$2"; shift 2 ;;
    --work) work="$2"; shift 2 ;;
    --budget-s) budget="$2"; shift 2 ;;
    -h|--help) sed -n '2,25p' "$self" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) rest+=("$1"); shift ;;
  esac
done
if [ -z "$out" ]; then
  echo "usage: bash scripts/gpu_run.sh --out DIR [--pack FILE] [--work WORK] [--bundle .gpu-bundle] [--budget-s 450] [gpu_check.py options]" >&2
  exit 2
fi
# Resolved before anything is made: WORK holds the wheels and the runs' models, which must not be packed.
out="$(realpath -m "$out")" work="$(realpath -m "$work")"
case "$work/" in
  "$out"/*) echo "error: --work $work lies inside --out $out: the wheels and the runs' models would be packed" \
                 "with the results; give a folder outside it" >&2; exit 2 ;;
esac
mkdir -p "$out" "$work"
if [ -n "$pack" ]; then
  mkdir -p "$(dirname "$pack")"
  pack="$(cd "$(dirname "$pack")" && pwd)/$(basename "$pack")"
  case "$pack/" in "$out"/*) echo "error: --pack $pack lies inside --out $out" >&2; exit 2 ;; esac
fi
tee_pid=""
pack_out() {  # on any exit: the logs, the JSON as last written and OUT/recipe, in one file
  local code=$?
  exec 1>&3 2>&4  # the pipe to tee closes: it writes gpu_run.log's last lines and ends
  [ -n "$tee_pid" ] && wait "$tee_pid" 2> /dev/null
  if tar czf "$pack" -C "$(dirname "$out")" "$(basename "$out")"; then
    echo "gpu_run: packed $out into $pack"
  else  # the one file that comes back from the machine: its absence must not pass for a success
    echo "error: --pack $pack: tar failed; nothing of $out comes back (its files are still on this machine)" >&2
    [ "$code" -eq 0 ] && code=5
  fi
  exit "$code"
}
exec 3>&1 4>&2
[ -n "$pack" ] && trap pack_out EXIT
exec > >(tee -a "$out/gpu_run.log") 2>&1
tee_pid=$!
echo "gpu_run: $(date -u +%FT%TZ) on $(hostname); bundle $bundle; budget ${budget}s; out $out; work $work"
command -v nvidia-smi > /dev/null && nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader

python=""
for candidate in python3 python; do  # the image's interpreter: the first that has torch
  if command -v "$candidate" > /dev/null && "$candidate" -c "import torch" 2> /dev/null; then
    python=$(command -v "$candidate"); break
  fi
done
if [ -z "$python" ]; then
  echo "error: no python3 or python here imports torch" >&2
  exit 2
fi
echo "gpu_run: $python ($("$python" --version 2>&1))"
if [ ! -d "$bundle/wheels" ]; then
  echo "error: $bundle/wheels missing: make it with python scripts/make_gpu_bundle.py --out $bundle and carry it" >&2
  exit 2
fi
site="$work/site"
rm -rf "$site"
t0=$(date +%s)
install_wheels() {
  if "$python" -m pip --version > /dev/null 2>&1; then
    "$python" -m pip install --quiet --no-index --no-deps --disable-pip-version-check --target "$site" \
      "$bundle"/wheels/*.whl
    return
  fi
  echo "gpu_run: no pip here; unpacking the wheels into $site"
  local wheel
  for wheel in "$bundle"/wheels/*.whl; do
    "$python" -m zipfile -e "$wheel" "$site" || return 1
  done
}
if ! install_wheels; then
  echo "error: installing the bundle's wheels into $site failed" >&2
  exit 4
fi
echo "gpu_run: installed $(ls "$bundle"/wheels/*.whl | wc -l) wheels into $site in $(( $(date +%s) - t0 ))s"
export PYTHONPATH="$site${PYTHONPATH:+:$PYTHONPATH}"
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1   # no network: never reach for a model hub
export PATH="$site/bin:$PATH"                     # deepspeed's and ninja's commands

"$python" scripts/gpu_check.py --check-versions --out "$out" || exit $?
json="$out/gpu_check.json" started="$work/started"
for ((i = 0; i < ${#rest[@]}; i++)); do [ "${rest[$i]}" = --json ] && json="${rest[$((i + 1))]:-$json}"; done
touch "$started"  # a gpu_check.json of an earlier run in OUT is older than this
"$python" scripts/gpu_check.py --out "$out" --work "$work/runs" --budget-s "$budget" --backbone "$bundle/minilm" \
  --data "$bundle/data/nq-real" ${rest[@]+"${rest[@]}"}
code=$?
echo "gpu_run: gpu_check exit $code after $(( $(date +%s) - t0 ))s; results in $json"
if [ ! "$json" -nt "$started" ]; then  # no CUDA, or it stopped before its first run: nothing was measured
  echo "error: nothing ran: gpu_check wrote no $json (its output is above)" >&2
  [ "$code" -eq 0 ] && code=5
fi
exit $code
