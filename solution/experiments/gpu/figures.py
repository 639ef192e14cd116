"""A finished run's figures for gpu_check.json: a training's throughput, MFU and memory (from its metrics.jsonl and
the wrapper's probe), a prediction's windows/s against the Kaggle kernel's projection, the speed part's."""

from __future__ import annotations

import json
import re
import statistics
from pathlib import Path

from solution.experiments import kernel_budget
from solution.experiments.gpu import speed

# `submission.predict`'s closing line: "wrote X: R rows for D documents (W windows run..., P) in S s"
PREDICT_LINE = re.compile(r"wrote .*: \d+ rows for (\d+) documents \((\d+) windows run.*?, (\w+)\) in ([\d.]+)s")


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


def speed_figures(name: str, kind: str, args, probe: Path, tflops) -> dict:
    """The speed part's figures: a training's, the peer comparison's or inference's."""
    if kind == "speed-peer":
        return speed.peer_figures(args)
    if kind == "speed-infer":
        return json.loads((Path(args.out) / "speed-infer.json").read_text())
    return speed.train_figures(name, args, probe, tflops)


def predict_figures(name: str, args, model_dir: str) -> dict:
    """Windows/s from predict's closing line, against the Kaggle kernel's projected rates for this model."""
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


def run_figures(name: str, kind: str, r: dict, cmd: list, args, probes: Path, tflops) -> dict:
    """The figures of a run that finished, by its kind ({} for a kind that has none)."""
    if kind.startswith("speed"):
        return speed_figures(name, kind, args, probes / f"{name}.json", tflops)
    if kind == "train":
        return train_figures(name, args, probes / f"{name}.json", tflops)
    if kind == "predict":
        return predict_figures(name, args, cmd[cmd.index("--model") + 1])
    if kind == "figures":  # --recipe-figures: its stdout is one JSON object, on a line
        lines = Path(r["log"]).read_text().splitlines()
        return {"figures": json.loads([line for line in lines if line.startswith("{")][-1])}
    return {}
