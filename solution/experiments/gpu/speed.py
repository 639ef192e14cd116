"""The GPU check's `speed` part (`scripts/gpu_check.py --parts speed`; `scripts/gpu_speed.py`'s docstring says
what each run measures): its runs at the sweep's best batch, each run's figures and the goals, met or not.
"""

from __future__ import annotations

import json
import shutil
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]  # the repository: the commands run there
GPU_SPEED = ROOT / "scripts" / "gpu_speed.py"  # its --infer is the inference run, a process of its own

BATCHES = (16, 32, 64, 128)
ENGINES = ("zero2", "fsdp", "zero3")
RECIPE_BATCHES = ((128, False), (512, False), (512, True))
# (steps, logging window, the first step timed, the profiled steps) of a full and a dry run
SIZES = {False: {"steps": 130, "engine_steps": 60, "peer_steps": 60, "window": 10, "timed_from": 21, "profile": 5,
                 "batches": BATCHES, "recipe": RECIPE_BATCHES, "infer_batch": 256, "seq": 512},
         True: {"steps": 12, "engine_steps": 12, "peer_steps": 8, "window": 2, "timed_from": 7, "profile": 2,
                "batches": (2, 4), "recipe": ((4, False),), "infer_batch": 4, "seq": 64}}
GOALS = {"mfu_compiled": 0.35, "mfu_eager": 0.25, "zero2": 0.85, "fsdp": 0.85, "zero3": 0.6, "vs_hf_trainer": 1.0,
         "infer_windows_per_s": 3000.0, "recipe_windows_per_s": 15000.0}


def flops_per_token(arch: dict, seq: int) -> dict:
    """Training FLOPs a token of BERT-shaped `arch`: `all` = 6 x every parameter (the project's first count);
    `usual` = 6 x the matrix parameters (layers and heads; the embeddings' lookups do no matrix work) + 12 x
    layers x seq x hidden (attention's two products, forward and backward: PaLM, appendix B)."""
    layers, hidden, inter = arch["num_hidden_layers"], arch["hidden_size"], arch["intermediate_size"]
    matrices = layers * (4 * hidden * hidden + 2 * hidden * inter) + hidden * (2 + 5)  # the QA and answer-type heads
    return {"usual": 6 * matrices + 12 * layers * seq * hidden, "matrix_parameters": matrices}


def sizes(args) -> dict:
    return SIZES[bool(args.dry_run)]


def speed_run(args, name: str, strategy: str, batch: int, steps: int, probes: Path, train_command,
              extra=(), config=None, window: bool = True) -> list:
    """A training under gpu_check's wrapper (peak GPU memory), logged every window, profiled after the first
    window, no final save. `window` False: the config's own window length, not gpu_check's."""
    sz = sizes(args)
    overrides = ["--logging_steps", str(sz["window"]), "--measure_memory", "false", "--save_final_model", "false",
                 "--profile_steps", str(sz["profile"]), *extra]
    return train_command(args, name, strategy, "bf16" if not args.dry_run else "no", 1, probes / f"{name}.json",
                         config=config, steps=steps, extra=overrides, batch=batch, window=window)


def best_batch(result: dict, args) -> int:
    """The eager one-process batch with the most samples/s so far (the first of the sweep when none ran)."""
    done = {r["batch"]: r["samples_per_s"] for n, r in result.get("runs", {}).items()
            if n.startswith("speed-b") and r.get("ok") and "samples_per_s" in r and not n.endswith("compiled")}
    return max(done, key=done.get) if done else sizes(args)["batches"][0]


def plan_speed(args, probes: Path, train_command) -> tuple:
    """gpu_check's (name, kind, command, needs) list; the runs after the sweep are built when they start,
    at the sweep's best batch."""
    sz = sizes(args)
    runs = [(f"speed-b{b}", "speed", speed_run(args, f"speed-b{b}", "single", b, sz["steps"], probes, train_command),
             []) for b in sz["batches"]]

    def at_best(name, strategy, steps, extra=()):
        def build(result, left):
            return speed_run(args, name, strategy, best_batch(result, args), steps, probes, train_command, extra)
        return build

    runs.append(("speed-compiled", "speed", at_best("speed-compiled", "single", sz["engine_steps"],
                                                    ["--torch_compile", "true"]), []))
    runs += [(f"speed-{e}", "speed", at_best(f"speed-{e}", e, sz["engine_steps"]), []) for e in ENGINES]

    def peer(result, left):
        batch = best_batch(result, args)
        return [sys.executable, str(ROOT / "scripts" / "benchmark_loop.py"), "--config", args.config,
                "--world-sizes", "1", "--repeats", "1", "--batch-size", str(batch), "--steps", str(sz["peer_steps"]),
                "--window", str(sz["window"]), "--mixed-precision", "bf16" if not args.dry_run else "no",
                "--max-seq-length", str(sz["seq"]), "--backbone", args.backbone, "--out", str(Path(args.work) / "peer"),
                "--json", str(Path(args.out) / "speed-peer.json")]

    runs.append(("speed-peer", "speed-peer", peer, []))
    recipe_config = "configs/train/tiny.yaml" if args.dry_run else "configs/train/nq-profile.yaml"
    for batch, compiled in sz["recipe"]:
        name = f"speed-recipe-b{batch}" + ("-compiled" if compiled else "")
        extra = ["--eval_strategy", "no", *(["--torch_compile", "true"] if compiled else [])]
        # nq-profile's own window (192 pieces), not BERT-base's 512; the dry run's tiny config takes gpu_check's
        runs.append((name, "speed", speed_run(args, name, "single", batch, sz["engine_steps"], probes, train_command,
                                              extra, recipe_config, window=args.dry_run), []))
    runs.append(("speed-infer", "speed-infer", [
        sys.executable, str(GPU_SPEED), "--infer", "--config", args.config, "--backbone", args.backbone,
        "--batch",
        str(sz["infer_batch"]), "--seq", str(sz["seq"]), "--pages", str(Path(args.work) / "pages.jsonl"),
        "--device", args.device, "--json", str(Path(args.out) / "speed-infer.json")], []))
    runs.append(("speed-repeat", "speed", at_best("speed-repeat", "single", sz["steps"]), []))
    return runs, []


# -- figures --------------------------------------------------------------------------------------

def train_figures(name: str, args, probe: Path, tflops) -> dict:
    """One speed run's throughput (the median logging window from `timed_from` on), MFU on both counts,
    memory, its profile and what its start record says it ran."""
    sz = sizes(args)
    run_dir = Path(args.work) / name
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    start = records[0]
    windows = [r for r in records if "samples_per_s" in r and r["step"] - sz["window"] + 1 >= sz["timed_from"]]
    first = [r for r in records if r.get("event") == "first_step"]
    seq = start["window"]["max_seq_length"]
    samples = statistics.median(r["samples_per_s"] for r in windows)
    tokens = samples * seq
    world = start["world_size"]
    counts = flops_per_token(start["architecture"], seq)
    out = {"strategy": start["strategy"], "engine": start["engine"], "batch": start["per_device_train_batch_size"],
           "world_size": world, "mixed_precision": start["mixed_precision"], "attention": start.get("attention"),
           "torch_compile": start.get("torch_compile"), "engine_settings": start.get("engine_settings"),
           "num_parameters": start["num_parameters"], "matrix_parameters": counts["matrix_parameters"],
           "max_seq_length": seq, "timed_steps": sz["window"] * len(windows),
           "samples_per_s": samples, "samples_per_s_windows": [r["samples_per_s"] for r in windows],
           "tokens_per_s": tokens, "step_time_s": start["global_batch_size"] / samples,
           "first_step_s": first[0]["seconds"] if first else None,
           "loss_last": [r["loss"] for r in records if "loss" in r][-1],
           **(json.loads(probe.read_text()) if probe.is_file() else {})}
    if tflops:
        peak = tflops * 1e12 * world
        out["mfu_all_parameters"] = 6 * start["num_parameters"] * tokens / peak
        out["mfu"] = counts["usual"] * tokens / peak  # the usual count
    profile = run_dir / "profile.json"
    if profile.is_file():
        out["profile"] = json.loads(profile.read_text())
    kept = Path(args.out) / "speed"  # OUT comes back from the machine; WORK does not
    kept.mkdir(parents=True, exist_ok=True)
    for path in (run_dir / "metrics.jsonl", profile):
        if path.is_file():
            shutil.copyfile(path, kept / f"{name}-{path.name}")
    return out


def peer_figures(args) -> dict:
    rows = json.loads((Path(args.out) / "speed-peer.json").read_text())
    return {"rows": rows, **{k: v for r in rows if r["runner"] == "ours" for k, v in r.items() if k.startswith("vs_")}}


def summary(result: dict) -> dict:
    """The goals, each with its figure and whether it was met (None: not measured)."""
    runs = {n: r for n, r in result["runs"].items() if r.get("ok")}
    eager = {n: r for n, r in runs.items() if n.startswith("speed-b") and "samples_per_s" in r}
    best = max(eager.values(), key=lambda r: r["samples_per_s"], default=None)
    compiled = runs.get("speed-compiled", {})
    out = {"best_batch": best["batch"] if best else None}

    def goal(key, figure, target):
        out[key] = {"figure": figure, "goal": target, "met": None if figure is None else figure >= target}

    goal("mfu_eager", best.get("mfu") if best else None, GOALS["mfu_eager"])
    goal("mfu_compiled", compiled.get("mfu"), GOALS["mfu_compiled"])
    for engine in ENGINES:
        r = runs.get(f"speed-{engine}", {})
        alone = eager.get(f"speed-b{r.get('batch')}")
        goal(f"{engine}_vs_single", r["samples_per_s"] / alone["samples_per_s"] if alone and "samples_per_s" in r
             else None, GOALS[engine])
    goal("vs_hf_trainer", runs.get("speed-peer", {}).get("vs_hf_trainer"), GOALS["vs_hf_trainer"])
    goal("infer_windows_per_s", runs.get("speed-infer", {}).get("model_windows_per_s"), GOALS["infer_windows_per_s"])
    recipe = [r["samples_per_s"] for n, r in runs.items() if n.startswith("speed-recipe") and "samples_per_s" in r]
    goal("recipe_windows_per_s", max(recipe) if recipe else None, GOALS["recipe_windows_per_s"])
    repeat = runs.get("speed-repeat", {})
    if best and "samples_per_s" in repeat:
        out["repeat_vs_first"] = repeat["samples_per_s"] / best["samples_per_s"]
    return out
