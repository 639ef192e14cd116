"""The inference benchmark's parts that need no model of their own: transformers' QA pipeline in a side
install of transformers 4.x, the matmul ceiling of a model's forward pass, repeated input files, and the
report and chart of the figures. `scripts/benchmark_inference.py` is its command; torch and the project's
heavy modules are imported inside the functions, so that its --help and --plot-only stay light.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from dataclasses import asdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]  # the checkout, whose scripts/hf_pipeline_worker.py runs the pipeline

PIPELINE_TRANSFORMERS = "4.57.1"  # the last release line with pipeline("question-answering"); 5.x removed it


def pipeline_env(target: Path) -> Path:
    """A side folder holding transformers 4.x (installed once with pip --target; torch comes from this venv)."""
    marker = target / f"transformers-{PIPELINE_TRANSFORMERS}.dist-info"
    if not marker.is_dir():
        print(f"installing transformers=={PIPELINE_TRANSFORMERS} into {target} for the pipeline comparison ...",
              flush=True)
        r = subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--target", str(target),
                            f"transformers=={PIPELINE_TRANSFORMERS}"], capture_output=True, text=True)
        if r.returncode != 0 or not marker.is_dir():
            sys.exit(f"benchmark_inference: could not install transformers=={PIPELINE_TRANSFORMERS} into {target} "
                     f"(needs PyPI): {r.stderr[-1500:]}")
    return target


def hf_pipeline(model, tokenizer, model_dir: str, window, examples: list, batch_size: int,
                repeats: int, env: Path, tmp: Path, device: str) -> dict:
    """The same weights through transformers' pipeline("question-answering"), in a transformers 4.x process."""
    import torch

    from solution.data.nq import is_html_token

    questions = [ex.question_text for ex in examples]
    # The document as our windows see it: NQ's whitespace tokens without the HTML tags.
    contexts = [" ".join(t for t in ex.tokens if not is_html_token(t)) for ex in examples]
    enc = tokenizer(questions[0], contexts[0][:400], return_tensors="pt")
    with torch.inference_mode():
        start = model(**enc)["start_logits"][0]  # the probe: float32, on the CPU
    job = {"model_dir": str(Path(model_dir).resolve()), "questions": questions, "contexts": contexts,
           "window": asdict(window), "batch_size": batch_size, "repeats": repeats, "device": device,
           "probe": {"question": questions[0], "context": contexts[0][:400], "start_logits": start.tolist()}}
    (tmp / "pipeline-job.json").write_text(json.dumps(job))
    env_vars = {**os.environ, "PYTHONPATH": str(env), "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    r = subprocess.run([sys.executable, str(ROOT / "scripts" / "hf_pipeline_worker.py"), str(tmp / "pipeline-job.json")],
                       env=env_vars, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"benchmark_inference: the pipeline run failed: {r.stderr[-3000:]}")
    res = json.loads(r.stdout.strip().splitlines()[-1])
    res.update(docs_per_s=res["documents"] / res["seconds"], windows_per_s=res["windows"] / res["seconds"])
    return res


def window_lengths(tokenizer, window, examples: list):
    """The length of every window the featurizer cuts from `examples`."""
    import numpy as np

    from solution.windows.featurizer import Featurizer

    featurizer = Featurizer(tokenizer, window)
    return np.array([len(w.input_ids) for _, ws in featurizer.featurize(examples, with_labels=False) for w in ws])


def flops_per_window(config, seq: float) -> float:
    """Multiply-adds x 2 of one forward pass: the linear maps and the two attention products per layer."""
    h, i, n = config.hidden_size, config.intermediate_size, config.num_hidden_layers
    linear = 2 * seq * (4 * h * h + 2 * h * i)
    attention = 2 * 2 * seq * seq * h
    return n * (linear + attention) + 2 * seq * h * 2  # + the span head


def matmul_ceiling(config, seq: int, dtype, batch: int, repeats: int, device: str) -> dict:
    """Windows/s if a forward pass were only its matmuls, each at the speed torch gets for that shape."""
    import torch

    h, i, heads, n = config.hidden_size, config.intermediate_size, config.num_attention_heads, config.num_hidden_layers
    g = torch.Generator().manual_seed(0)
    m = batch * seq
    x_h = torch.randn(m, h, generator=g).to(device, dtype)
    x_i = torch.randn(m, i, generator=g).to(device, dtype)
    w_hh = torch.randn(h, h, generator=g).to(device, dtype)
    w_hi = torch.randn(h, i, generator=g).to(device, dtype)
    w_ih = torch.randn(i, h, generator=g).to(device, dtype)
    q = torch.randn(batch * heads, seq, h // heads, generator=g).to(device, dtype)
    p = torch.randn(batch * heads, seq, seq, generator=g).to(device, dtype)
    # CUDA kernels are asynchronous: wait for them before reading the clock.
    sync = torch.cuda.synchronize if str(device).startswith("cuda") else (lambda: None)

    def layer():
        for _ in range(4):  # query, key, value, output
            torch.matmul(x_h, w_hh)
        torch.matmul(x_h, w_hi)
        torch.matmul(x_i, w_ih)
        torch.matmul(q, q.transpose(1, 2))
        torch.matmul(p, q)

    with torch.inference_mode():
        for _ in range(2):
            layer()
        best = float("inf")
        for _ in range(repeats):
            sync()
            t0 = time.perf_counter()
            for _ in range(5):
                layer()
            sync()
            best = min(best, (time.perf_counter() - t0) / 5)
    forward = best * n
    return {"windows_per_s": batch / forward, "flop_per_s": flops_per_window(config, seq) * batch / forward}


def repeated_file(path: str, times: int, out: Path, limit: int) -> Path:
    """The first `limit` lines of `path`, `times` over, each copy with new integer example ids."""
    lines = Path(path).read_text(encoding="utf-8").splitlines()[:limit]
    with open(out, "w", encoding="utf-8") as f:
        for k in range(times):
            for line in lines:
                obj = json.loads(line)
                obj["example_id"] = str(int(obj["example_id"]) + k * 10**15 * (1 if int(obj["example_id"]) >= 0 else -1))
                f.write(json.dumps(obj) + "\n")
    return out


def report(name: str, m: dict) -> None:
    print(f"\n[{name}] {m['documents']} documents, {m['windows_cut']} windows cut "
          f"(mean length {m['mean_window_length']:.0f})")
    print("| | documents/s | windows/s (windows run) | dev micro-F1 |")
    print("|---|---|---|---|")
    for label, key in (("submission.predict, float32", "ours_fp32"), ("submission.predict, bfloat16", "ours_bf16"),
                       (f"transformers {PIPELINE_TRANSFORMERS} pipeline, float32", "hf_pipeline")):
        if key not in m:
            continue
        r = m[key]
        f1 = f"{r['micro_f1']:.4f}" if r.get("micro_f1") is not None else "-"
        print(f"| {label} | {r['docs_per_s']:.2f} | {r['windows_per_s']:.1f} ({r['windows']}) | {f1} |")
    for label, key in (("matmul ceiling, float32", "fp32_ceiling"), ("matmul ceiling, bfloat16", "bf16_ceiling")):
        if key in m:
            print(f"| {label} | - | {m[key]['windows_per_s']:.1f} | - |")
    r = m["ratios"]
    for p in ("bf16", "fp32"):
        if f"{p}_docs_per_s_vs_pipeline" in r:
            print(f"{p}: documents/s vs the transformers pipeline {r[f'{p}_docs_per_s_vs_pipeline']:.2f}x "
                  f"(goal >= 3x); windows/s vs the {p} matmul ceiling {r[f'{p}_windows_per_s_vs_{p}_ceiling']:.2f}x "
                  "(goal >= 0.6x for bf16)")
    if r.get("bf16_f1_change") is not None:
        print(f"bf16 changes dev micro-F1 by {r['bf16_f1_change']:+.4f} (goal: at most 0.005)")
    if r.get("memory_10x_vs_1x") is not None:
        mm = m["memory"]
        print(f"peak memory, 10x the input: {mm['peak_rss_mib_10x']:.0f} MiB vs {mm['peak_rss_mib_1x']:.0f} MiB "
              f"= {r['memory_10x_vs_1x']:.2f}x (goal <= 1.2x)")


def chart(result: dict, path: Path) -> None:
    """Documents/s of each pipeline, and windows/s against the matmul ceiling, per document set."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    sets = [(name, result[key]) for name, key in (("dev", "dev"), ("real NQ dev", "real_nq")) if result.get(key)]
    if not sets:
        raise ValueError("it holds neither a `dev` nor a `real_nq` measurement")
    # The main set by its file: the default is the synthetic dev set.
    sets = [("synthetic dev" if "synth" in m["input"] else Path(m["input"]).stem, m) if name == "dev" else (name, m)
            for name, m in sets]
    runs = [("submission.predict\nfloat32", "ours_fp32"), ("submission.predict\nbfloat16", "ours_bf16"),
            (f"transformers {PIPELINE_TRANSFORMERS}\npipeline, float32", "hf_pipeline")]
    runs = [(label, key) for label, key in runs if any(key in m for _, m in sets)]
    fig, axes = plt.subplots(1, 2, figsize=(13, 4.8))
    width = 0.8 / len(sets)
    for i, (name, m) in enumerate(sets):
        xs = [j + i * width for j in range(len(runs))]
        vals = [m[key]["docs_per_s"] if key in m else 0 for _, key in runs]
        bars = axes[0].bar(xs, vals, width, label=f"{name} ({m['documents']} documents)")
        axes[0].bar_label(bars, fmt="%.2f", fontsize=8)
    axes[0].set_xticks([j + width * (len(sets) - 1) / 2 for j in range(len(runs))], [label for label, _ in runs])
    axes[0].set_ylabel("documents/s (higher is better)")
    axes[0].set_title("End-to-end inference speed (read, window, model, post-process)")
    axes[0].legend(fontsize=8)
    precisions = [p for p in ("fp32", "bf16") if any(f"ours_{p}" in m for _, m in sets)]
    labels = [f"{name}\n{'float32' if p == 'fp32' else 'bfloat16'}" for name, _ in sets for p in precisions]
    got = [m[f"ours_{p}"]["windows_per_s"] for _, m in sets for p in precisions]
    ceiling = [m[f"{p}_ceiling"]["windows_per_s"] for _, m in sets for p in precisions]
    xs = range(len(labels))
    axes[1].bar([x - 0.2 for x in xs], got, 0.4, color="tab:green", label="submission.predict (label: share of ceiling)")
    axes[1].bar([x + 0.2 for x in xs], ceiling, 0.4, color="silver", label="matmul ceiling (the model's matmuls alone)")
    for x, g, c in zip(xs, got, ceiling):
        axes[1].annotate(f"{g / c:.2f}x", (x - 0.2, g), ha="center", va="bottom", fontsize=8)
    axes[1].set_ylim(0, max(ceiling) * 1.25)  # room for the legend above the bars
    axes[1].set_xticks(list(xs), labels)
    axes[1].set_ylabel("windows/s (higher is better)")
    axes[1].set_title("Windows/s against the machine's matmul ceiling")
    axes[1].legend(fontsize=8, loc="upper left")
    device = result.get("device", "cpu")
    fig.suptitle(f"{result['model']}, batch {result['batch_size']}, {device}, {result['threads']} threads, "
                 f"torch {result['torch']}", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def choose_precisions(spec: str, device: str) -> list:
    """--precisions as a list: auto is fp32, and bf16 where `device` computes it natively."""
    if spec == "auto":
        from solution.common.precision import native_bf16

        return ["fp32", "bf16"] if native_bf16(device) else ["fp32"]
    chosen = [p.strip() for p in spec.split(",") if p.strip()]
    if not chosen or any(p not in ("fp32", "bf16") for p in chosen):
        raise ValueError(f"--precisions: expected auto or a comma list of fp32, bf16, got {spec!r}")
    return chosen
