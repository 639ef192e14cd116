"""The GPU path in one command: every strategy, fp16, memory, throughput and MFU, prediction and hard negatives.

    python scripts/gpu_check.py [--json FILE] [--peak-tflops T] [--dry-run]

On a machine with CUDA, on one GPU, it runs (each as the command a user types):

- a short bfloat16 training of BERT-base at 512 pieces (configs/train/bench_base.yaml,
  random windows so the figures are compute, not I/O) as one process with `--strategy`
  single (no launcher: under one, Accelerate wraps the model in DDP), and zero2, zero3 and
  fsdp under torchrun `--nproc_per_node 1` (ddp needs two GPUs: run only when two are
  visible, otherwise skipped saying so);
- the same training in fp16 (strategy single), where Accelerate scales the loss with a
  GradScaler; the scale it ends on is recorded;
- per run: peak GPU memory (`torch.cuda.max_memory_allocated`, read by a small wrapper
  around the trainer's entry point), the trainer's model-state bytes (`--measure_memory`),
  samples/s and tokens/s (median step time after the warm-up steps) and the model FLOPs
  utilisation MFU = 6 x parameters x tokens/s / the device's peak dense bf16 FLOP/s
  (looked up from the device name: H100 SXM and H200 989 TFLOP/s, H100 PCIe 756, A100 312;
  or `--peak-tflops`). 6 x parameters counts the matmuls of forward and backward and leaves
  attention's own products out, so it slightly understates the work done at 512 pieces;
- `python -m submission.predict` on the real NQ dev lines with `--device cuda`, and the
  hard-negative pass (`python -m solution.hard_negatives`, with `--device cuda` where it has
  that option) on the real training lines, both with the single run's model.

On a machine without CUDA it prints one line saying so and exits 0. `--dry-run` prints the
commands it would launch, on any machine, and exits 0.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from solution.distributed.ports import free_port  # noqa: E402

REAL = ROOT.parent / "shared" / "data" / "nq-real"
STRATEGIES = ["single", "zero2", "zero3", "fsdp"]
# Peak dense (no sparsity) bf16 tensor-core FLOP/s, from the vendors' data sheets; first match wins.
PEAK_TFLOPS = [("H100 PCIe", 756.0), ("H100 NVL", 835.0), ("H100", 989.0), ("H200", 989.0), ("GH200", 989.0),
               ("A100", 312.0)]
NO_CUDA = "gpu_check: no CUDA device here (torch.cuda.is_available() is False); nothing to check, exiting 0"

# Runs the trainer's own entry point and, at exit, writes this process's peak GPU memory and the
# loss scale of any GradScaler it used: the trainer itself has no such reading, and this keeps it so.
WRAPPER = r"""
import atexit, json, runpy, sys
import torch
out = sys.argv.pop(1)
state = {}
_update = torch.amp.GradScaler.update
def update(self, new_scale=None):
    result = _update(self, new_scale)
    state["loss_scale"] = float(self.get_scale())
    state["scaler_updates"] = state.get("scaler_updates", 0) + 1
    return result
torch.amp.GradScaler.update = update
def dump():
    state.update(max_memory_allocated_bytes=torch.cuda.max_memory_allocated(),
                 max_memory_reserved_bytes=torch.cuda.max_memory_reserved())
    with open(out, "w") as f:
        json.dump(state, f)
atexit.register(dump)
sys.argv[0] = "solution.train"
runpy.run_module("solution.train", run_name="__main__", alter_sys=True)
"""


def build_parser() -> argparse.ArgumentParser:
    sys.path.insert(0, str(ROOT))
    from solution.common import cli  # both --a-b and --a_b spellings
    p = cli.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    p.add_argument("--json", default=None, help="write every figure here")
    p.add_argument("--out", default="runs/gpu_check", help="run directories and logs")
    p.add_argument("--config", default="configs/train/bench_base.yaml", help="BERT-base-size training config")
    p.add_argument("--strategies", default=",".join(STRATEGIES), help="bf16 trainings, one process each")
    p.add_argument("--max-seq-length", type=int, default=512)
    p.add_argument("--batch-size", type=int, default=16, help="per_device_train_batch_size")
    p.add_argument("--steps", type=int, default=30, help="optimizer steps per training")
    p.add_argument("--warmup", type=int, default=5, help="steps left out of the timing")
    p.add_argument("--peak-tflops", type=float, default=None,
                   help="the GPU's peak dense bf16 TFLOP/s for MFU (default: looked up from the device name)")
    p.add_argument("--timeout", type=int, default=900, help="seconds each command may run")
    p.add_argument("--dry-run", action="store_true", help="print the commands it would launch and exit 0")
    return p


def train_command(args, name: str, strategy: str, precision: str, nproc: int, probe: Path) -> list:
    """The wrapper around `solution.train`: a plain process for `single`, under torchrun for the others."""
    seq = args.max_seq_length
    overrides = ["--config", args.config, "--strategy", strategy, "--mixed_precision", precision,
                 "--data_source", "dummy", "--dummy_num_windows", str(args.batch_size * nproc * args.steps),
                 "--max_steps", str(args.steps), "--per_device_train_batch_size", str(args.batch_size),
                 # 64-token questions and BERT-joint's step of 128 pieces, as the real-data recipe.
                 "--max_seq_length", str(seq), "--max_question_length", str(seq // 8),
                 "--doc_stride", str(seq - seq // 8 - 3 - seq // 4),
                 "--measure_memory", "true", "--logging_steps", "1", "--output_dir", str(Path(args.out) / name)]
    command = [sys.executable, "-c", WRAPPER, str(probe), *overrides]
    if strategy == "single":
        # Under a launcher, even with one rank, Accelerate wraps the model in DDP, and the trainer
        # refuses `single` with another engine: single is one process without a launcher.
        return command
    return [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", str(nproc),
            "--master_port", str(free_port()), "--no-python", *command]


def hard_negatives_has_device() -> bool:
    r = subprocess.run([sys.executable, "-m", "solution.hard_negatives", "--help"], cwd=ROOT, capture_output=True,
                       text=True)
    return "--device" in r.stdout


def plan(args, gpus: int, probes: Path, hn_device: bool) -> tuple:
    """(the commands, by name; what is skipped and why)."""
    runs, skipped = {}, []
    for strategy in args.strategies.split(","):
        runs[f"bf16-{strategy}"] = ("train", train_command(args, f"bf16-{strategy}", strategy, "bf16", 1,
                                                           probes / f"bf16-{strategy}.json"))
    if gpus >= 2:
        runs["bf16-ddp-2gpus"] = ("train", train_command(args, "bf16-ddp-2gpus", "ddp", "bf16", 2,
                                                         probes / "bf16-ddp-2gpus.json"))
    else:
        skipped.append({"run": "bf16-ddp", "why": f"DDP needs two GPUs; {gpus} visible"})
    runs["fp16-single"] = ("train", train_command(args, "fp16-single", "single", "fp16", 1, probes / "fp16-single.json"))
    model = str(Path(args.out) / "bf16-single" / "model")
    runs["predict"] = ("predict", [sys.executable, "-m", "submission.predict", "--model", model, "--input",
                                   str(REAL / "simplified-nq-dev-sample.jsonl"), "--output",
                                   str(Path(args.out) / "dev.csv"), "--device", "cuda", "--precision", "auto"])
    hn = [sys.executable, "-m", "solution.hard_negatives", "--model", model, "--train_file",
          str(REAL / "simplified-nq-train-sample.jsonl"), "--out", str(Path(args.out) / "hard-negatives.jsonl"),
          "--bf16"]
    if hn_device:
        hn += ["--device", "cuda"]
    else:
        skipped.append({"run": "hard_negatives --device cuda",
                        "why": "solution.hard_negatives has no --device option yet: it runs on the CPU"})
    runs["hard_negatives"] = ("hard_negatives", hn)
    return runs, skipped


def peak_tflops(device_name: str, override) -> tuple:
    if override:
        return override, "--peak-tflops"
    for key, tflops in PEAK_TFLOPS:
        if key.lower() in device_name.lower():
            return tflops, f"looked up from the device name ({key})"
    return None, f"unknown device {device_name!r}: pass --peak-tflops for MFU"


def shown(cmd: list) -> str:
    """The command as a user would read it: `python` for the interpreter, the wrapper's code named, not printed."""
    wrapper = "'<wrapper: runs solution.train, records peak GPU memory>'"
    return " ".join("python" if c == sys.executable else wrapper if c == WRAPPER else c for c in cmd)


def execute(name: str, cmd: list, args) -> dict:
    log = Path(args.out) / f"{name}.log"
    print(f"[{name}] $ {shown(cmd)}", flush=True)
    t0 = time.perf_counter()
    try:
        proc = subprocess.run(cmd, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)}, capture_output=True,
                              text=True, timeout=args.timeout)
        code, output = proc.returncode, proc.stdout + proc.stderr
    except subprocess.TimeoutExpired as e:
        code, output = "timeout", f"{e.stdout or ''}{e.stderr or ''}\ntimed out after {args.timeout} s"
    wall = time.perf_counter() - t0
    log.write_text(output if isinstance(output, str) else output.decode(errors="replace"))
    result = {"name": name, "ok": code == 0, "returncode": code, "wall_s": round(wall, 1), "log": str(log)}
    if code != 0:
        result["error_tail"] = log.read_text()[-1500:]
        print(f"    FAILED ({code}); log {log}", flush=True)
    return result


def train_figures(name: str, args, probe: Path, tflops) -> dict:
    """Throughput, MFU and memory of one finished training, from its metrics.jsonl and the wrapper's probe."""
    records = [json.loads(line) for line in (Path(args.out) / name / "metrics.jsonl").read_text().splitlines()]
    start, end = records[0], records[-1]
    steps = [r for r in records if "step_time_s" in r]
    step_time = statistics.median([r["step_time_s"] for r in steps if r["step"] > args.warmup] or
                                  [r["step_time_s"] for r in steps])
    samples = start["global_batch_size"] / step_time
    tokens = samples * args.max_seq_length  # every window is padded to max_seq_length
    ranks = end.get("memory_per_rank") or [{}]
    out = {"strategy": start["strategy"], "engine": start["engine"], "world_size": start["world_size"],
           "mixed_precision": start["mixed_precision"], "num_parameters": start["num_parameters"],
           "global_batch_size": start["global_batch_size"], "step_time_s": step_time, "samples_per_s": samples,
           "tokens_per_s": tokens, "loss_first": steps[0]["loss"], "loss_last": steps[-1]["loss"],
           "model_state_bytes": max(r.get("live_tensor_bytes", 0) for r in ranks),
           **json.loads(probe.read_text())}
    # MFU per GPU: 6 FLOPs per parameter per token (forward 2, backward 4), over the tokens of all ranks.
    out["mfu"] = (6 * start["num_parameters"] * tokens / (tflops * 1e12 * start["world_size"])) if tflops else None
    return out


def report(result: dict) -> None:
    gib = 1 / 2**30
    print(f"\n{result['device_name']} (CUDA {result['cuda_version']}, torch {result['torch']}); peak "
          f"{result['peak_tflops']} TFLOP/s bf16 ({result['peak_tflops_source']})")
    print("| run | engine | samples/s | tokens/s | MFU | peak GPU memory (allocated) | model states | loss first -> last |")
    print("|---|---|---|---|---|---|---|---|")
    for name, r in result["runs"].items():
        if not r.get("ok"):
            print(f"| {name} | failed ({r['returncode']}) | | | | | | |")
        elif "samples_per_s" in r:
            mfu = f"{100 * r['mfu']:.1f}%" if r.get("mfu") is not None else "-"
            scale = f", loss scale {r['loss_scale']:g}" if "loss_scale" in r else ""
            print(f"| {name} | {r['engine']} | {r['samples_per_s']:.1f} | {r['tokens_per_s']:,.0f} | {mfu} | "
                  f"{r['max_memory_allocated_bytes'] * gib:.2f} GiB | {r['model_state_bytes'] * gib:.2f} GiB | "
                  f"{r['loss_first']:.3f} -> {r['loss_last']:.3f}{scale} |")
        else:
            print(f"| {name} | ok in {r['wall_s']} s | | | | | | |")
    for s in result["skipped"]:
        print(f"skipped {s['run']}: {s['why']}")


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    import torch

    cuda = torch.cuda.is_available()
    if not cuda and not args.dry_run:
        print(NO_CUDA)
        if args.json:
            Path(args.json).write_text(json.dumps({"cuda": False, "message": NO_CUDA}, indent=2) + "\n")
        return 0
    gpus = torch.cuda.device_count() if cuda else 1
    with tempfile.TemporaryDirectory(prefix="gpu-check-") as tmp:
        runs, skipped = plan(args, gpus, Path(tmp), hard_negatives_has_device())
        if args.dry_run:
            for name, (_, cmd) in runs.items():
                print(f"[{name}] {shown(cmd)}")
            for s in skipped:
                print(f"skipped {s['run']}: {s['why']}")
            return 0
        Path(args.out).mkdir(parents=True, exist_ok=True)
        name = torch.cuda.get_device_name(0)
        tflops, source = peak_tflops(name, args.peak_tflops)
        result = {"cuda": True, "device_name": name, "device_count": gpus, "torch": torch.__version__,
                  "cuda_version": torch.version.cuda, "peak_tflops": tflops, "peak_tflops_source": source,
                  "max_seq_length": args.max_seq_length, "per_device_train_batch_size": args.batch_size,
                  "steps": args.steps, "warmup_steps_untimed": args.warmup, "skipped": skipped, "runs": {}}
        for run_name, (kind, cmd) in runs.items():
            r = execute(run_name, cmd, args)
            if r["ok"] and kind == "train":
                r.update(train_figures(run_name, args, Path(tmp) / f"{run_name}.json", tflops))
            result["runs"][run_name] = r
    report(result)
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(result, indent=2) + "\n")
        print(f"wrote {args.json}")
    return 0 if all(r["ok"] for r in result["runs"].values()) else 1


if __name__ == "__main__":
    sys.exit(main())
