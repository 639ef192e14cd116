"""What each answer technique of the winning Kaggle solutions is worth: dev and test micro-F1 on a corpus shaped like real NQ.

    python scripts/benchmark_answers.py --json docs/benchmarks/answers.json          # hours on 2 cores
    python scripts/benchmark_answers.py --corpus real --json docs/benchmarks/answers-real.json
    python scripts/benchmark_answers.py --quick --json runs/answers-quick/answers.json  # smoke run, ~2 minutes
    python scripts/benchmark_answers.py --corpus-seed 7 --seeds 0 --techniques "" --json runs/seed7/answers.json \
        --out runs/seed7                 # the documented recipe alone, retrained on a corpus of another seed
    python scripts/benchmark_answers.py --seeds 1 --no-ensembles --techniques thresholds --json runs/a1.json
    python scripts/benchmark_answers.py --merge runs/a0.json runs/a1.json --json docs/benchmarks/answers.json

Trains the nq-profile recipe in its two stages, with the seeds of `--seeds` (0 and 1), one model after
the other (never two at once: they would share the cores): stage 1 is the demo's training
(configs/train/demo.yaml) on easy pages (`solution.synth`, seed 0), once per seed; stage 2 is
configs/train/nq-profile.yaml (MiniLM, 192-piece windows, a first pass of the 8 windows sharing most
of the question's words, trained on 3 of them) from stage 1's model, on `solution.synth --profile nq`
(`--profile`; seed `--corpus-seed`, 0 by default: the largest of `--train-sizes` training pages, 400 dev,
400 test; the corpus stays under `--out`, data/). `--profile nq-lexical` is the earlier profile whose
questions share their words with the statements. Each technique is one row
of TECHNIQUES: the training overrides it needs (a stage 2 of its own per seed) and the
`submission.predict --set KEY=VALUE` post-processing overrides it needs (the baseline model, no
retraining). A model's `train_seconds` counts both stages. Every variant is scored the same way, through the same functions
`submission.predict` and `solution.evaluate --tune` use, in this process:

1. predict dev and score it: dev micro-F1 untuned;
2. tune the thresholds on dev (`solution.scoring.tuning.tune`, the search behind `evaluate --tune`), under
   the variant's settings: dev micro-F1 tuned (`dev_f1_tuned`);
3. predict test with those thresholds, score it against the test gold: test micro-F1 with
   dev-tuned thresholds (`test_f1`), split long / short / YES / NO.

Every F1 carries its 95% bootstrap interval over documents (`solution.scoring.intervals.f1_interval`;
`dev_f1_ci` is that of the dev-tuned predictions), the number of documents, MLE-bench's score
of the same predictions (`solution.scoring.mlebench`: `dev_mlebench`, `test_mlebench`), and the NQ paper's units:
the official long and short F1 of the same answers (`solution.scoring.nq_official`, the natural-questions
package's F1 of the answers as written; five-way gold: an answer where 2 of 5 annotators gave one),
each with its bootstrap interval (`dev_nq_long_f1`, `dev_nq_long_f1_ci`, `test_nq_short_f1`, ...). A technique's
enabled row carries its paired difference against the same seed's baseline on the same documents
(`intervals.paired_difference`: `test_f1_delta`, `dev_f1_delta` and their `_ci`).

Beside the techniques:

* `lexical`: `solution.lexical` (no training), its two thresholds tuned on dev, applied to test;
  each baseline row carries `lexical_delta` (baseline minus lexical on the same test documents).
* `bm25`: `solution.lexical --method bm25` (no training): Okapi BM25 over each page's top-level
  candidates, long answers only, its threshold tuned on dev; `bm25_delta` on each baseline row.
* `sentences`: `solution.lexical --method sentences` (no training on our pages): the backbone's own
  sentence vectors (all-MiniLM-L6-v2, trained on question-passage pairs including NQ's), the candidate
  holding the sentence nearest the question, title masked, long answers only, its threshold tuned on dev;
  `sentences_delta` on each baseline row. ~3 CPU seconds a page: the row embeds every dev and test page.
* On each baseline row, `best_reference` / `best_reference_delta` (and `_ci`): the no-training row with
  the best test micro-F1, and the baseline minus it, paired; `best_long_reference` /
  `best_long_reference_delta` (and `_ci`): the same on the long rows alone (every row's `test_long_f1`,
  `dev_long_f1` and their `_ci`; each reference's `NAME_long_delta`), since a reference that answers
  long only is judged fairly there.
* `first_paragraph`: the NQ paper's reference (Kwiatkowski et al. 2019: 27.8 long F1 on NQ dev): the
  first top-level paragraph candidate (`<P>`) as the long answer, never a short answer; no model, no
  thresholds.
* `ensemble`: the baselines of the first two seeds averaged, and of three (a third seed trained for
  it alone), each against its best member on dev (`best_member`; the deltas are ensemble minus it).
* `learning_curve`: the first seed's baseline trained on the first N pages of the same file
  (`--max_train_examples N`) for every N of `--train-sizes`; the largest is the baseline itself.
* `yes_no_repeat_yes_no`, `yes_no_pages_yes_no`, `yes_no_whole_yes_no`, `yes_no_balanced_yes_no`: the
  baseline's model (off) and the technique's (on) on dev and test with the yes/no pages added, as below.
  `yes_no_pages` trains on the corpus's pages and YES_NO_TRAIN_PAGES yes/no pages of another seed
  (`solution.synth --answer-types YES,NO`, corpus seed + 2); `yes_no_whole` the same pages with
  `--long_overrun_yes_no false`; `yes_no_balanced` those and each NO window twice (`--no_repeat 2`).
* `--references-only`: the four no-training rows alone on the corpus, nothing trained.
* `--no-ensembles`: the techniques of `--seeds` alone; `--merge A.json B.json ...`: the records of a run
  made in pieces (one seed, then another) written as one, a later record's row replacing the same row.
  Each row keeps the corpus its record says (never this command's `--corpus-seed`); records of two
  corpora, or two that do not say their corpus seed (the nq-lexical record's rows say only "nq"), cannot
  be told apart and are refused, naming both files.
* `thresholds_yes_no`: the `thresholds` technique (separate YES and NO thresholds) again, on dev and test
  with 80 yes/no questions added to each (nq-profile pages of another seed, `solution.synth --answer-types
  YES,NO`): at NQ's 1.5% the 400 dev pages hold only 6.

Post-processing never changes the windows or the model, so a window runs once per model: its logits
are kept (`CachedRunner`) and every variant and ensemble re-uses them; only the windows a variant
adds (`max_windows_per_document=0` runs every window of a page) are new work. A variant whose step
fails (a flag this checkout does not have yet) is kept as a row with its `error`, and the script
exits 1 after writing everything else.

`--corpus real` trains on the 49 real training lines and scores the 10 real dev lines in
../shared/data/nq-real (no test gold there: test_f1 is null). Far too few documents to decide
anything; the rows say so.
"""

from __future__ import annotations

import argparse
import functools
import hashlib
import json
import re
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from solution.common import cli  # noqa: E402
from solution.common.fsutil import mark_written, write_record  # noqa: E402

PY = sys.executable
SCRIPT = "scripts/benchmark_answers.py"  # whose records (--json, its charts) it may write over
REAL = ROOT.parent / "shared" / "data" / "nq-real"
REAL_NOTE = "10 real dev documents: far too few to decide anything"

# The training file with the yes/no pages added (`yes_no_train_corpus`), every page of it.
YES_NO_PAGES = ["--train_file", "{yes_no_train}", "--max_train_examples", "{yes_no_train_pages}"]
YES_NO_WHOLE = [*YES_NO_PAGES, "--long_overrun_yes_no", "false"]
# technique -> (training overrides, prediction --set overrides). Names as docs/answers.md's tables give them.
TECHNIQUES = {
    "top_level": (["--nested_to_top_level", "true"], ["top_level_only=true"]),
    "no_answer_score": ([], ["subtract_type_null=true", "score_space=probs"]),
    "thresholds": ([], ["separate_thresholds=true"]),
    "n_best": ([], ["n_best_aggregation=true"]),
    "max_context": ([], ["max_context=true"]),
    "structure_tokens": (["--structure_tokens", "true"], []),
    # The first pass's cost and benefit: every window of a page (0), half of the recipe's 8, and twice them
    # (on the nq profile 16 windows hold the gold long answer on ~80% of pages, 8 on ~70%).
    "max_windows": ([], ["max_windows_per_document=0"]),
    "max_windows_4": ([], ["max_windows_per_document=4"]),
    "max_windows_16": ([], ["max_windows_per_document=16"]),
    # Yes/no windows trained on 8 times (sampling.yes_no_repeat): scored also on the yes/no supplement.
    "yes_no_repeat": (["--yes_no_repeat", "8"], []),
    # The training pages and YES_NO_TRAIN_PAGES yes/no pages more (`yes_no_train_corpus`): as many yes/no
    # answers as real NQ's training set holds for every 300 pages or so, not a repeat of the same 60.
    "yes_no_pages": (YES_NO_PAGES, []),
    # `yes_no_pages` with YES and NO labelled only on windows that hold the whole paragraph (LONG's cut
    # labels as they are): the window holding a long paragraph's start need not hold its statement.
    "yes_no_whole": (YES_NO_WHOLE, []),
    # `yes_no_whole` with each NO window twice: the pages' two YES to a NO become one to one.
    "yes_no_balanced": ([*YES_NO_WHOLE, "--no_repeat", "2"], []),
    # Four times the batch at twice the learning rate (square-root scaling), a quarter of the steps: on one
    # H100 the recipe's batch-8 step is launch overhead (24 ms at 8 windows, 21 ms at 32), so a batch of 32
    # trains ~4.6x the windows a second there, if it learns as well from the same pages.
    "batch_32": (["--per_device_train_batch_size", "32", "--learning_rate", "2.0e-4"], []),
}
# Retraining techniques whose on row is scored again on dev and test with the yes/no supplement added,
# beside the baseline's model there (rows named TECHNIQUE_yes_no).
YES_NO_TRAINED = ("yes_no_repeat", "yes_no_pages", "yes_no_whole", "yes_no_balanced")
# Real NQ's training set holds ~4,400 yes/no answers (1.4% of 307,373 pages); 4,000 pages of the profile at
# that share hold ~60. `yes_no_pages` adds this many yes/no pages (two YES to a NO) of another corpus seed.
YES_NO_TRAIN_PAGES = 800
# The no-training rows, in the record's order (`reference_rows`).
REFERENCES = ("lexical", "bm25", "first_paragraph", "sentences")
# Rows that are not a TECHNIQUES pair.
NO_TECHNIQUE = ("baseline", *REFERENCES, "ensemble", "learning_curve")
# `thresholds` again, on dev and test with yes/no questions added (`yes_no` of them, `solution.synth
# --answer-types YES,NO`): at NQ's 1.5% the 400 dev pages hold 6, too few for the YES and NO thresholds to
# be measured; the rows are named apart, since their documents are not the other rows'.
YES_NO_TECHNIQUE = ("thresholds_yes_no", ["separate_thresholds=true"])

# The recipe as it is (no overrides): stage 1 is the demo's training on easy pages (`warm_start`: its
# config, and the `solution.synth` options of its corpus), stage 2 the nq-profile config from its model.
# ~62 windows of 192 pieces a page, of which the first pass runs 8: 800 dev and test pages are ~6,400
# windows a model; max_windows=0 runs the other ~43,000 once per seed.
FULL = {"config": "configs/train/nq-profile.yaml", "seeds": [0, 1], "train_sizes": [500, 1000, 2000, 4000],
        "num_dev": 400, "num_test": 400, "yes_no": 80, "max_words": None, "train": [],
        "warm_start": {"config": "configs/train/demo.yaml", "synth": []}}
# The tiny random model on a dozen short pages; the recipe's first pass (8 windows) so that both
# max_windows rows change something, its overrun labels (which `yes_no_whole` needs), and a tiny stage 1
# so that the warm start runs.
QUICK = {"config": "configs/train/tiny.yaml", "seeds": [0], "train_sizes": [6, 12], "num_dev": 6, "num_test": 6,
         "yes_no": 3, "max_words": 3000, "train": ["--max_train_examples", "null", "--max_dev_examples", "null",
                                      "--max_windows_per_document", "8", "--long_overrun_labels", "true",
                                      "--long_overrun", "true"],
         "warm_start": {"config": "configs/train/tiny.yaml",
                        "synth": ["--num-train", "12", "--num-dev", "4", "--num-test", "4"]}}
REAL_TRAIN = ["--max_seq_length", "384", "--doc_stride", "128", "--max_question_length", "64",
              "--num_train_epochs", "6", "--max_dev_examples", "null"]
NUM_ENSEMBLE_MEMBERS = 3  # ensembles of the first 2 and the first 3 of these seeds


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


# ---------------------------------------------------------------------------
# Scoring: F1 with its interval and MLE-bench's score, from {row id: PredictionString}


@functools.lru_cache(maxsize=None)
def gold_of(path: str) -> dict:
    from solution.scoring.metric import load_gold
    return load_gold(path)


@functools.lru_cache(maxsize=None)
def answers_of(path: str) -> list:
    from solution.scoring.mlebench import read_answers
    return read_answers(path)


def yes_no_split(predictions: dict, gold: dict) -> dict:
    """F1 of the YES and NO short answers (a row counts for YES when predicted YES or YES is valid) and, where
    there are pages of both, what the rows say on them (`polarity`)."""
    from solution.scoring.intervals import polarity_gap
    from solution.scoring.metric import _figures, parse_prediction, yes_no_polarity
    out, both = {}, [0, 0, 0]
    for label in ("YES", "NO"):
        tp = fp = fn = 0
        for eid, g in gold.items():
            said = parse_prediction(predictions[f"{eid}_short"]) == label
            tp, fp, fn = tp + (said and label in g.short), fp + (said and label not in g.short), \
                fn + (not said and label in g.short)
        out[label.lower()] = _figures(tp, fp, fn)
        both = [both[0] + tp, both[1] + fp, both[2] + fn]
    out["yes_no"] = _figures(*both)  # YES and NO together: a row counts when either is said or valid
    polarity = yes_no_polarity(predictions, gold)
    if polarity:
        out["polarity"] = polarity | polarity_gap(polarity)
    return out


def score_rows(predictions: dict, gold_path: str) -> dict:
    """`metric.score` (what `solution.evaluate` prints) with the YES / NO split."""
    from solution.scoring.metric import score
    gold = gold_of(gold_path)
    return score(predictions, gold) | yes_no_split(predictions, gold)


@functools.lru_cache(maxsize=None)
def nq_gold_of(path: str):
    from solution.scoring.nq_official import load_gold
    return load_gold(path)


def nq_figures(split: str, predictions: dict, gold_path: str) -> dict:
    """{SPLIT_nq_long_f1, SPLIT_nq_long_f1_ci, SPLIT_nq_short_f1, SPLIT_nq_short_f1_ci}: the package's F1 of the
    rows as written, each with its bootstrap interval over documents."""
    from solution.scoring import nq_official
    from solution.scoring.intervals import f1_interval
    gold = nq_gold_of(gold_path)
    labels = nq_official.rows_labels(predictions)
    official, counts = nq_official.score(labels, gold), nq_official.document_counts(labels, gold)
    return {k: v for kind in ("long", "short") for k, v in (
        (f"{split}_nq_{kind}_f1", official[f"{kind}-answer-f1"]), (f"{split}_nq_{kind}_f1_ci", f1_interval(counts[kind])["ci"]))}


def figures(split: str, predictions: dict, gold_path: str) -> tuple:
    """({SPLIT_f1_ci, num_SPLIT_documents, SPLIT_mlebench, SPLIT_long_f1 and _ci, SPLIT_nq_...}, {SPLIT:
    per-document (tp, fp, fn), SPLIT_long: the same of the long rows alone}) of one split."""
    from solution.scoring.intervals import f1_interval
    from solution.scoring.metric import document_counts
    from solution.scoring.mlebench import score_predictions
    counts = document_counts(predictions, gold_of(gold_path))
    long_counts = document_counts(predictions, gold_of(gold_path), kinds=("long",))
    iv, long_iv = f1_interval(counts), f1_interval(long_counts)
    return {f"{split}_f1_ci": iv["ci"], f"num_{split}_documents": iv["num_documents"],
            f"{split}_mlebench": score_predictions(predictions, answers_of(gold_path))["score"],
            f"{split}_long_f1": long_iv["f1"], f"{split}_long_f1_ci": long_iv["ci"],
            **nq_figures(split, predictions, gold_path)}, {split: counts, f"{split}_long": long_counts}


def deltas(ref: dict, row: dict) -> dict:
    """{test,dev}_f1_delta and _ci: `row` minus `ref` on the same documents (a paired bootstrap)."""
    from solution.scoring.intervals import paired_difference
    out = {}
    for split in ("test", "dev"):
        a, b = ref.get("_counts", {}).get(split), row.get("_counts", {}).get(split)
        if a is not None and b is not None:
            d = paired_difference(a, b)
            out |= {f"{split}_f1_delta": d["delta"], f"{split}_f1_delta_ci": d["ci"]}
    return out


def reference_deltas(references: dict, base: dict) -> dict:
    """The baseline against each no-training row of `references` ({name: row}), paired on the same test
    documents: {NAME_delta, NAME_delta_ci} in micro-F1 and {NAME_long_delta, NAME_long_delta_ci} in the F1 of
    the long rows alone; and against the best of them on test in each (`best_reference` and its delta by
    micro-F1, `best_long_reference` and its long delta by long-row F1): a reference that answers long only
    can be the best on long answers while another is the best on both rows."""
    out = {}
    for key, figure, best_name in (("test", "test_f1", "best_reference"),
                                   ("test_long", "test_long_f1", "best_long_reference")):
        suffix = "_long_delta" if key == "test_long" else "_delta"
        out |= _paired_against(references, base, key, figure, suffix, best_name)
    return out


def _paired_against(references: dict, base: dict, key: str, figure: str, suffix: str, best_name: str) -> dict:
    """{NAME+suffix, NAME+suffix_ci} of the baseline's `_counts[key]` minus each reference's, and `best_name`
    (the reference with the highest `figure`) with its difference as `best_name`_delta, _delta_ci."""
    from solution.scoring.intervals import paired_difference
    out, b = {}, base.get("_counts", {}).get(key)
    scored = {name: r for name, r in references.items() if r.get("_counts", {}).get(key) is not None}
    if b is None or not scored:
        return out
    for name, r in scored.items():
        d = paired_difference(r["_counts"][key], b)
        out |= {f"{name}{suffix}": d["delta"], f"{name}{suffix}_ci": d["ci"]}
    best = max(scored, key=lambda name: scored[name][figure])  # a tie: the first of REFERENCES
    return out | {best_name: best, f"{best_name}_delta": out[f"{best}{suffix}"],
                  f"{best_name}_delta_ci": out[f"{best}{suffix}_ci"]}


# ---------------------------------------------------------------------------
# Running the models: each window once per model


class CachedRunner:
    """Each model directory loaded once, its logits kept by window: post-processing variants re-use them.

    A window is known by its token ids (padding aside). A batch whose windows all ran before is a cache
    hit; one with new windows runs those alone, at the batch's width. The first pass of a model runs its
    batches whole, as `submission.predict` does (the same logits); a variant's mixed batch takes each
    old window's logits from the batch it first ran in (the same up to rounding)."""

    def __init__(self):
        self.models: dict = {}

    def get(self, model_dir) -> tuple:
        """(run, tokenizer, meta) of a model directory, in the precision `submission.predict` picks."""
        import torch

        from solution.answers.inference import model_runner
        from solution.model.qa_model import load_model_dir
        from submission.predict import resolve_precision

        key = str(Path(model_dir).resolve())
        if key not in self.models:
            model, tokenizer, meta = load_model_dir(model_dir)
            if resolve_precision("auto", "cpu") == "bf16":
                model = model.to(torch.bfloat16)  # as submission.predict does
            base, cache = model_runner(model, "cpu"), {}
            self.models[key] = (functools.partial(cached_run, base, cache), tokenizer, meta)
        return self.models[key]


def cached_run(base, cache: dict, batch: dict) -> tuple:
    """`base(batch)`'s (start [B, S], end [B, S], type [B, 5]) logits, running only the windows `cache` lacks."""
    import numpy as np

    ids, lengths = batch["input_ids"].numpy(), batch["attention_mask"].numpy().sum(axis=1)
    keys = [hashlib.sha1(row[:n].tobytes()).hexdigest() for row, n in zip(ids, lengths)]
    new = [i for i, k in enumerate(keys) if k not in cache]
    if new:
        sub = batch if len(new) == len(keys) else \
            {k: batch[k][new] for k in ("input_ids", "attention_mask", "token_type_ids")}
        s, e, t = base(sub)
        for j, i in enumerate(new):
            cache[keys[i]] = (s[j, :lengths[i]].copy(), e[j, :lengths[i]].copy(), t[j].copy())
    start = np.full(ids.shape, -1e4, dtype=np.float32)  # past a window's length: padding, never read
    end = start.copy()
    for i, k in enumerate(keys):
        start[i, :lengths[i]], end[i, :lengths[i]] = cache[k][0], cache[k][1]
    return start, end, np.stack([cache[k][2] for k in keys])


RUNNERS = CachedRunner()


def predict(models: list, cfg, path: str, out_csv: Path, window_sets: list = ()) -> tuple:
    """(document predictions, {row id: PredictionString}, windows run) of one model, or of several
    averaged (equal weights), with `window_sets` (--set items of the window settings) over the first
    model's window settings; the rows are also written as a submission CSV."""
    import csv

    from solution.answers.ensemble import weighted_runner
    from solution.answers.inference import predict_documents, submission_rows, with_overrides
    from solution.data.nq import read_examples
    from solution.model.sentences import first_pass_embed
    from solution.windows.featurizer import Featurizer, WindowConfig

    loaded = [RUNNERS.get(m) for m in models]
    averaged, num_windows = weighted_runner([r for r, _, _ in loaded], [1.0 / len(loaded)] * len(loaded)), [0]

    def counted(batch):
        num_windows[0] += len(batch["input_ids"])
        return averaged(batch)

    window, _ = with_overrides(WindowConfig(**loaded[0][2]["window"]), cfg, window_sets)
    preds = list(predict_documents(counted, Featurizer(loaded[0][1], window, embed=first_pass_embed(window)),
                                 read_examples(path), cfg))
    rows = dict(submission_rows(preds))
    with open(out_csv, "w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f)
        writer.writerow(["example_id", "PredictionString"])
        writer.writerows(rows.items())
    return preds, rows, num_windows[0]


def evaluate(models: list, sets: list, corpus: dict, d: Path) -> dict:
    """Steps 1-3 of the module docstring for one variant; `models` has 1 or more directories (the first
    model's post-processing settings, with `sets` over them, as `submission.predict` does)."""
    from dataclasses import replace

    from solution.answers.inference import split_overrides, with_overrides
    from solution.answers.postprocess import PostprocessConfig, score_record
    from solution.scoring.metric import read_submission
    from solution.scoring.tuning import predictions_with, tune
    from solution.windows.featurizer import WindowConfig

    d.mkdir(parents=True, exist_ok=True)
    meta = RUNNERS.get(models[0])[2]
    _, cfg = with_overrides(WindowConfig(**meta["window"]), PostprocessConfig(**meta["postprocess"]), sets)
    window_sets, _ = split_overrides(sets)
    dev_preds, _, dev_windows = predict(models, cfg, corpus["dev"], d / "dev.csv", window_sets)
    dev = score_rows(read_submission(d / "dev.csv"), corpus["dev"])  # the CSV as the CLI would read it
    records = [score_record(p) for p in dev_preds]
    best = tune(records, gold_of(corpus["dev"]), cfg=cfg)
    tuned = replace(cfg, **best["thresholds"])
    (d / "tune.json").write_text(json.dumps({"thresholds": best["thresholds"], "after": best["result"]}) + "\n")
    dev_figures, counts = figures("dev", predictions_with(records, tuned), corpus["dev"])
    row = {"dev_f1_untuned": dev["micro_f1"], "dev_f1_tuned": best["result"]["micro_f1"], **dev_figures,
           "dev_untuned": dev, "thresholds": best["thresholds"], "num_dev_windows": dev_windows, "test_f1": None,
           "_counts": counts}
    if corpus["test"]:
        _, test_rows, test_windows = predict(models, tuned, corpus["test"], d / "test.csv", window_sets)
        test = score_rows(read_submission(d / "test.csv"), corpus["test_gold"])
        test_figures, counts = figures("test", test_rows, corpus["test_gold"])
        row["_counts"] |= counts
        row |= {"test_f1": test["micro_f1"], **test_figures, "test": test, "num_test_windows": test_windows}
    split = row.get("test") or dev  # no test gold (real corpus): the split of the untuned dev predictions
    return row | {f"{k}_f1": split[k]["micro_f1"] for k in ("long", "short", "yes", "no", "yes_no")}


def lexical_row(corpus: dict, method: str = "words") -> dict:
    """A no-training answerer of `solution.lexical` (word matching, or `bm25`): thresholds tuned on dev,
    applied to test."""
    from solution.answers.postprocess import PostprocessConfig
    from solution.model.references import lexical_records
    from solution.scoring.tuning import tuned_on_dev
    from solution.scoring.tuning import predictions_with

    dev_records = lexical_records(corpus["dev"], method=method)
    tuned, best = tuned_on_dev(dev_records, gold_of(corpus["dev"]))
    dev = score_rows(predictions_with(dev_records, PostprocessConfig()), corpus["dev"])
    dev_figures, counts = figures("dev", predictions_with(dev_records, tuned), corpus["dev"])
    row = {"dev_f1_untuned": dev["micro_f1"], "dev_f1_tuned": best["result"]["micro_f1"], **dev_figures,
           "dev_untuned": dev, "thresholds": best["thresholds"], "test_f1": None, "_counts": counts}
    if corpus["test"]:
        test_rows = predictions_with(lexical_records(corpus["test"], method=method), tuned)
        test = score_rows(test_rows, corpus["test_gold"])
        test_figures, counts = figures("test", test_rows, corpus["test_gold"])
        row["_counts"] |= counts
        row |= {"test_f1": test["micro_f1"], **test_figures, "test": test}
    split = row.get("test") or dev
    return row | {f"{k}_f1": split[k]["micro_f1"] for k in ("long", "short", "yes", "no", "yes_no")}


def first_paragraph_rows(path: str) -> dict:
    """{row id: PredictionString} of the NQ paper's first-paragraph baseline: the first top-level candidate
    that is a paragraph (`<P>`) as the long answer, blank where a page has none; every short row blank."""
    from solution.data.nq import read_examples
    rows = {}
    for ex in read_examples(path):
        first = next((c for c in ex.candidates if c.top_level and ex.tokens[c.start_token] == "<P>"), None)
        rows[f"{ex.example_id}_long"], rows[f"{ex.example_id}_short"] = first.as_prediction() if first else "", ""
    return rows


def first_paragraph_row(corpus: dict) -> dict:
    """The first-paragraph reference scored as every row is: no thresholds, so dev untuned is dev tuned."""
    dev_rows = first_paragraph_rows(corpus["dev"])
    dev = score_rows(dev_rows, corpus["dev"])
    dev_figures, counts = figures("dev", dev_rows, corpus["dev"])
    row = {"dev_f1_untuned": dev["micro_f1"], "dev_f1_tuned": dev["micro_f1"], **dev_figures, "dev_untuned": dev,
           "thresholds": None, "test_f1": None, "_counts": counts}
    if corpus["test"]:
        test_rows = first_paragraph_rows(corpus["test"])
        test = score_rows(test_rows, corpus["test_gold"])
        test_figures, counts = figures("test", test_rows, corpus["test_gold"])
        row["_counts"] |= counts
        row |= {"test_f1": test["micro_f1"], **test_figures, "test": test}
    split = row.get("test") or dev
    return row | {f"{k}_f1": split[k]["micro_f1"] for k in ("long", "short", "yes", "no", "yes_no")}


@functools.lru_cache(maxsize=None)
def file_digest(path: str) -> str:
    """A file's sha256, once per file a run (the training file is hashed for every model trained on it)."""
    from solution.common.fsutil import file_digest as digest

    return digest(path)


def precision_args() -> list:
    """float32 where the CPU has no native bf16: emulated bf16 trains ~14x slower (as `make demo` does)."""
    from solution.common.precision import cpu_native_bf16
    return [] if cpu_native_bf16() else ["--mixed_precision", "no"]


def train_run(name: str, args: list, config: str, train_file: str, out: Path) -> tuple:
    """`solution.train ARGS`, or the model trained from the same command on the same bytes; (model dir, seconds).

    The directory is named by a digest of the command, the config file and the training file, so a
    model of an earlier plan (other sizes, another corpus) is never taken for this one, nor overwritten."""
    from solution.common.fsutil import atomic_write_text

    key = hashlib.sha1(json.dumps([args, file_digest(str(ROOT / config)), file_digest(train_file)]).encode()).hexdigest()[:10]
    d = out / "models" / f"{name}-{key}"
    done = d / "benchmark_train.json"
    secs = trained_seconds(done) if (d / "model" / "qa_config.json").is_file() else None
    if secs is not None:
        return d / "model", secs
    # The plan's own folder: a training stopped midway there is started again, not continued.
    secs = run(["-m", "solution.train", *args, "--output_dir", str(d), "--overwrite_output_dir", "true"])
    atomic_write_text(done, json.dumps({"command": args, "train_seconds": round(secs, 1)}) + "\n")
    return d / "model", round(secs, 1)


def trained_seconds(done: Path) -> float | None:
    """The seconds a finished training recorded in its marker; None where there is none or it cannot be
    read (a marker cut short): that model is trained again."""
    from solution.common.jsonio import JsonError, read_json_object

    try:
        secs = read_json_object(done).get("train_seconds") if done.exists() else None
    except JsonError:
        return None
    return secs if _number(secs) else None


def warm_start(seed: int, corpus: dict, plan: dict, out: Path) -> tuple:
    """Stage 1 of the recipe for this seed (trained once, shared by every stage 2 of the seed): the
    arguments that start stage 2 from its model, and its training seconds. ([], 0) without one."""
    ws = plan.get("warm_start")
    if not ws:
        return [], 0.0
    args = ["--config", ws["config"], "--seed", str(seed), "--train_file", corpus["warm_train"], "--dev_file",
            corpus["warm_dev"], "--eval_strategy", "no", "--disable_tqdm", "true", *precision_args()]
    model, secs = train_run(f"warm-seed{seed}", args, ws["config"], corpus["warm_train"], out)
    return ["--model_name_or_path", str(model), "--pretrained", "true"], secs


def train(name: str, seed: int, extra: list, corpus: dict, plan: dict, out: Path, pages: int | None = None) -> tuple:
    """Train one model (stage 2 from the seed's stage 1, if the plan has one) on the first `pages` training
    pages, every page of the corpus by default: the config's own max_train_examples would otherwise cap a
    larger corpus while the row said it had trained on all of it. `extra`'s {KEY} items are the corpus's
    (a technique's own training file). (model dir, seconds of both stages)."""
    warm, warm_secs = warm_start(seed, corpus, plan, out)
    extra = [corpus[a[1:-1]] if a.startswith("{") and a.endswith("}") else a for a in extra]
    args = ["--config", plan["config"], "--seed", str(seed), "--train_file", corpus["train"], "--dev_file",
            corpus["dev"], "--eval_strategy", "no", "--disable_tqdm", "true", *precision_args(),
            *corpus["train_overrides"], *warm, "--max_train_examples", str(pages or corpus["num_train_documents"]),
            *extra]
    train_file = args[len(args) - 1 - args[::-1].index("--train_file") + 1]  # the last one given is the one used
    model, secs = train_run(f"{name}-seed{seed}", args, plan["config"], train_file, out)
    return model, round(secs + warm_secs, 1)


# ---------------------------------------------------------------------------
# The rows


def attempt(base: dict, fn) -> dict:
    """base | fn(); a failing step becomes the row's `error` instead of stopping the benchmark."""
    from solution.scoring.metric import SubmissionError  # a ValueError: named for the reader
    try:
        return base | fn()
    except (StepFailed, subprocess.CalledProcessError, OSError, ValueError, SubmissionError) as e:
        print(f"--> {base['technique']} enabled={base['enabled']} seed {base['seed']}: FAILED: {e}", flush=True)
        return base | {"error": str(e)}


def trained(name: str, seed: int, train_extra: list, sets: list, corpus: dict, plan: dict, out: Path,
            pages: int | None = None) -> dict:
    """A model of its own, trained then evaluated (its directory kept in the row as `_model`)."""
    model, secs = train(name, seed, train_extra, corpus, plan, out, pages)
    return evaluate([model], sets, corpus, out / f"{name}-seed{seed}") | {"train_seconds": secs, "_model": model}


def baseline(seed: int, corpus: dict, plan: dict, out: Path, references: dict) -> dict:
    head = {"technique": "baseline", "enabled": False, "seed": seed,
            "num_train_documents": corpus["num_train_documents"]}
    row = attempt(head, lambda: trained("baseline", seed, [], [], corpus, plan, out))
    return row | reference_deltas(references, row)


def technique_rows(base: dict, techniques: list, corpus: dict, plan: dict, out: Path) -> list:
    """Each technique's off row (the baseline) and on row, with the on row's paired deltas against it."""
    rows, seed = [], base["seed"]
    for name in techniques:
        train_extra, sets = TECHNIQUES[name]
        rows.append(base | {"technique": name, "enabled": False})
        head = {"technique": name, "enabled": True, "seed": seed, "train_overrides": train_extra, "set": sets,
                "num_train_documents": corpus["num_train_documents"]}
        if "_model" not in base:
            rows.append(head | {"error": f"the baseline of seed {seed} failed"})
            continue
        if train_extra:
            row = attempt(head, lambda n=name, t=train_extra, s=sets: trained(n, seed, t, s, corpus, plan, out))
        else:
            row = attempt(head, lambda n=name, s=sets: evaluate([base["_model"]], s, corpus, out / f"{n}-seed{seed}"))
        rows.append(row | deltas(base, row))
    return rows


def ensemble_seeds(seeds: list) -> list:
    """The first NUM_ENSEMBLE_MEMBERS seeds of `seeds`, then the next unused ones (trained for the ensembles alone)."""
    members = list(dict.fromkeys(seeds))
    extra = max(members) + 1
    while len(members) < NUM_ENSEMBLE_MEMBERS:
        members, extra = members + [extra], extra + 1
    return members[:NUM_ENSEMBLE_MEMBERS]


def ensemble_rows(baselines: dict, corpus: dict, plan: dict, out: Path, references: dict) -> list:
    """Members' rows (off), then the average of the first 2, 3, ... members against the best member on dev."""
    members = ensemble_seeds(plan["seeds"])
    base = {s: baselines.get(s) or baseline(s, corpus, plan, out, references) for s in members}
    rows = [base[s] | {"technique": "ensemble", "enabled": False} for s in members]
    for k in range(2, len(members) + 1):
        seeds = members[:k]
        head = {"technique": "ensemble", "enabled": True, "seed": "+".join(map(str, seeds)),
                "num_train_documents": corpus["num_train_documents"]}
        if any("_model" not in base[s] for s in seeds):
            rows.append(head | {"error": "a member's baseline failed"})
            continue
        best = max((base[s] for s in seeds), key=lambda r: r["dev_f1_tuned"])  # a tie: the first seed
        row = attempt(head, lambda seeds=seeds: evaluate([base[s]["_model"] for s in seeds], [], corpus,
                                                         out / f"ensemble-{'+'.join(map(str, seeds))}"))
        rows.append(row | {"best_member": best["seed"]} | deltas(best, row))
    return rows


def yes_no_pair(base: dict, name: str, on_model: dict, on_head: dict, sets: list, corpus: dict, out: Path) -> list:
    """Rows `name` off (the baseline's model) and on (`on_model`'s "_model" with `sets`) on dev and test with
    the yes/no supplement added, the on row with its paired deltas. The window cache runs each model's
    windows once, however many rows score them."""
    seed, added = base["seed"], corpus["yes_no"]
    head = {"technique": name, "seed": seed, "num_train_documents": corpus["num_train_documents"],
            "yes_no_documents_added": added["added"]}
    if "_model" not in base or "_model" not in on_model:
        return [head | {"enabled": flag, "error": f"a model of seed {seed} failed"} for flag in (False, True)]
    off = attempt(head | {"enabled": False}, lambda: evaluate([base["_model"]], [], added, out / f"{name}-off-seed{seed}"))
    on = attempt(head | {"enabled": True, **on_head},
                 lambda: evaluate([on_model["_model"]], sets, added, out / f"{name}-seed{seed}"))
    return [off, on | deltas(off, on)]


def yes_no_rows(base: dict, corpus: dict, out: Path) -> list:
    """The baseline and `separate_thresholds` on dev and test with the yes/no supplement added (off, on)."""
    name, sets = YES_NO_TECHNIQUE
    return yes_no_pair(base, name, base, {"set": sets}, sets, corpus, out)


def yes_no_trained_rows(base: dict, row: dict, name: str, corpus: dict, out: Path) -> list:
    """The baseline's model (off) and technique `name`'s (on, `row`) on dev and test with the yes/no
    supplement added, with the on row's paired deltas."""
    return yes_no_pair(base, f"{name}_yes_no", row, {"train_overrides": row.get("train_overrides")}, [], corpus, out)


def curve_rows(base: dict, corpus: dict, plan: dict, out: Path) -> list:
    """The baseline trained on the first N training pages, for each N of the plan; the largest is `base`."""
    rows, seed = [], base["seed"]
    for n in corpus["train_sizes"]:
        head = {"technique": "learning_curve", "enabled": None, "seed": seed, "num_train_documents": n}
        if n == corpus["num_train_documents"]:
            rows.append(base | head)
        else:
            rows.append(attempt(head, lambda n=n: trained(f"curve{n}", seed, [], [], corpus, plan, out, n)))
    return rows


def reference_rows(corpus: dict) -> dict:
    """{name: row} of the no-training references (REFERENCES), each scored as every row is."""
    score = {"lexical": lambda: lexical_row(corpus), "bm25": lambda: lexical_row(corpus, "bm25"),
             "sentences": lambda: lexical_row(corpus, "sentences"), "first_paragraph": lambda: first_paragraph_row(corpus)}
    return {name: attempt({"technique": name, "enabled": None, "seed": None, "num_train_documents": 0}, score[name])
            for name in REFERENCES}


def benchmark(corpus: dict, plan: dict, out: Path, techniques: list, partial=lambda rows: None,
              ensembles_wanted: bool = True, references_only: bool = False) -> list:
    """Every row, cheapest proof first: the no-training references, the baselines of every seed (the
    ensembles' members too), the techniques that only post-process, the ensembles, then the techniques that
    retrain and the curve. `partial(rows)` gets the rows done so far after each phase, so a run cut short
    leaves its results. No techniques, or `ensembles_wanted` false: no ensembles, whose extra seeds would
    triple the training (no techniques: the baselines of `plan["seeds"]`, the references and the curve
    alone). `references_only`: the references alone, nothing trained."""
    references = reference_rows(corpus)
    if references_only:
        return list(references.values())
    baselines, per_technique, ensembles, curve = {}, {}, [], []
    names = techniques + ([YES_NO_TECHNIQUE[0]] if "thresholds" in techniques and corpus.get("yes_no") else [])
    names += [f"{n}_yes_no" for n in techniques if n in YES_NO_TRAINED and corpus.get("yes_no")]

    def rows() -> list:
        out_rows = list(references.values())
        for seed in plan["seeds"]:
            out_rows += [baselines[seed]] if seed in baselines else []
            out_rows += [r for name in names for r in per_technique.get((seed, name), [])]
        return out_rows + ensembles + curve

    with_ensembles = bool(techniques) and ensembles_wanted
    for seed in ensemble_seeds(plan["seeds"]) if with_ensembles else plan["seeds"]:
        baselines[seed] = baseline(seed, corpus, plan, out, references)
        partial(rows())
    for retrains in (False, True):
        for seed in plan["seeds"]:
            for name in techniques:
                if bool(TECHNIQUES[name][0]) == retrains:
                    per_technique[seed, name] = technique_rows(baselines[seed], [name], corpus, plan, out)
                    partial(rows())
                if retrains and name in YES_NO_TRAINED and corpus.get("yes_no"):
                    per_technique[seed, f"{name}_yes_no"] = yes_no_trained_rows(
                        baselines[seed], per_technique[seed, name][-1], name, corpus, out)
                    partial(rows())
        if not retrains:
            if YES_NO_TECHNIQUE[0] in names:
                for seed in plan["seeds"]:
                    per_technique[seed, YES_NO_TECHNIQUE[0]] = yes_no_rows(baselines[seed], corpus, out)
                    partial(rows())
            ensembles = ensemble_rows(baselines, corpus, plan, out, references) if with_ensembles else []
            partial(rows())
    curve = curve_rows(baselines[plan["seeds"][0]], corpus, plan, out)
    return rows()


def public(row: dict) -> dict:
    """The row as written: without what only this process needs (per-document counts, model paths)."""
    return {k: v for k, v in row.items() if not k.startswith("_")}


# ---------------------------------------------------------------------------
# Table and charts


def _f(x) -> str:
    return "-" if x is None else f"{x:.4f}"


def _ci(x, ci, signed: bool = False) -> str:
    if x is None:
        return "-"
    return (f"{x:+.3f}" if signed else f"{x:.3f}") + (f" [{ci[0]:+.3f}, {ci[1]:+.3f}]" if signed and ci else
                                                     f" [{ci[0]:.3f}, {ci[1]:.3f}]" if ci else "")


def _on(r: dict) -> str:
    return "-" if r["enabled"] is None else "on" if r["enabled"] else "off"


def table(rows: list, title: str) -> str:
    lines = [f"| technique ({title}) | on | seed | train/dev/test docs | dev F1 untuned | dev F1 tuned [95% CI] "
             "| test F1 (dev-tuned) [95% CI] | test delta [95% CI] | MLE-bench test | long | short | YES | NO "
             "| NQ long F1 [95% CI] | NQ short F1 [95% CI] |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        head = f"| {r['technique']} | {_on(r)} | {r['seed']} "
        if "error" in r:
            lines.append(head + f"| failed: {r['error'][:80]} ||||||||||||")
            continue
        delta = _ci(r.get("test_f1_delta"), r.get("test_f1_delta_ci"), signed=True)
        if "test_f1_delta" not in r and "dev_f1_delta" in r:  # no test gold (real corpus): the dev-tuned delta
            delta = "dev " + _ci(r["dev_f1_delta"], r.get("dev_f1_delta_ci"), signed=True)
        if "best_reference_delta" in r and r["technique"] == "baseline":
            delta = f"vs {r.get('best_reference')} " + _ci(r["best_reference_delta"], r.get("best_reference_delta_ci"),
                                                           signed=True)
            if "best_long_reference_delta" in r:  # the long rows alone, against the best reference on them
                delta += f"; long vs {r.get('best_long_reference')} " + _ci(
                    r["best_long_reference_delta"], r.get("best_long_reference_delta_ci"), signed=True)
        docs = "/".join(str(r.get(k, "-")) for k in ("num_train_documents", "num_dev_documents", "num_test_documents"))
        # .get: a record written before a column existed (the real corpus's has no intervals) has none of it
        lines.append(head + f"| {docs} | {_f(r.get('dev_f1_untuned'))} | {_ci(r.get('dev_f1_tuned'), r.get('dev_f1_ci'))} "
                     f"| {_ci(r.get('test_f1'), r.get('test_f1_ci'))} | {delta} | {_f(r.get('test_mlebench'))} "
                     f"| {_f(r.get('long_f1'))} | {_f(r.get('short_f1'))} | {_f(r.get('yes_f1'))} | {_f(r.get('no_f1'))} "
                     f"| {_nq(r, 'long')} | {_nq(r, 'short')} |")
    return "\n".join(lines)


def _nq(r: dict, kind: str) -> str:
    """The NQ official F1 of the test rows (dev where there is no test gold) with its interval."""
    split = "test" if r.get(f"test_nq_{kind}_f1") is not None else "dev"
    if r.get(f"{split}_nq_{kind}_f1") is None:  # a row of a record written before these figures
        return "-"
    return _ci(r[f"{split}_nq_{kind}_f1"], r.get(f"{split}_nq_{kind}_f1_ci")) + (" (dev)" if split == "dev" else "")


def _key(rows: list) -> str:
    return "test_f1" if any(r.get("test_f1") is not None for r in rows) else "dev_f1_tuned"


def _ci_key(key: str) -> str:
    return "test_f1_ci" if key == "test_f1" else "dev_f1_ci"


def _bounds(r: dict, key: str) -> tuple:
    """The 95% interval of r[key]; the figure itself where the row has none (a record older than intervals)."""
    return tuple(r.get(_ci_key(key)) or (r[key], r[key]))


def chart_groups(rows: list) -> list:
    """(label, off rows, on rows) of each bar pair: a technique's seeds, or one ensemble against its members."""
    names = [n for n in dict.fromkeys(r["technique"] for r in rows) if n not in NO_TECHNIQUE]
    groups = [(n, [r for r in rows if r["technique"] == n and r["enabled"] is False],
               [r for r in rows if r["technique"] == n and r["enabled"] is True]) for n in names]
    members = {r["seed"]: r for r in rows if r["technique"] == "ensemble" and r["enabled"] is False}
    for r in rows:
        if r["technique"] == "ensemble" and r["enabled"]:
            seeds = [int(s) for s in str(r["seed"]).split("+")]
            groups.append((f"ensemble {r['seed']}", [members[s] for s in seeds if s in members], [r]))
    return groups


def _bar(group: list, key: str) -> tuple:
    """(mean over the rows, [down, up]): the error bar spans the lowest and highest bound of their intervals."""
    xs = [r for r in group if r.get(key) is not None]
    if not xs:
        return float("nan"), [0.0, 0.0]
    mean = sum(r[key] for r in xs) / len(xs)
    lo, hi = min(_bounds(r, key)[0] for r in xs), max(_bounds(r, key)[1] for r in xs)
    return mean, [max(mean - lo, 0.0), max(hi - mean, 0.0)]


def _reference_line(ax, rows: list, key: str) -> None:
    """The best no-training row on `key` as a dashed line, its interval shaded."""
    refs = [r for r in rows if r["technique"] in REFERENCES and r.get(key) is not None]
    if refs:
        best = max(refs, key=lambda r: r[key])
        lo, hi = _bounds(best, key)
        ax.axhline(best[key], color="grey", linestyle="--",
                   label=f"{best['technique']}, the best with no training ({best[key]:.3f})")
        ax.axhspan(lo, hi, color="grey", alpha=0.12)


def chart(rows: list, path: Path, title: str) -> None:
    """Bars: each technique off and on (mean over seeds; error bars: 95% intervals, widest over seeds),
    test F1 where there is a test gold, else dev tuned; the best no-training row as a line."""
    import matplotlib
    matplotlib.use("Agg")  # no display on a training box
    import matplotlib.pyplot as plt
    key, groups = _key(rows), chart_groups(rows)
    fig, ax = plt.subplots(figsize=(1.3 * len(groups) + 2, 4.5))
    for k, side in enumerate(("off", "on")):
        bars = [_bar(g[1 + k], key) for g in groups]
        ax.bar([i + (k - 0.5) * 0.38 for i in range(len(groups))], [b[0] for b in bars], 0.38, label=side,
               yerr=[[b[1][0] for b in bars], [b[1][1] for b in bars]], capsize=3)
    _reference_line(ax, rows, key)
    ax.set_xticks(range(len(groups)), [g[0] for g in groups], rotation=25, ha="right")
    ax.set_ylim(0, 1)
    ax.set_ylabel(key.replace("_", " ") + " (mean over seeds, 95% CI)")
    ax.set_title(title)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def curve_points(rows: list, key: str) -> list:
    """The learning curve's rows by pages: one seed's, the first seed's (a merged record may hold another
    seed's baseline as a curve point too)."""
    curve = [r for r in rows if r["technique"] == "learning_curve" and r.get(key) is not None]
    return sorted((r for r in curve if r.get("seed") == curve[0].get("seed")), key=lambda r: r["num_train_documents"])


def curve_projection(rows: list, target: float = 0.80) -> dict | None:
    """A projection, not a measurement: test F1 fitted as a + b log2(pages) over the learning curve's points,
    and training seconds as c + d pages (stage 1 is the constant); the pages and seconds at which the fitted
    line reaches `target`, if it rises. None with fewer than three points."""
    import numpy as np
    key = _key(rows)
    points = curve_points(rows, key)
    if len(points) < 3:
        return None
    pages = np.array([r["num_train_documents"] for r in points], dtype=float)
    b, a = np.polyfit(np.log2(pages), [r[key] for r in points], 1)
    out = {"metric": key, "target": target, "points": len(points), "per_doubling": float(b), "intercept": float(a)}
    if b > 1e-9:  # a flat curve fits a slope of rounding error (1e-17), which projects 2^(1e16) pages
        need = float(2 ** ((target - a) / b))
        d, c = np.polyfit(pages, [r.get("train_seconds") or 0.0 for r in points], 1)
        out |= {"pages_for_target": round(need), "train_seconds_for_target": round(float(c + d * need))}
    return out


def curve_chart(rows: list, path: Path, title: str) -> None:
    """F1 against the number of training pages, with 95% intervals; the best no-training row as a line."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    key = _key(rows)
    points = curve_points(rows, key)
    fig, ax = plt.subplots(figsize=(6, 4.5))
    ys = [r[key] for r in points]
    ax.errorbar([r["num_train_documents"] for r in points], ys, capsize=4, marker="o", label="baseline recipe",
                yerr=[[y - _bounds(r, key)[0] for y, r in zip(ys, points)],
                      [_bounds(r, key)[1] - y for y, r in zip(ys, points)]])
    _reference_line(ax, rows, key)
    fit = curve_projection(rows)
    if fit and "pages_for_target" in fit:  # dashed: the fitted line, carried to the target
        import numpy as np
        xs = np.geomspace(points[0]["num_train_documents"], max(fit["pages_for_target"], points[-1]["num_train_documents"]), 50)
        ax.plot(xs, fit["intercept"] + fit["per_doubling"] * np.log2(xs), "--", color="gray",
                label=f"fit, +{fit['per_doubling']:.3f} a doubling: {fit['target']:.2f} at ~{fit['pages_for_target']:,} pages")
        ax.set_xscale("log", base=2)
    ax.set_xlabel("training pages")
    ax.set_ylabel(key.replace("_", " ") + " (95% CI)")
    ax.set_ylim(0, 1)
    ax.set_title(title)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


# ---------------------------------------------------------------------------
# Corpus and command line


def num_lines(path: str) -> int:
    with open(path, "rb") as f:
        return sum(1 for line in f if line.strip())


def prepare_corpus(args, plan: dict, out: Path) -> dict:
    if args.corpus == "real":
        corpus = {"train": str(REAL / "simplified-nq-train-sample.jsonl"),
                  "dev": str(REAL / "simplified-nq-dev-sample.jsonl"), "test": None, "test_gold": None,
                  "train_overrides": plan["train"] + REAL_TRAIN}
    else:
        data = out / "data"
        cmd = ["-m", "solution.synth", "--profile", args.profile, "--out", str(data), "--seed", str(args.corpus_seed),
               "--num-train", str(max(plan["train_sizes"])), "--num-dev", str(plan["num_dev"]),
               "--num-test", str(plan["num_test"])]
        run(cmd + (["--max-words", str(plan["max_words"])] if plan["max_words"] else []))
        corpus = {"train": str(data / "simplified-nq-train.jsonl"), "dev": str(data / "simplified-nq-dev.jsonl"),
                  "test": str(data / "simplified-nq-test.jsonl"),
                  "test_gold": str(data / "simplified-nq-test-gold.jsonl"), "train_overrides": plan["train"]}
        if plan.get("yes_no"):
            corpus["yes_no"] = yes_no_corpus(corpus, plan, out, args)
        if any("{yes_no_train}" in TECHNIQUES[t][0] for t in args.techniques):
            corpus |= yes_no_train_corpus(corpus, plan, out, args)
    if plan.get("warm_start"):  # stage 1's corpus: easy pages, the profile's own sizes unless the plan gives some
        easy = out / "data-easy"
        run(["-m", "solution.synth", "--out", str(easy), "--seed", "0", *plan["warm_start"]["synth"]])
        corpus |= {"warm_train": str(easy / "simplified-nq-train.jsonl"), "warm_dev": str(easy / "simplified-nq-dev.jsonl")}
    n = num_lines(corpus["train"])  # the baseline's pages: a larger size is the whole file, and the curve ends there
    return corpus | {"num_train_documents": n, "train_sizes": sorted({min(s, n) for s in plan["train_sizes"]} | {n})}


def yes_no_synth(directory: Path, seed: int, sizes: tuple, plan: dict, args) -> None:
    """`solution.synth` pages of the profile that are all YES or NO (two YES to a NO): (train, dev, test) pages."""
    run(["-m", "solution.synth", "--profile", args.profile, "--out", str(directory), "--seed", str(seed),
         "--answer-types", "YES,NO", *[x for flag, n in zip(("--num-train", "--num-dev", "--num-test"), sizes)
                                       for x in (flag, str(n))],
         *(["--max-words", str(plan["max_words"])] if plan["max_words"] else [])])


def yes_no_corpus(corpus: dict, plan: dict, out: Path, args) -> dict:
    """Dev and test with `plan["yes_no"]` yes/no questions each added (pages of the same profile and the next
    seed, `solution.synth --answer-types YES,NO`): the files of `corpus` keys, and how many were added."""
    extra, mixed = out / "data-yes-no", out / "data-with-yes-no"
    yes_no_synth(extra, args.corpus_seed + 1, (1, plan["yes_no"], plan["yes_no"]), plan, args)
    mixed.mkdir(parents=True, exist_ok=True)
    files = {"dev": "simplified-nq-dev.jsonl", "test": "simplified-nq-test.jsonl", "test_gold": "simplified-nq-test-gold.jsonl"}
    for key, name in files.items():
        lines = Path(corpus[key]).read_text().splitlines() + (extra / name).read_text().splitlines()
        ids = [json.loads(line)["example_id"] for line in lines]
        if len(set(map(str, ids))) != len(ids):  # 64-bit random ids: a clash would be a bug here, not luck
            raise StepFailed(f"{extra / name}: an example_id of the yes/no pages is also in {corpus[key]}")
        (mixed / name).write_text("\n".join(lines) + "\n")
    return {key: str(mixed / name) for key, name in files.items()} | {"added": plan["yes_no"]}


def yes_no_train_corpus(corpus: dict, plan: dict, out: Path, args) -> dict:
    """The training file with YES_NO_TRAIN_PAGES yes/no pages appended (`--answer-types YES,NO`, corpus seed + 2:
    neither the benchmark's pages nor its yes/no supplement's); its path and page count, for `yes_no_pages`."""
    pages = YES_NO_TRAIN_PAGES if plan["num_dev"] >= 100 else plan["yes_no"]  # --quick: a handful
    extra, mixed = out / "data-yes-no-train", out / "data-train-with-yes-no"
    yes_no_synth(extra, args.corpus_seed + 2, (pages, 1, 1), plan, args)
    lines = Path(corpus["train"]).read_text().splitlines()
    lines += (extra / "simplified-nq-train.jsonl").read_text().splitlines()
    mixed.mkdir(parents=True, exist_ok=True)
    (mixed / "simplified-nq-train.jsonl").write_text("\n".join(lines) + "\n")
    return {"yes_no_train": str(mixed / "simplified-nq-train.jsonl"), "yes_no_train_pages": str(len(lines))}


def int_list(text: str) -> list:
    """"300,600,900" -> [300, 600, 900]: non-negative integers, at least one."""
    try:
        values = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}") from None
    if not values or min(values) < 0:
        raise argparse.ArgumentTypeError(f"expected comma-separated non-negative integers, got {text!r}")
    return values


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--json", required=True, help="write the rows here (a JSON list); the charts go next to it "
                   "(.png, -curve.png)")
    p.add_argument("--corpus", choices=("nq", "real"), default="nq",
                   help="nq: a synthetic corpus of --profile made with --corpus-seed; real: the real NQ sample")
    p.add_argument("--profile", choices=("nq", "nq-lexical"), default="nq",
                   help="the synthetic corpus's profile (nq: questions that need reading; nq-lexical: questions "
                        "in the statements' words)")
    p.add_argument("--corpus-seed", type=int, default=0,
                   help="seed of the synthetic corpus (its yes/no pages use the next): the recipe on a corpus it "
                        "was not chosen on")
    p.add_argument("--quick", action="store_true", help="tiny random model, a handful of short documents, 1 seed")
    p.add_argument("--out", default=None, help="run directory (default runs/answers/CORPUS, or -quick)")
    p.add_argument("--techniques", default=",".join(TECHNIQUES),
                   help='comma-separated rows of TECHNIQUES to run ("": the baseline, its references and curve alone)')
    p.add_argument("--train-sizes", type=int_list, default=None,
                   help=f"training pages of the learning curve, the largest the baseline's (default "
                        f"{','.join(map(str, FULL['train_sizes']))}; --quick {','.join(map(str, QUICK['train_sizes']))})")
    p.add_argument("--merge", nargs="+", metavar="RECORD", default=None,
                   help="train nothing: write the rows of these records of one corpus (a run in pieces) to --json as "
                        "one record, with its table and charts; a later record's row replaces the same row of an earlier; "
                        "each row keeps the corpus its record says")
    p.add_argument("--ensembles", action=argparse.BooleanOptionalAction, default=True,
                   help="with techniques, also the 2- and 3-model ensembles (their extra seeds are trained for them "
                        "alone); --no-ensembles: the techniques of --seeds alone")
    p.add_argument("--seeds", type=int_list, default=None,
                   help=f"the techniques' seeds (default {','.join(map(str, FULL['seeds']))}; --quick "
                        f"{','.join(map(str, QUICK['seeds']))}); ensembles add the next seeds up to "
                        f"{NUM_ENSEMBLE_MEMBERS} members")
    p.add_argument("--references-only", action="store_true",
                   help="train nothing: the no-training rows alone (lexical, bm25, first_paragraph, sentences) on "
                        "the corpus the benchmark makes, without its yes/no pages or stage 1's easy pages")
    cli.add_overwrite(p)
    args = p.parse_args(argv)
    if args.references_only and args.merge:
        p.error("--references-only scores a corpus and --merge reads records: give one of them")
    args.techniques = [t.strip() for t in args.techniques.split(",") if t.strip()]
    unknown = [t for t in args.techniques if t not in TECHNIQUES]
    if unknown:
        p.error(f"unknown technique(s) {unknown}; choose from {sorted(TECHNIQUES)}")
    if args.train_sizes is not None and min(args.train_sizes) < 1:
        p.error(f"--train-sizes: every size must be at least 1 page, got {args.train_sizes}")
    if args.corpus_seed < 0:
        p.error(f"--corpus-seed must be >= 0, got {args.corpus_seed}")
    return args


def write_rows(rows: list, args, path: Path) -> None:
    if not args.merge:  # merged rows keep the corpus their record says, even none: this run's options are not theirs
        for r in rows:
            r["corpus"] = (args.profile if args.corpus == "nq" else args.corpus) + ("-quick" if args.quick else "")
            if args.corpus == "nq":
                r["corpus_seed"] = args.corpus_seed
            if args.corpus == "real":
                r["note"] = REAL_NOTE
    path.parent.mkdir(parents=True, exist_ok=True)
    write_record(path, json.dumps([public(r) for r in rows], indent=1) + "\n", SCRIPT)


def write_partial(args, rows: list) -> None:
    """The rows so far, beside the final JSON (`NAME.partial.json`): what a run cut short has measured."""
    path = Path(args.json)
    write_rows(rows, args, path.with_name(path.stem + ".partial.json"))


def write_outputs(rows: list, args, label: str) -> Path:
    path = Path(args.json)
    write_rows(rows, args, path)
    print("\n" + table(rows, label))
    ok = [r for r in rows if "error" not in r]
    for png, draw, title in ((path.with_suffix(".png"), chart, "answer techniques"),
                             (path.with_name(path.stem + "-curve.png"), curve_chart, "learning curve")):
        draw(ok, png, f"{title}, {label}")
        mark_written(png, SCRIPT)
    fit = curve_projection(ok)
    if fit and "pages_for_target" in fit:
        print(f"projection (a fit, not a measurement): {fit['metric']} +{fit['per_doubling']:.3f} per doubling of the "
              f"pages; {fit['target']:.2f} at ~{fit['pages_for_target']:,} pages, ~{fit['train_seconds_for_target']:,} s "
              f"of training on this machine")
    return path


ROW_KEY = ("technique", "enabled", "seed", "num_train_documents")  # one row of a record; pages may be absent (old records)
# The figures the table and the charts read: a number, or null where there is none (no test gold).
FIGURES = ("dev_f1_untuned", "dev_f1_tuned", "test_f1", "test_mlebench", "dev_mlebench", "long_f1", "short_f1",
           "yes_f1", "no_f1", "test_f1_delta", "dev_f1_delta", "best_reference_delta", "best_long_reference_delta",
           "train_seconds", "dev_long_f1", "test_long_f1", "dev_nq_long_f1", "dev_nq_short_f1", "test_nq_long_f1",
           "test_nq_short_f1")
_ENSEMBLE_SEEDS = re.compile(r"[0-9]+(\+[0-9]+)*")


def read_record(path) -> list:
    """The rows of a record `--json` wrote, each checked for what merging, the table and the charts read; a
    file that is not one is a StepFailed naming the file, the row and the field."""
    from solution.common.jsonio import JsonError, read_json

    try:
        rows = read_json(path)  # a missing file, a pipe, a folder, bad or hostile JSON: one line naming it
    except JsonError as e:
        raise StepFailed(str(e)) from None
    if not isinstance(rows, list):
        got = "an object" if isinstance(rows, dict) else json.dumps(rows)[:40]
        raise StepFailed(f"{path}: expected a JSON list of rows (a record benchmark_answers --json wrote), got {got}")
    if not rows:
        raise StepFailed(f"{path}: no rows")
    for i, r in enumerate(rows):
        problem = row_problem(r)
        if problem:
            raise StepFailed(f"{path}: row {i}: {problem}")
    return rows


def _number(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def row_problem(r) -> str | None:
    """What makes `r` no row of a record (None: it is one)."""
    if not isinstance(r, dict):
        return f"expected an object, got {type(r).__name__}"
    missing = [k for k in ROW_KEY[:3] if k not in r]
    if missing:
        return f"field '{missing[0]}': missing (not a row benchmark_answers wrote)"
    seed, technique = r["seed"], r["technique"]
    checks = {"technique": isinstance(technique, str),
              "enabled": r["enabled"] in (None, True, False) and not _number(r["enabled"]),
              "seed": (isinstance(seed, int) and not isinstance(seed, bool)) or (seed is None and technique in REFERENCES)
              or (technique == "ensemble" and isinstance(seed, str) and bool(_ENSEMBLE_SEEDS.fullmatch(seed))),
              "num_train_documents": (r.get("num_train_documents") is None and technique != "learning_curve")
              or (isinstance(r.get("num_train_documents"), int) and not isinstance(r["num_train_documents"], bool)),
              "corpus": isinstance(r.get("corpus"), (str, type(None))),
              "corpus_seed": r.get("corpus_seed") is None or isinstance(r["corpus_seed"], int)}
    checks |= {k: r.get(k) is None or _number(r[k]) for k in FIGURES}
    checks |= {k: r[k] is None or (isinstance(r[k], list) and len(r[k]) == 2 and all(map(_number, r[k])))
               for k in r if k.endswith("_ci")}
    bad = [k for k, ok in checks.items() if not ok]
    return f"field '{bad[0]}': {r.get(bad[0])!r} is not what a row holds there" if bad else None


def corpus_of(row: dict) -> tuple:
    return row.get("corpus"), row.get("corpus_seed")


def corpus_text(corpus: tuple) -> str:
    name, seed = corpus
    return f"{name}, corpus seed {seed}" if seed is not None else f"{name}, corpus seed not recorded"


def identified(corpus: tuple) -> bool:
    """Whether a record's rows say which corpus they were measured on: a synthetic corpus by its profile and
    seed; the real sample is one set of pages (its rows never had a seed)."""
    name, seed = corpus
    return name is not None and (seed is not None or name.startswith("real"))


def record_corpus(path, rows: list) -> tuple:
    corpora = list(dict.fromkeys(corpus_of(r) for r in rows))
    if len(corpora) > 1:
        raise StepFailed(f"{path}: rows of {len(corpora)} corpora ({'; '.join(map(corpus_text, corpora))}): a "
                         "record holds one")
    return corpora[0]


def merge_records(paths: list) -> list:
    """The rows of several records of one corpus (a benchmark run in pieces) as one record: a row of a later
    file replaces the same row (technique, enabled, seed, pages) of an earlier one; references first, then
    each seed's rows, the ensembles, the curve by pages. Every row keeps the corpus its record says; records
    of two corpora, or two whose rows do not say their seed (they cannot be told apart), are refused."""
    merged, first = {}, None  # first: (corpus, the file that gave it)
    for p in paths:
        rows = read_record(p)
        corpus = record_corpus(p, rows)
        if first is not None and corpus != first[0]:
            raise StepFailed(f"{p} holds rows of {corpus_text(corpus)}, {first[1]} of {corpus_text(first[0])}: "
                             "records of one corpus only")
        if first is not None and not identified(corpus):
            raise StepFailed(f"{first[1]} and {p}: neither's rows say their corpus seed ({corpus_text(corpus)}: "
                             "written before rows recorded it), so whether they are one corpus cannot be told; "
                             "merge records whose rows carry corpus and corpus_seed")
        first = first or (corpus, p)
        for r in rows:
            merged[tuple(r.get(k) for k in ROW_KEY)] = r

    def order(r):
        if r["technique"] in REFERENCES:
            return 0, REFERENCES.index(r["technique"])
        if r["technique"] == "ensemble":
            return 2, 0
        if r["technique"] == "learning_curve":
            return 3, r["num_train_documents"]
        return 1, r["seed"]
    return sorted(merged.values(), key=order)


def main(argv=None) -> int:
    args = parse_args(argv)
    json_path = Path(args.json)
    cli.claim_records(SCRIPT, args.overwrite, inputs=[("--merge", m) for m in args.merge or []], json=json_path,
                      partial_json=None if args.merge else json_path.with_name(json_path.stem + ".partial.json"),
                      png=json_path.with_suffix(".png"), curve_png=json_path.with_name(json_path.stem + "-curve.png"))
    if args.merge:
        try:
            rows = merge_records(args.merge)
        except StepFailed as e:  # a record named by the user that cannot be merged: a user error
            print(f"error: {e}", file=sys.stderr)
            return 2
        path = write_outputs(rows, args, f"{corpus_text(corpus_of(rows[0]))}, merged")
        print(f"\n{len(rows)} rows from {len(args.merge)} records -> {path}")
        return 0
    plan = dict(QUICK if args.quick else FULL)
    plan |= {k: getattr(args, k) for k in ("train_sizes", "seeds") if getattr(args, k) is not None}
    if args.references_only:  # the corpus's own pages alone: no yes/no supplement, no stage 1
        plan |= {"yes_no": 0, "warm_start": None}
        args.techniques = []
    name = f"{args.profile}-seed{args.corpus_seed}" if args.corpus == "nq" else args.corpus
    out = Path(args.out or f"runs/answers/{name}" + ("-quick" if args.quick else ""))
    if args.corpus == "real" and not REAL.is_dir():
        print(f"error: {REAL} not found: --corpus real needs the real NQ sample beside the checkout", file=sys.stderr)
        return 2
    t0 = time.perf_counter()
    try:
        corpus = prepare_corpus(args, plan, out)
        rows = benchmark(corpus, plan, out, args.techniques, functools.partial(write_partial, args),
                         args.ensembles, args.references_only)
    except StepFailed as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    label = f"{args.profile} profile, corpus seed {args.corpus_seed}" if args.corpus == "nq" else REAL_NOTE
    path = write_outputs(rows, args, label)
    failed = [r for r in rows if "error" in r]
    print(f"\n{len(rows)} rows ({len(failed)} failed) in {time.perf_counter() - t0:.0f}s -> {path}, "
          f"{path.with_suffix('.png')}, {path.with_name(path.stem + '-curve.png')}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
