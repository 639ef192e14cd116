"""Training for the metric: what negative down-sampling and the hard-negative pass do to dev micro-F1.

    python scripts/benchmark_negatives.py --corpus synth --json runs/negatives/synth.json
    python scripts/benchmark_negatives.py --corpus real --json runs/negatives/real.json
    python scripts/benchmark_negatives.py --plot-only docs/benchmarks/negatives-synth.json   # redraw the chart only

Trains the same model once per variant, one after the other (never two at
once: they would share the cores), with the demo recipe
(configs/train/demo.yaml) and the same seed:

- `uniform`: one keep rate for every no-answer window (the config's `negative_keep_rate`);
- `separate`: about the same number of negatives, drawn at `--answerable-rate` in documents that
  have an answer and `--unanswerable-rate` in documents that have none;
- `hard`: the uniform rates, negatives drawn by the `uniform` model's scores (`solution.hard_negatives`);
- `separate+hard`: both.

Each model is scored on dev with its untuned thresholds, then tuned on dev
(`solution.evaluate --tune`), and, where the corpus has a test gold file,
scored on test with the dev-tuned thresholds. Every step is the command a
user would type, run as its own process.

`--corpus real` uses the real NQ lines in ../shared/data/nq-real (49
training documents, 10 five-way-annotated dev documents): far too few to
train a good model, so its figures say little beyond "the pipeline runs on
real documents"; they are printed for completeness.

With `--json FILE` a chart is drawn next to it (FILE with `.png`): micro-F1
per variant, and the negatives each kept; `--plot-only FILE` redraws it from
an existing JSON without training anything.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = "scripts/benchmark_negatives.py"  # whose records (--json, the chart) it may write over
PY = sys.executable
REAL = ROOT.parent / "shared" / "data" / "nq-real"

CORPORA = {
    "synth": {"train": "data/synth/simplified-nq-train.jsonl", "dev": "data/synth/simplified-nq-dev.jsonl",
              "test": "data/synth/simplified-nq-test.jsonl", "test_gold": "data/synth/simplified-nq-test-gold.jsonl",
              "overrides": []},
    # Real documents are long (median 6,409 tokens): the common 384/128 windows, and more epochs,
    # since 49 documents make only a few dozen steps.
    "real": {"train": str(REAL / "simplified-nq-train-sample.jsonl"), "dev": str(REAL / "simplified-nq-dev-sample.jsonl"),
             "test": None, "test_gold": None,
             "overrides": ["--max_seq_length", "384", "--doc_stride", "128", "--max_question_length", "64",
                           "--num_train_epochs", "6", "--max_dev_examples", "null"]},
}


def run(args: list, stdout=None) -> float:
    print(f"$ python {' '.join(args)}", flush=True)
    t0 = time.perf_counter()
    r = subprocess.run([PY] + args, cwd=ROOT, stdout=stdout)
    if r.returncode != 0:
        sys.exit(f"benchmark_negatives: command failed with exit code {r.returncode}")
    return time.perf_counter() - t0


def score(submission: Path, gold: str) -> dict:
    out = subprocess.run([PY, "-m", "solution.evaluate", "--submission", str(submission), "--gold", gold, "--json"],
                         cwd=ROOT, capture_output=True, text=True, check=True)
    return json.loads(out.stdout)


def variant(name: str, corpus: dict, out: Path, extra: list) -> dict:
    d = out / name
    d.mkdir(parents=True, exist_ok=True)
    train_s = run(["-m", "solution.train", "--config", "configs/train/demo.yaml", "--output_dir", str(d),
                   "--overwrite_output_dir", "true",
                   "--train_file", corpus["train"], "--dev_file", corpus["dev"], "--eval_strategy", "no",
                   "--disable_tqdm", "true"] + corpus["overrides"] + extra)
    start = json.loads((d / "metrics.jsonl").read_text().splitlines()[0])
    model = d / "model"
    pred = ["--precision", "fp32"]  # the figures in docs/answers-techniques.md were taken in float32
    run(["-m", "submission.predict", "--model", str(model), "--input", corpus["dev"], "--output",
         str(d / "dev.csv"), "--scores-out", str(d / "dev-scores.jsonl"), "--quiet"] + pred)
    with open(d / "tune.json", "w") as f:
        run(["-m", "solution.evaluate", "--tune", "--scores", str(d / "dev-scores.jsonl"), "--gold", corpus["dev"],
             "--model", str(model), "--json"], stdout=f)
    tune = json.loads((d / "tune.json").read_text())
    result = {"variant": name, "train_seconds": round(train_s, 1), "train_windows": start["train_windows"],
              "train_data": start["train_data"], "dev_f1_untuned": tune["before"]["micro_f1"],
              "dev_f1_tuned": tune["after"]["micro_f1"], "dev_untuned": tune["before"]}
    if corpus["test"]:
        run(["-m", "submission.predict", "--model", str(model), "--input", corpus["test"], "--output",
             str(d / "test.csv"), "--quiet"] + pred)
        test = score(d / "test.csv", corpus["test_gold"])
        result.update(test_f1_dev_tuned=test["micro_f1"], test=test)
    print(f"--> {name}: {start['train_windows']} training windows; dev micro-F1 untuned "
          f"{result['dev_f1_untuned']:.4f}, tuned on dev {result['dev_f1_tuned']:.4f}"
          + (f"; test (dev-tuned thresholds) {result['test_f1_dev_tuned']:.4f}" if corpus["test"] else ""),
          flush=True)
    return result


def chart(result: dict, path: Path) -> None:
    """Micro-F1 of each variant (untuned, tuned on dev, test with dev's thresholds) and the negatives it kept."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = result["results"]
    names = [r["variant"] for r in rows]
    series = [("dev, untuned thresholds", "dev_f1_untuned"), ("dev, thresholds tuned on dev", "dev_f1_tuned"),
              ("test, dev-tuned thresholds", "test_f1_dev_tuned")]
    series = [(label, key) for label, key in series if any(key in r for r in rows)]
    fig, axes = plt.subplots(1, 2, figsize=(13, 4.8), gridspec_kw={"width_ratios": [3, 2]})
    width = 0.8 / len(series)
    for i, (label, key) in enumerate(series):
        xs = [j + i * width for j in range(len(rows))]
        bars = axes[0].bar(xs, [r.get(key, 0) for r in rows], width, label=label)
        axes[0].bar_label(bars, fmt="%.3f", fontsize=7)
    axes[0].set_xticks([j + width * (len(series) - 1) / 2 for j in range(len(rows))], names)
    axes[0].set_ylabel("micro-F1 (higher is better)")
    top = max(r.get(key, 0) for r in rows for _, key in series) or 1.0
    axes[0].set_ylim(0, top * 1.3)  # the legend goes above the bars
    axes[0].set_yticks([t for t in axes[0].get_yticks() if t <= min(1.0, top * 1.05)])
    axes[0].set_title("Micro-F1 per negative-sampling variant")
    axes[0].legend(fontsize=8, loc="upper center", ncol=len(series))
    ans = [r["train_data"]["negatives_kept_answerable"] for r in rows]
    unans = [r["train_data"]["negatives_kept_unanswerable"] for r in rows]
    axes[1].bar(names, ans, label="in answerable documents")
    axes[1].bar(names, unans, bottom=ans, label="in unanswerable documents")
    axes[1].set_ylabel("no-answer windows kept for training")
    axes[1].set_title("Negatives kept (of {:,} windows)".format(rows[0]["train_data"]["windows"]))
    axes[1].set_ylim(0, max(x + y for x, y in zip(ans, unans)) * 1.2 or 1)  # the legend goes above the bars
    axes[1].legend(fontsize=8, loc="upper center", ncol=2)
    a = result["args"]
    fig.suptitle(f"corpus {result['corpus']}, {rows[0]['train_data']['documents']} training documents; uniform "
                 f"{a['uniform_rate']}, separate {a['answerable_rate']}/{a['unanswerable_rate']}, hard fraction "
                 f"{a['hard_fraction']}" + (f", seed {a['seed']}" if a.get("seed") is not None else ""), fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def build_parser():
    from solution.common import cli  # both --a-b and --a_b spellings

    p = cli.ArgumentParser(description=__doc__.split("\n\n")[0],
                           formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    p.add_argument("--corpus", choices=sorted(CORPORA), default="synth")
    p.add_argument("--out", default=None, help="run directory (default runs/negatives/CORPUS)")
    p.add_argument("--json", default=None, help="write the results here, and the chart next to it (.png)")
    p.add_argument("--png", default=None, help="chart (default: the --json path with .png; none without --json)")
    p.add_argument("--plot-only", default=None, metavar="JSON",
                   help="redraw the chart from this JSON (written by an earlier run) and exit; trains nothing")
    p.add_argument("--uniform-rate", type=float, default=0.05, help="keep rate of `uniform` and `hard`")
    p.add_argument("--answerable-rate", type=float, default=0.02, help="`separate`: rate in answerable documents")
    p.add_argument("--unanswerable-rate", type=float, default=0.08, help="`separate`: rate in unanswerable ones")
    p.add_argument("--hard-fraction", type=float, default=0.5, help="hard_negative_fraction of the hard variants")
    p.add_argument("--bf16", action="store_true", help="score the training windows with bf16 autocast (faster)")
    p.add_argument("--variants", default="uniform,separate,hard,separate+hard")
    p.add_argument("--seed", type=int, default=None, help="training seed (default: the demo config's)")
    cli.add_overwrite(p)
    return p


def run_variants(args, corpus: dict, out: Path) -> list:
    """Train and score each --variants entry; the hard ones first score the training windows with the
    uniform model (trained here if it is not there yet)."""
    uniform = ["--negative_keep_rate", str(args.uniform_rate)]
    separate = ["--negative_keep_rate", str(args.answerable_rate), "--unanswerable_keep_rate", str(args.unanswerable_rate)]
    scores = out / "hard-negatives.jsonl"
    hard = ["--hard_negatives_file", str(scores), "--hard_negative_fraction", str(args.hard_fraction)]
    plan = {"uniform": uniform, "separate": separate, "hard": uniform + hard, "separate+hard": separate + hard}
    results = []
    for name in args.variants.split(","):
        if name not in plan:
            sys.exit(f"benchmark_negatives: unknown variant {name!r}; choose from {sorted(plan)}")
        if "hard" in name and not scores.is_file():
            if not (out / "uniform" / "model").is_dir():
                results.append(variant("uniform", corpus, out, uniform))
            t = run(["-m", "solution.hard_negatives", "--model", str(out / "uniform" / "model"),
                     "--train_file", corpus["train"], "--out", str(scores)] + (["--bf16"] if args.bf16 else []))
            print(f"--> scored the training windows with the uniform model in {t:.0f}s", flush=True)
        if any(r["variant"] == name for r in results):
            continue
        results.append(variant(name, corpus, out, plan[name]))
    return results


def main(argv=None) -> int:
    sys.path.insert(0, str(ROOT))
    from solution.common import cli
    from solution.common.fsutil import mark_written, write_record
    from solution.experiments.charts import chart_path, redraw

    args = build_parser().parse_args(argv)
    png = chart_path(args.plot_only or args.json, args.png)
    cli.claim_records(SCRIPT, args.overwrite, json=None if args.plot_only else args.json, png=png)
    if args.plot_only:
        return redraw(args.plot_only, png, chart, "benchmark_negatives")
    corpus = CORPORA[args.corpus]
    if not Path(ROOT, corpus["train"]).is_file():
        sys.exit(f"benchmark_negatives: {corpus['train']} not found"
                 + (" (make it with: python -m solution.synth --out data/synth)" if args.corpus == "synth" else ""))
    out = Path(args.out or f"runs/negatives/{args.corpus}" + (f"-seed{args.seed}" if args.seed is not None else ""))
    if args.seed is not None:
        corpus = {**corpus, "overrides": corpus["overrides"] + ["--seed", str(args.seed)]}
    results = run_variants(args, corpus, out)
    print(f"\n| variant ({args.corpus}) | training windows | negatives kept (answerable / unanswerable docs) "
          "| dev F1 untuned | dev F1 tuned on dev | test F1, dev-tuned |")
    print("|---|---|---|---|---|---|")
    for r in results:
        td = r["train_data"]
        test = f"{r['test_f1_dev_tuned']:.4f}" if "test_f1_dev_tuned" in r else "-"
        print(f"| {r['variant']} | {r['train_windows']} | {td['negatives_kept_answerable']} / "
              f"{td['negatives_kept_unanswerable']} | {r['dev_f1_untuned']:.4f} | {r['dev_f1_tuned']:.4f} | {test} |")
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        write_record(args.json, json.dumps({"corpus": args.corpus, "args": vars(args), "results": results}, indent=2),
                     SCRIPT)
    if png:
        chart({"corpus": args.corpus, "args": vars(args), "results": results}, png)
        mark_written(png, SCRIPT)
        print(f"chart: {png}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
