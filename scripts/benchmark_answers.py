"""What each answer technique of the winning Kaggle solutions is worth: dev and test micro-F1 on a corpus shaped like real NQ.

    python scripts/benchmark_answers.py --json docs/benchmarks/answers.json          # ~30-40 min, 2 cores
    python scripts/benchmark_answers.py --corpus real --json docs/benchmarks/answers-real.json
    python scripts/benchmark_answers.py --quick --json runs/answers-quick/answers.json  # smoke run, minutes

Trains the demo recipe (configs/train/demo.yaml, MiniLM) on `solution.synth
--profile nq` with two seeds, one model after the other (never two at once:
they would share the cores). Each technique is one row of TECHNIQUES: the
training overrides it needs (a model of its own per seed) and the
`submission.predict --set KEY=VALUE` post-processing overrides it needs (the
baseline model, no retraining). Every variant is scored the same way, through
the same functions `submission.predict` and `solution.evaluate --tune` use,
in this process:

1. predict dev and score it: dev micro-F1 untuned;
2. tune the thresholds on dev (`solution.tuning.tune`, the search behind
   `evaluate --tune`), under the variant's settings: dev micro-F1 tuned;
3. predict test with those thresholds, score it against the test gold: test
   micro-F1 with dev-tuned thresholds, split long / short / YES / NO.

Post-processing never changes the windows or the model, so each model runs
once per split: its logits are kept by batch (`CachedRunner`) and every
variant and the ensemble re-use them. That makes the whole run a few
minutes of forward passes instead of one pass per variant.

The "off" row of every technique is the baseline model of that seed. The
`ensemble` rows are each seed's baseline (off) and both together
(the two baselines' logits averaged, as `submission.predict --model A --model B`
does for models sharing tokenizer and windows, on). A variant whose step fails
(a flag this checkout does not have yet) is kept as a row with its `error`,
and the script exits 1 after writing everything else.

`--corpus real` trains on the 49 real training lines and scores the 10 real
dev lines in ../shared/data/nq-real (no test gold there: test_f1 is null).
Far too few documents to decide anything; the rows say so.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
PY = sys.executable
REAL = ROOT.parent / "shared" / "data" / "nq-real"
REAL_NOTE = "10 real dev documents: far too few to decide anything"

# technique -> (training overrides, prediction --set overrides). Names as docs/answers.md's tables give them.
TECHNIQUES = {
    "top_level": (["--nested_to_top_level", "true"], ["top_level_only=true"]),
    "no_answer_score": ([], ["subtract_type_null=true", "score_space=probs"]),
    "thresholds": ([], ["separate_thresholds=true"]),
    "n_best": ([], ["n_best_aggregation=true"]),
    "max_context": ([], ["max_context=true"]),
    "structure_tokens": (["--structure_tokens", "true"], []),
}

# Sizes for ~30-40 minutes on 2 idle cores: 300 nq pages make ~25,000 windows of 192 pieces, of which
# the answers and 1% of the rest are kept (~415 windows, 3 epochs). 256-piece windows instead of the
# demo's 192: a gold paragraph of the nq profile (median ~90 words, ~120 pieces) then fits a window far
# more often (at 192, 300 pages gave 20 LONG training windows for 47 LONG documents), at about the same
# inference cost (fewer windows).
FULL = {"config": "configs/train/demo.yaml", "seeds": [0, 1], "num_train": 300, "num_dev": 40, "num_test": 30,
        "max_words": None, "train": ["--negative_keep_rate", "0.01", "--max_seq_length", "256"]}
QUICK = {"config": "configs/train/tiny.yaml", "seeds": [0], "num_train": 12, "num_dev": 6, "num_test": 6,
         "max_words": 3000, "train": ["--max_train_examples", "null", "--max_dev_examples", "null"]}
REAL_TRAIN = ["--max_seq_length", "384", "--doc_stride", "128", "--max_question_length", "64",
              "--num_train_epochs", "6", "--max_dev_examples", "null"]


class StepFailed(RuntimeError):
    pass


def run(args: list, stdout=None) -> float:
    """Run `python ARGS` in the project root; StepFailed names the command when it exits non-zero."""
    print(f"$ python {' '.join(args)}", flush=True)
    t0 = time.perf_counter()
    r = subprocess.run([PY] + args, cwd=ROOT, stdout=stdout, stderr=subprocess.PIPE, text=True)
    if r.returncode != 0:
        tail = r.stderr.strip().splitlines()[-1:] or [""]
        raise StepFailed(f"`python {' '.join(args[:2])} ...` exited {r.returncode}: {tail[0]}")
    return time.perf_counter() - t0


def yes_no_split(submission: Path, gold_path: str) -> dict:
    """F1 of the YES and NO short answers: a row counts for YES when predicted YES or YES is valid."""
    from solution.metric import _figures, load_gold, parse_prediction, read_submission
    gold, preds = load_gold(gold_path), read_submission(submission)
    out = {}
    for label in ("YES", "NO"):
        tp = fp = fn = 0
        for eid, g in gold.items():
            said = parse_prediction(preds[f"{eid}_short"]) == label
            tp, fp, fn = tp + (said and label in g.short), fp + (said and label not in g.short), \
                fn + (not said and label in g.short)
        out[label.lower()] = _figures(tp, fp, fn)
    return out


def score(submission: Path, gold: str) -> dict:
    out = subprocess.run([PY, "-m", "solution.evaluate", "--submission", str(submission), "--gold", gold, "--json"],
                         cwd=ROOT, capture_output=True, text=True, check=True)
    return json.loads(out.stdout) | yes_no_split(submission, gold)


class CachedRunner:
    """Each model directory loaded once, its logits kept by batch: post-processing variants re-use them.

    Variants cut the same windows and batch them the same way (post-processing settings never change
    either), so every batch after the first pass is a cache hit."""

    def __init__(self):
        self.models: dict = {}

    def get(self, model_dir) -> tuple:
        """(run, tokenizer, meta) of a model directory, in the precision `submission.predict` picks."""
        import hashlib

        import torch

        from solution.inference import model_runner
        from solution.model import load_model_dir
        from submission.predict import resolve_precision

        key = str(Path(model_dir).resolve())
        if key not in self.models:
            model, tokenizer, meta = load_model_dir(model_dir)
            if resolve_precision("auto", "cpu") == "bf16":
                model = model.to(torch.bfloat16)  # as submission.predict does
            base, cache = model_runner(model, "cpu"), {}

            def run(batch, base=base, cache=cache):
                ids = batch["input_ids"].numpy()
                k = hashlib.sha1(ids.tobytes() + repr(ids.shape).encode()).hexdigest()
                if k not in cache:
                    cache[k] = base(batch)
                return cache[k]

            self.models[key] = (run, tokenizer, meta)
        return self.models[key]


RUNNERS = CachedRunner()


def predict(models: list, cfg, path: str, out_csv: Path) -> list:
    """Predictions of one model, or of several averaged (equal weights), written as a submission CSV."""
    import csv

    from solution.ensemble import weighted_runner
    from solution.inference import predict_documents, submission_rows
    from solution.nq import read_examples
    from solution.windows import Featurizer, WindowConfig

    loaded = [RUNNERS.get(m) for m in models]
    run = weighted_runner([r for r, _, _ in loaded], [1.0 / len(loaded)] * len(loaded))
    featurizer = Featurizer(loaded[0][1], WindowConfig(**loaded[0][2]["window"]))
    preds = list(predict_documents(run, featurizer, read_examples(path), cfg))
    with open(out_csv, "w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f)
        writer.writerow(["example_id", "PredictionString"])
        writer.writerows(submission_rows(preds))
    return preds


def evaluate(models: list, sets: list, corpus: dict, d: Path) -> dict:
    """Steps 1-3 of the module docstring for one variant; `models` has 1 or 2 directories (the first
    model's post-processing settings, with `sets` over them, as `submission.predict` does)."""
    from dataclasses import replace

    from solution.metric import load_gold
    from solution.postprocess import PostprocessConfig, apply_overrides, score_record
    from solution.tuning import tune

    d.mkdir(parents=True, exist_ok=True)
    cfg = apply_overrides(PostprocessConfig(**RUNNERS.get(models[0])[2]["postprocess"]), sets)
    dev_preds = predict(models, cfg, corpus["dev"], d / "dev.csv")
    dev = score(d / "dev.csv", corpus["dev"])
    best = tune([score_record(p) for p in dev_preds], load_gold(corpus["dev"]), cfg=cfg)
    (d / "tune.json").write_text(json.dumps({"thresholds": best["thresholds"], "after": best["result"]}) + "\n")
    row = {"dev_f1_untuned": dev["micro_f1"], "dev_f1_tuned": best["result"]["micro_f1"], "dev_untuned": dev,
           "thresholds": best["thresholds"], "test_f1": None}
    if corpus["test"]:
        predict(models, replace(cfg, **best["thresholds"]), corpus["test"], d / "test.csv")
        test = score(d / "test.csv", corpus["test_gold"])
        row |= {"test_f1": test["micro_f1"], "test": test}
    split = row.get("test") or dev  # no test gold (real corpus): the split of the untuned dev predictions
    row |= {f"{k}_f1": split[k]["micro_f1"] for k in ("long", "short", "yes", "no")}
    return row


def train(name: str, seed: int, extra: list, corpus: dict, plan: dict, out: Path) -> tuple:
    """Train one model (or reuse a finished one); (model dir, seconds)."""
    d = out / "models" / f"{name}-seed{seed}"
    if (d / "model" / "qa_config.json").is_file():
        return d / "model", 0.0
    secs = run(["-m", "solution.train", "--config", plan["config"], "--output_dir", str(d), "--seed", str(seed),
                "--train_file", corpus["train"], "--dev_file", corpus["dev"], "--eval_strategy", "no",
                "--disable_tqdm", "true", *corpus["train_overrides"], *extra])
    return d / "model", secs


def attempt(rows: list, base: dict, fn) -> None:
    """Append base | fn(); a failing step becomes the row's `error` instead of stopping the benchmark."""
    try:
        rows.append(base | fn())
    except (StepFailed, subprocess.CalledProcessError, OSError, ValueError) as e:
        rows.append(base | {"error": str(e)})
        print(f"--> {base['technique']} enabled={base['enabled']} seed {base['seed']}: FAILED: {e}", flush=True)


def benchmark(corpus: dict, plan: dict, out: Path, techniques: list) -> list:
    rows, baseline = [], {}
    for seed in plan["seeds"]:
        model, secs = train("baseline", seed, [], corpus, plan, out)
        res = []
        attempt(res, {"technique": "baseline", "enabled": False, "seed": seed},
                lambda: evaluate([model], [], corpus, out / f"baseline-seed{seed}") | {"train_seconds": round(secs, 1)})
        baseline[seed] = (model, res[0])
        for name in techniques:
            train_extra, sets = TECHNIQUES[name]
            rows.append(res[0] | {"technique": name, "enabled": False})
            base = {"technique": name, "enabled": True, "seed": seed, "train_overrides": train_extra, "set": sets}
            if train_extra:
                def own_model(name=name, train_extra=train_extra, sets=sets):
                    m, s = train(name, seed, train_extra, corpus, plan, out)
                    return evaluate([m], sets, corpus, out / f"{name}-seed{seed}") | {"train_seconds": round(s, 1)}
                attempt(rows, base, own_model)
            else:
                attempt(rows, base, lambda sets=sets, name=name: evaluate([model], sets, corpus, out / f"{name}-seed{seed}"))
    for seed, (_, r) in baseline.items():
        rows.append(r | {"technique": "ensemble", "enabled": False})
    if len(baseline) >= 2:
        seeds = sorted(baseline)[:2]
        attempt(rows, {"technique": "ensemble", "enabled": True, "seed": "+".join(map(str, seeds))},
                lambda: evaluate([baseline[s][0] for s in seeds], [], corpus, out / "ensemble"))
    return rows


def _f(x) -> str:
    return "-" if x is None else f"{x:.4f}"


def table(rows: list, title: str) -> str:
    lines = [f"| technique ({title}) | on | seed | dev F1 untuned | dev F1 tuned | test F1 (dev-tuned) "
             "| long | short | YES | NO |", "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        if "error" in r:
            lines.append(f"| {r['technique']} | {'on' if r['enabled'] else 'off'} | {r['seed']} "
                         f"| failed: {r['error'][:80]} |||||||")
            continue
        lines.append(f"| {r['technique']} | {'on' if r['enabled'] else 'off'} | {r['seed']} | {_f(r['dev_f1_untuned'])} "
                     f"| {_f(r['dev_f1_tuned'])} | {_f(r['test_f1'])} | {_f(r['long_f1'])} | {_f(r['short_f1'])} "
                     f"| {_f(r['yes_f1'])} | {_f(r['no_f1'])} |")
    return "\n".join(lines)


def chart(rows: list, path: Path, title: str) -> None:
    """Bars: each technique off and on (mean over seeds), test F1 where there is a test gold, else dev tuned."""
    import matplotlib
    matplotlib.use("Agg")  # no display on a training box
    import matplotlib.pyplot as plt
    key = "test_f1" if any(r.get("test_f1") is not None for r in rows) else "dev_f1_tuned"
    names = list(dict.fromkeys(r["technique"] for r in rows))
    fig, ax = plt.subplots(figsize=(1.4 * len(names) + 2, 4))
    for k, enabled in enumerate((False, True)):
        means = []
        for n in names:
            xs = [r[key] for r in rows if r["technique"] == n and r["enabled"] == enabled and r.get(key) is not None]
            means.append(sum(xs) / len(xs) if xs else 0.0)
        ax.bar([i + (k - 0.5) * 0.38 for i in range(len(names))], means, 0.38, label="on" if enabled else "off")
    ax.set_xticks(range(len(names)), names, rotation=20)
    ax.set_ylim(0, 1)
    ax.set_ylabel(key.replace("_", " ") + " (mean over seeds)")
    ax.set_title(title)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def prepare_corpus(args, plan: dict, out: Path) -> dict:
    if args.corpus == "real":
        return {"train": str(REAL / "simplified-nq-train-sample.jsonl"), "dev": str(REAL / "simplified-nq-dev-sample.jsonl"),
                "test": None, "test_gold": None, "train_overrides": plan["train"] + REAL_TRAIN}
    data = out / "data"
    cmd = ["-m", "solution.synth", "--profile", "nq", "--out", str(data), "--seed", "0",
           "--num-train", str(plan["num_train"]), "--num-dev", str(plan["num_dev"]), "--num-test", str(plan["num_test"])]
    run(cmd + (["--max-words", str(plan["max_words"])] if plan["max_words"] else []))
    return {"train": str(data / "simplified-nq-train.jsonl"), "dev": str(data / "simplified-nq-dev.jsonl"),
            "test": str(data / "simplified-nq-test.jsonl"), "test_gold": str(data / "simplified-nq-test-gold.jsonl"),
            "train_overrides": plan["train"]}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--json", required=True, help="write the rows here (a JSON list); the chart goes next to it (.png)")
    p.add_argument("--corpus", choices=("nq", "real"), default="nq")
    p.add_argument("--quick", action="store_true", help="tiny random model, a handful of short documents, 1 seed")
    p.add_argument("--out", default=None, help="run directory (default runs/answers/CORPUS, or -quick)")
    p.add_argument("--techniques", default=",".join(TECHNIQUES), help="comma-separated rows of TECHNIQUES to run")
    args = p.parse_args(argv)
    techniques = args.techniques.split(",")
    unknown = [t for t in techniques if t not in TECHNIQUES]
    if unknown:
        p.error(f"unknown technique(s) {unknown}; choose from {sorted(TECHNIQUES)}")
    plan = QUICK if args.quick else FULL
    out = Path(args.out or f"runs/answers/{args.corpus}" + ("-quick" if args.quick else ""))
    if args.corpus == "real" and not REAL.is_dir():
        print(f"error: {REAL} not found: --corpus real needs the real NQ sample beside the checkout", file=sys.stderr)
        return 2
    t0 = time.perf_counter()
    try:
        corpus = prepare_corpus(args, plan, out)
        rows = benchmark(corpus, plan, out, techniques)
    except StepFailed as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    label = "nq profile" if args.corpus == "nq" else REAL_NOTE
    for r in rows:
        r["corpus"] = args.corpus + ("-quick" if args.quick else "")
        if args.corpus == "real":
            r["note"] = REAL_NOTE
    path = Path(args.json)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(rows, indent=1) + "\n")
    print("\n" + table(rows, label))
    chart([r for r in rows if "error" not in r], path.with_suffix(".png"), f"answer techniques, {label}")
    failed = [r for r in rows if "error" in r]
    print(f"\n{len(rows)} rows ({len(failed)} failed) in {time.perf_counter() - t0:.0f}s -> {path}, "
          f"{path.with_suffix('.png')}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
