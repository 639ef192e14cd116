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
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
ROOT = Path(__file__).resolve().parents[1]
SCRIPT = "scripts/benchmark_inference.py"  # whose records (--json, the chart) it may write over
REAL_DEV = ROOT.parent / "shared" / "data" / "nq-real" / "simplified-nq-dev-sample.jsonl"
sys.path.insert(0, str(ROOT))

from solution.experiments.inference_bench import (  # noqa: E402  (none of them imports torch until called)
    PIPELINE_TRANSFORMERS,
    chart,
    choose_precisions,
    hf_pipeline,
    matmul_ceiling,
    pipeline_env,
    repeated_file,
    report,
    window_lengths,
)


def _import_heavy() -> None:
    """torch and the project's model code, imported only once there is work: --help and --plot-only need none."""
    global torch, load_gold, read_submission, score, load_model_dir, read_examples, WindowConfig, predict_file
    import torch

    from solution.data.nq import read_examples
    from solution.model.qa_model import load_model_dir
    from solution.scoring.metric import load_gold, read_submission, score
    from solution.windows.featurizer import WindowConfig
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


def main(argv=None) -> int:
    from solution.common import cli
    from solution.common.fsutil import mark_written, write_record
    from solution.experiments.charts import chart_path, redraw

    args = build_parser().parse_args(argv)
    png = chart_path(args.plot_only or args.json, args.png)
    cli.claim_records(SCRIPT, args.overwrite, json=None if args.plot_only else args.json, png=png)
    if args.plot_only:
        return redraw(args.plot_only, png, chart, "benchmark_inference")
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
