"""Inference speed, side by side in one run: the submission pipeline, transformers' QA pipeline, matmul ceilings.

    python scripts/benchmark_inference.py --json runs/benchmark/inference.json [--device cuda]
    python scripts/benchmark_inference.py --plot-only docs/benchmarks/inference.json   # redraw the chart only

On the same documents (default: the synthetic dev set, which has gold
answers, so the same runs give the F1) it measures:

- `submission.predict` as the Kaggle kernel runs it (read, window, model, post-process, CSV), in
  float32 and with bfloat16 autocast: documents/s, windows/s and the dev micro-F1 of each;
- the same weights through `transformers.pipeline("question-answering")` with the same window
  length, stride and question length (what a user would pick instead): documents/s;
- the machine's matrix-multiply ceiling for this model: the matmuls of one forward pass (the
  layers' linear maps and attention products at the measured mean window length), timed on their
  own in float32 and bfloat16; windows/s if the model did nothing else;
- peak memory of `submission.predict` on N documents and on the same documents repeated ten
  times (the input is streamed, so it should not grow).

The ratios with goals (docs/submission.md) are printed at the end. Timings are
best of `--repeats`; nothing else should run on the machine meanwhile.
`--device` (default: cuda when available, else cpu) runs all of it there;
bfloat16 is measured where the device computes it natively, as
`submission.predict --precision auto` decides (`--precisions fp32,bf16`
forces both). With `--json FILE` a chart is drawn next to it (FILE with
`.png`); `--plot-only FILE` redraws that chart from an existing JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
ROOT = Path(__file__).resolve().parents[1]
SCRIPT = "scripts/benchmark_inference.py"  # whose records (--json, the chart) it may write over
REAL_DEV = ROOT.parent / "shared" / "data" / "nq-real" / "simplified-nq-dev-sample.jsonl"
sys.path.insert(0, str(ROOT))



def _import_heavy() -> None:
    """torch, transformers and the project, imported only once there is work: --help and --plot-only need none."""
    global np, torch, load_gold, read_submission, score, load_model_dir, is_html_token, read_examples
    global Featurizer, WindowConfig, predict_file, native_bf16
    import numpy as np
    import torch

    from solution.common.precision import native_bf16
    from solution.data.nq import is_html_token, read_examples
    from solution.model.qa_model import load_model_dir
    from solution.scoring.metric import load_gold, read_submission, score
    from solution.windows.featurizer import Featurizer, WindowConfig
    from submission.predict import predict_file


def ours(model_dir: str, path: str, gold: str, bf16: bool, batch_size: int, repeats: int, out_dir: Path,
         device: str) -> dict:
    best = None
    for r in range(repeats):
        csv = out_dir / f"ours-{'bf16' if bf16 else 'fp32'}.csv"
        res = predict_file(model_dir, path, str(csv), batch_size=batch_size, device=device,
                           precision="bf16" if bf16 else "fp32", quiet=True)
        if best is None or res["seconds"] < best["seconds"]:
            best = res
    f1 = score(read_submission(csv), load_gold(gold))["micro_f1"] if gold else None
    return {"documents": best["documents"], "windows": best["windows"], "seconds": best["seconds"],
            "docs_per_s": best["documents"] / best["seconds"], "windows_per_s": best["windows"] / best["seconds"],
            "micro_f1": f1}


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


def peak_rss(model_dir: str, path: str, bf16: bool, out_csv: str, device: str) -> float:
    """Peak resident memory (MiB) of one `submission.predict` process."""
    code = ("import resource, sys, json\n"
            "from submission.predict import main\n"
            "code = main(sys.argv[1:])\n"
            "print(json.dumps({'maxrss_kib': resource.getrusage(resource.RUSAGE_SELF).ru_maxrss}), file=sys.stderr)\n"
            "sys.exit(code)\n")
    args = [sys.executable, "-c", code, "--model", model_dir, "--input", path, "--output", out_csv, "--quiet",
            "--device", device]
    r = subprocess.run(args + ["--precision", "bf16" if bf16 else "fp32"], cwd=ROOT, capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"submission.predict failed: {r.stderr[-2000:]}")
    last = [line for line in r.stderr.splitlines() if line.startswith('{"maxrss_kib"')][-1]
    return json.loads(last)["maxrss_kib"] / 1024


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


def measure(name: str, path: str, gold, model_dir: str, model, tokenizer, window, args,
            tmp: Path, memory_docs: int) -> dict:
    """Every figure on one set of documents."""
    examples = list(read_examples(path))
    lengths = window_lengths(tokenizer, window, examples)
    seq = int(round(lengths.mean()))
    print(f"\n[{name}] {len(examples)} documents, {len(lengths)} windows (mean length {lengths.mean():.1f}) of {path}",
          flush=True)
    out: dict = {"input": path, "documents": len(examples), "windows_cut": int(len(lengths)),
                 "mean_window_length": float(lengths.mean())}
    print("  matmul ceilings ...", flush=True)
    for precision in args.precisions:
        dtype = torch.bfloat16 if precision == "bf16" else torch.float32
        out[f"{precision}_ceiling"] = matmul_ceiling(model.config, seq, dtype, args.batch_size, 3, args.device)
    for precision in args.precisions:
        print(f"  submission.predict, {precision} ...", flush=True)
        out[f"ours_{precision}"] = ours(model_dir, path, gold, precision == "bf16", args.batch_size, args.repeats,
                                        tmp, args.device)
    print(f"  transformers {PIPELINE_TRANSFORMERS} pipeline('question-answering'), float32 ...", flush=True)
    out["hf_pipeline"] = hf_pipeline(model, tokenizer, model_dir, window, examples, args.batch_size, args.repeats,
                                     pipeline_env(Path(args.pipeline_env)), tmp, args.device)
    if memory_docs:
        print(f"  peak memory, {memory_docs} documents and 10x that ...", flush=True)
        one = repeated_file(path, 1, tmp / "x1.jsonl", memory_docs)
        ten = repeated_file(path, 10, tmp / "x10.jsonl", memory_docs)
        bf16 = "bf16" in args.precisions
        m1 = peak_rss(model_dir, str(one), bf16, str(tmp / "m1.csv"), args.device)
        m10 = peak_rss(model_dir, str(ten), bf16, str(tmp / "m10.csv"), args.device)
        out["memory"] = {"documents_1x": memory_docs, "peak_rss_mib_1x": m1, "peak_rss_mib_10x": m10,
                         "ratio": m10 / m1}
    out["ratios"] = {"memory_10x_vs_1x": out.get("memory", {}).get("ratio")}
    for precision in args.precisions:
        r = out[f"ours_{precision}"]
        out["ratios"][f"{precision}_docs_per_s_vs_pipeline"] = r["docs_per_s"] / out["hf_pipeline"]["docs_per_s"]
        out["ratios"][f"{precision}_windows_per_s_vs_{precision}_ceiling"] = (
            r["windows_per_s"] / out[f"{precision}_ceiling"]["windows_per_s"])
    f1_32, f1_16 = (out.get(f"ours_{p}", {}).get("micro_f1") for p in ("fp32", "bf16"))
    out["ratios"]["bf16_f1_change"] = None if f1_32 is None or f1_16 is None else f1_16 - f1_32
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


def build_parser() -> argparse.ArgumentParser:
    from solution.common import cli  # both --a-b and --a_b spellings
    p = cli.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    p.add_argument("--model", default="runs/demo/model", help="model directory (default: the demo's; make demo)")
    p.add_argument("--input", default="data/synth/simplified-nq-dev.jsonl",
                   help="annotated documents: speed, F1 and memory are measured on them")
    p.add_argument("--real", default=str(REAL_DEV),
                   help="real NQ documents, measured for speed too (skipped if absent; '' to skip)")
    p.add_argument("--device", default=None, help="cuda, cuda:N or cpu (default: cuda when available, else cpu)")
    p.add_argument("--precisions", default="auto",
                   help="comma list of fp32, bf16; auto (default): fp32, and bf16 where the device computes it "
                        "natively (as submission.predict --precision auto decides)")
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--repeats", type=int, default=2, help="timed runs of each; the best counts")
    p.add_argument("--memory-docs", type=int, default=64, help="documents of the 1x memory run (0: skip)")
    p.add_argument("--pipeline-env", default="runs/benchmark/transformers4",
                   help="folder for the side install of transformers 4.x that the pipeline comparison runs on")
    p.add_argument("--json", default=None, help="write the figures here, and the chart next to it (.png)")
    p.add_argument("--png", default=None, help="chart (default: the --json path with .png; none without --json)")
    p.add_argument("--plot-only", default=None, metavar="JSON",
                   help="redraw the chart from this JSON (written by an earlier run) and exit; measures nothing")
    cli.add_overwrite(p)
    return p


def plot_only(json_path: str, png) -> int:
    try:
        result = json.loads(Path(json_path).read_text())
        png = Path(png or Path(json_path).with_suffix(".png"))
        chart(result, png)
    except (OSError, ValueError, KeyError, TypeError) as e:
        print(f"error: {json_path}: not a benchmark_inference JSON ({type(e).__name__}: {e})", file=sys.stderr)
        return 2
    print(f"chart: {png}")
    return 0


def choose_precisions(spec: str, device: str) -> list:
    if spec == "auto":
        return ["fp32", "bf16"] if native_bf16(device) else ["fp32"]
    chosen = [p.strip() for p in spec.split(",") if p.strip()]
    if not chosen or any(p not in ("fp32", "bf16") for p in chosen):
        raise ValueError(f"--precisions: expected auto or a comma list of fp32, bf16, got {spec!r}")
    return chosen


def main(argv=None) -> int:
    from solution.common import cli
    from solution.common.fsutil import mark_written, write_record

    args = build_parser().parse_args(argv)
    png = Path(args.png or Path(args.json).with_suffix(".png")) if (args.json or args.png) else None
    cli.claim_records(SCRIPT, args.overwrite, json=None if args.plot_only else args.json, png=png)
    if args.plot_only:
        return plot_only(args.plot_only, args.png)
    for path, what in ((args.model, "model directory"), (args.input, "input")):
        if not Path(path).exists():
            print(f"error: {what} {path} not found (make demo writes runs/demo/model and data/synth)", file=sys.stderr)
            return 2
    _import_heavy()
    args.device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    try:
        args.precisions = choose_precisions(args.precisions, args.device)
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    torch.manual_seed(0)
    model, tokenizer, meta = load_model_dir(args.model)
    window = WindowConfig(**meta["window"])
    print(f"model {args.model} ({sum(p.numel() for p in model.parameters()) / 1e6:.1f}M parameters, windows "
          f"{window.max_seq_length}/{window.doc_stride}); torch {torch.__version__}, {torch.get_num_threads()} threads; "
          f"batch {args.batch_size}; {args.device}, {' and '.join(args.precisions)}", flush=True)
    device_name = torch.cuda.get_device_name(args.device) if args.device.startswith("cuda") else "cpu"
    out: dict = {"model": args.model, "threads": torch.get_num_threads(), "batch_size": args.batch_size,
                 "machine": platform.processor() or platform.machine(), "torch": torch.__version__,
                 "device": args.device, "device_name": device_name, "precisions": args.precisions}
    with tempfile.TemporaryDirectory() as tmp:
        main_set = measure("dev", args.input, args.input, args.model, model, tokenizer, window, args, Path(tmp),
                           args.memory_docs)
        real = None
        if args.real and Path(args.real).is_file():
            real = measure("real NQ", args.real, None, args.model, model, tokenizer, window, args, Path(tmp), 0)
    f1_32, f1_16 = (main_set.get(f"ours_{p}", {}).get("micro_f1") for p in ("fp32", "bf16"))
    bf16_ok = f1_16 is not None and (f1_32 is None or abs(f1_16 - f1_32) <= 0.005)
    headline = "bf16" if bf16_ok else args.precisions[0]
    best = main_set[f"ours_{headline}"]
    out.update(dev=main_set, real_nq=real, precision=headline,
               docs_per_s=best["docs_per_s"], windows_per_s=best["windows_per_s"],
               pipeline_docs_per_s=main_set["hf_pipeline"]["docs_per_s"],
               f1_fp32=f1_32, f1_bf16=f1_16, memory_10x_vs_1x=main_set["ratios"]["memory_10x_vs_1x"],
               **{f"{p}_ceiling_windows_per_s": main_set[f"{p}_ceiling"]["windows_per_s"] for p in args.precisions})
    report("dev", main_set)
    if real:
        report("real NQ", real)
    print(f"\nprecision for the headline figures: {headline}"
          + (f" (bf16 dev micro-F1 {f1_16:.4f} vs float32 {f1_32:.4f})" if f1_16 is not None and f1_32 is not None
             else ""))
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        write_record(args.json, json.dumps(out, indent=2), SCRIPT)
        print(f"wrote {args.json}")
    if png:
        chart(out, png)
        mark_written(png, SCRIPT)
        print(f"chart: {png}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
