"""Natural Questions' official evaluation (Google's PyPI package `natural-questions`) on simplified-NQ files.

The package is the reference: its `nq_eval` decides what is right and computes every figure; this module
only carries our data to it and back.

* Predictions: `prediction_entry` turns one document's answers, exactly the two rows the Kaggle CSV holds
  (`postprocess.threshold_rows`: one post-processing path, two formats), into an entry of the package's
  predictions JSON ({"predictions": [...]}, what `eval_utils.read_prediction_json` reads); spans are NQ
  tokens and byte offsets are -1 (nq_eval then compares tokens). Each entry carries the scores the
  thresholds compare (`row_scores`), so nq_eval's threshold sweep moves along our own thresholds.
  `PredictionsWriter` writes the file through `fsutil.atomic_output` (`submission.predict --nq-predictions`).
* Example ids: NQ's are JSON integers, and the package matches predictions to gold by value and type
  (a dict keyed by what `json.loads` gave). Kaggle's simplified test file writes them as strings; both
  become the integer here, on both sides. Two gold ids that are one integer (`77` and `077`) are refused,
  naming both lines: the package would take them for one example.
* Gold: `load_gold` reads a simplified-NQ file with our reader (`solution.data.nq`) into the package's own
  `NQLabel` lists (what `eval_utils.read_annotation` builds from the original gzipped format).
  `write_original_gold` writes that original format, so the package's command line can read the same
  gold: `python -m natural_questions.nq_eval --gold_path GOLD.jsonl.gz --predictions_path PRED.json`.
* Which gold counts (the package's rule, `eval_utils.gold_has_long_answer` / `gold_has_short_answer`):
  an example has a gold long (short) answer when at least `--long_non_null_threshold`
  (`--short_non_null_threshold`) annotators gave one, a YES/NO counting as a short answer; a prediction
  is then right when it equals any one annotator's non-null long span, or any one annotator's SET of
  short spans, or any annotator's YES/NO. Five-way files (dev, test): the package's default, 2 of 5.
  One-annotation files (training lines): 2 can never be reached, so the threshold is 1 (the single
  annotation is the gold; the flags exist for exactly this). A file mixing one-annotation and n-way
  examples is refused: the package applies one threshold to the whole file.
* Figures (`score`): nq_eval's own output (`get_metrics_with_answer_stats`: long-/short-best-threshold-f1,
  -precision, -recall, -threshold, recall-at-precision>=0.5/0.75/0.9) and the package's F1 of the answers
  as written, ignoring scores (`compute_final_f1`: long-answer-f1, ...). A blank row is a null span; a
  YES/NO short row is yes_no_answer with no span.
* Tuning (`tune`): the thresholds maximising the mean of the package's long-answer-f1 and short-answer-f1
  of the answers as written. The best-threshold figures pick their own threshold on the gold, above ours,
  so they cannot choose ours. Whether each document's raw answer is right is the package's
  `score_long_answer` / `score_short_answer`; the winner is re-scored end to end by the package.

Writing predictions needs only the standard library (`submission/` imports it, where the package is
absent); reading gold, scoring and tuning import the package.
"""

from __future__ import annotations

import contextlib
import gzip
import json
import math
import sys
from dataclasses import dataclass
from typing import Optional

from solution.answers.nq_format import nq_example_id, nq_span, prediction_entry, record_entry
from solution.common.fsutil import atomic_output
from solution.common.jsonio import read_json
from solution.scoring.metric import SubmissionError

PACKAGE = "natural-questions"
FIVE_WAY_THRESHOLD = 2  # the package's default --long_non_null_threshold / --short_non_null_threshold
SINGLE_ANNOTATION_THRESHOLD = 1
PR_TARGETS = (0.5, 0.75, 0.9)  # nq_eval's recall-at-precision targets
MAX_SHOWN = 5


# ---------------------------------------------------------------------------
# The package


def _package() -> tuple:
    """(eval_utils, nq_eval), with absl's flags usable outside `app.run` (their defaults)."""
    try:
        from absl import flags
        from natural_questions import eval_utils, nq_eval
    except ImportError as e:
        raise ValueError(f"the NQ metric needs the {PACKAGE} package ({e}); pip install {PACKAGE} absl-py six "
                         "(requirements.txt)") from None
    if not flags.FLAGS.is_parsed():
        flags.FLAGS.mark_as_parsed()  # eval_utils reads its thresholds from absl flags
    return eval_utils, nq_eval


@contextlib.contextmanager
def non_null_threshold(value: int):
    """The package's --long_non_null_threshold and --short_non_null_threshold set to `value` for the block."""
    from absl import flags

    _package()
    names = ("long_non_null_threshold", "short_non_null_threshold")
    before = {n: getattr(flags.FLAGS, n) for n in names}
    for n in names:
        setattr(flags.FLAGS, n, value)
    try:
        yield
    finally:
        for n, v in before.items():
            setattr(flags.FLAGS, n, v)


# ---------------------------------------------------------------------------
# Gold


@dataclass
class NQGold:
    """Gold for the package: {integer example_id: [NQLabel, one per annotation]} in file order, and the
    non-null threshold its rule takes (2 five-way, 1 for one annotation)."""

    labels: dict
    non_null_threshold: int
    path: str = ""

    @property
    def rule(self) -> str:
        if self.non_null_threshold == SINGLE_ANNOTATION_THRESHOLD:
            return ("one annotation per example: it is the gold (the package's --long_non_null_threshold=1 "
                    "--short_non_null_threshold=1)")
        return (f"n-way annotations: an example has a gold answer where at least {self.non_null_threshold} "
                "annotators gave one (the package's default)")


def gold_labels(example_id: int, annotations) -> list:
    """The package's NQLabels of one example's `nq.Annotation`s: token spans, byte offsets -1."""
    eval_utils, _ = _package()

    def span(s):
        return eval_utils.Span(-1, -1, s.start_token, s.end_token) if s is not None else eval_utils.Span(-1, -1, -1, -1)

    return [eval_utils.NQLabel(example_id=example_id, long_answer_span=span(a.long_answer),
                               short_answer_span_list=[span(s) for s in a.short_answers],
                               yes_no_answer=a.yes_no_answer.lower(), long_score=0, short_score=0)
            for a in annotations or ()]


def load_gold(path) -> NQGold:
    """A simplified-NQ gold file (`.jsonl` or `.jsonl.gz`, read by `nq.read_examples`) as the package's gold."""
    from solution.data.nq import NQFormatError, read_examples

    labels, counts, lines = {}, {}, {}  # counts: number of annotations -> the first line with that many
    for ex in read_examples(path, require_annotations=True):
        eid = nq_example_id(ex.example_id)
        if eid in lines:  # the package keys its gold by the integer: two ids as text, one example to it
            line, written = lines[eid]
            raise NQFormatError(str(path), ex.line, "example_id", f"{ex.example_id} and {written} of line {line} are "
                                "one integer, the id the package matches predictions by: give each example its own")
        if not ex.annotations:
            raise NQFormatError(str(path), ex.line, "annotations", "an empty list: no annotation to judge against "
                                f"(the {PACKAGE} package needs at least one per example; one: it is the gold)")
        try:
            labels[eid] = gold_labels(eid, ex.annotations)
        except ValueError as e:  # the package's Span refuses a span it cannot compare
            raise NQFormatError(str(path), ex.line, "annotations", f"the {PACKAGE} package refuses it: {e}") from None
        lines[eid] = (ex.line, ex.example_id)
        counts.setdefault(len(ex.annotations), ex.line)
    if 1 in counts and max(counts) > 1:
        raise ValueError(f"{path}: mixes examples with one annotation (line {counts[1]}) and with "
                         f"{max(counts)} (line {counts[max(counts)]}): the package counts a gold answer by one "
                         "threshold of annotators for the whole file; score them apart")
    threshold = SINGLE_ANNOTATION_THRESHOLD if max(counts) <= 1 else FIVE_WAY_THRESHOLD
    return NQGold(labels, threshold, str(path))


def write_original_gold(simplified_path, out_path) -> int:
    """Write a simplified-NQ gold file in NQ's original gzipped JSON lines, as the package's command line
    reads it (example_id and annotations only; byte offsets -1). Returns the examples written."""
    from solution.data.nq import read_examples

    def span(s):
        return nq_span(s.start_token, s.end_token) if s is not None else nq_span(-1, -1)

    n = 0
    with atomic_output(out_path, "wb") as raw, gzip.GzipFile(fileobj=raw, mode="wb", mtime=0) as f:
        for ex in read_examples(simplified_path, require_annotations=True):
            anns = [{"annotation_id": i, "long_answer": {**span(a.long_answer), "candidate_index": a.candidate_index},
                     "short_answers": [span(s) for s in a.short_answers], "yes_no_answer": a.yes_no_answer}
                    for i, a in enumerate(ex.annotations)]
            f.write((json.dumps({"example_id": nq_example_id(ex.example_id), "annotations": anns}) + "\n").encode())
            n += 1
    return n


# ---------------------------------------------------------------------------
# Reading predictions


def _check_entry(entry, where: str, fail) -> None:
    """What the package's reader needs of one entry, named by field (it would raise a bare KeyError)."""
    if not isinstance(entry, dict):
        fail(where, f"expected an object, got {type(entry).__name__}")
    eid = entry.get("example_id")
    if isinstance(eid, bool) or not isinstance(eid, int):
        fail(f"{where}.example_id", f"expected an integer (NQ's ids are JSON numbers; the package matches them "
                                    f"to the gold by value and type), got {eid!r}")
    spans = ([("long_answer", entry["long_answer"])] if "long_answer" in entry else []) + \
        [(f"short_answers[{i}]", s) for i, s in enumerate(_list(entry, "short_answers", where, fail))]
    for name, s in spans:
        if not isinstance(s, dict):
            fail(f"{where}.{name}", f"expected an object, got {type(s).__name__}")
        for key in ("start_token", "end_token", "start_byte", "end_byte"):
            v = s.get(key)
            if isinstance(v, bool) or not isinstance(v, int):
                fail(f"{where}.{name}.{key}", f"expected an integer (-1: none), got {v!r}")
        for unit in ("token", "byte"):  # what the package's Span refuses, named here
            start, end = s[f"start_{unit}"], s[f"end_{unit}"]
            if (start < 0) != (end < 0) or 0 <= end <= start:
                fail(f"{where}.{name}", f"start_{unit} {start}, end_{unit} {end}: expected start < end, or both -1")
    for key in ("long_answer_score", "short_answers_score"):
        v = entry.get(key)
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
            fail(f"{where}.{key}", f"expected a finite number (nq_eval sorts by it), got {v!r}")
    yes_no = entry.get("yes_no_answer", "NONE")
    if not isinstance(yes_no, str) or yes_no.lower() not in ("yes", "no", "none"):
        fail(f"{where}.yes_no_answer", f"expected YES, NO or NONE, got {yes_no!r}")
    if yes_no.lower() != "none" and any(s["start_token"] >= 0 or s["start_byte"] >= 0 for s in entry.get("short_answers", [])):
        fail(f"{where}.yes_no_answer", f"{yes_no} beside short answer spans (the package refuses both together)")
    for name, s in spans:
        if s["start_byte"] >= 0 and s["start_token"] < 0:  # the package would compare it to nothing, silently
            fail(f"{where}.{name}", f"byte offsets only (start_byte {s['start_byte']}, end_byte {s['end_byte']}, "
                                    "tokens -1): simplified-NQ gold holds NQ token offsets, not bytes, so this span "
                                    "can never match; give start_token and end_token (whitespace tokens)")


def _list(entry: dict, key: str, where: str, fail) -> list:
    value = entry.get(key, [])
    if not isinstance(value, list):
        fail(f"{where}.{key}", f"expected a list, got {type(value).__name__}")
    return value


def read_predictions(path, gold: Optional[NQGold] = None) -> dict:
    """The package's prediction labels ({example_id: NQLabel}, read by `eval_utils.read_prediction_json`)
    of a predictions JSON, checked first so that a fault is one message naming file and field; with
    `gold`, its ids must be exactly the gold's (nq_eval refuses anything else without saying which)."""
    def fail(field: str, message: str):
        raise SubmissionError(f"field '{field}': {message}", path)

    obj = read_json(path)  # a missing file, a pipe, bad JSON: one line naming it
    if not isinstance(obj, dict) or not isinstance(obj.get("predictions"), list):
        fail("predictions", 'expected an object {"predictions": [...]}')
    seen = {}
    for i, entry in enumerate(obj["predictions"]):
        _check_entry(entry, f"predictions[{i}]", fail)
        if entry["example_id"] in seen:
            fail(f"predictions[{i}].example_id", f"{entry['example_id']} repeats predictions[{seen[entry['example_id']]}]")
        seen[entry["example_id"]] = i
    if gold is not None:
        missing = [eid for eid in gold.labels if eid not in seen]
        extra = [eid for eid in seen if eid not in gold.labels]
        if missing or extra:
            fail("predictions[].example_id", f"the ids must be the gold's ({gold.path}): {len(missing)} missing "
                                             f"({_some(missing)}), {len(extra)} not in the gold ({_some(extra)})")
    eval_utils, _ = _package()
    try:
        return eval_utils.read_prediction_json(str(path))
    except ValueError as e:  # the package's own refusals: a span with start >= end, YES/NO beside spans
        raise SubmissionError(f"the {PACKAGE} package refuses it: {e}", path) from None


def _some(items: list) -> str:
    return ", ".join(map(str, items[:MAX_SHOWN])) + (f", ... ({len(items) - MAX_SHOWN} more)"
                                                    if len(items) > MAX_SHOWN else "") if items else "none"


def labels_of(entries: list) -> dict:
    """{example_id: NQLabel} of prediction entries, through the package's own reader."""
    import os
    import tempfile

    eval_utils, _ = _package()
    fd, tmp = tempfile.mkstemp(suffix=".json")
    try:
        with os.fdopen(fd, "w") as f:
            json.dump({"predictions": entries}, f)
        return eval_utils.read_prediction_json(tmp)
    finally:
        os.unlink(tmp)


# ---------------------------------------------------------------------------
# Scoring: the package's own functions


def answer_stats(gold: NQGold, predictions: dict) -> tuple:
    """nq_eval.score_answers: (long, short) lists of (gold has answer, predicted, correct, score)."""
    _, nq_eval = _package()
    with non_null_threshold(gold.non_null_threshold):
        return nq_eval.score_answers(gold.labels, predictions)


def figures(long_stats: list, short_stats: list) -> dict:
    """nq_eval's figures under the package's names: its output (best threshold, R@P) and its F1 of the
    answers as written (compute_final_f1)."""
    _, nq_eval = _package()
    return {**nq_eval.get_metrics_with_answer_stats(long_stats, short_stats),
            **nq_eval.compute_final_f1(long_stats, short_stats)}


def score(predictions: dict, gold: NQGold) -> dict:
    """Every figure of `predictions` ({example_id: NQLabel}) against `gold`, and what they rest on."""
    result = figures(*answer_stats(gold, predictions))
    result.update(metric="nq", num_examples=len(gold.labels), gold_rule=gold.rule,
                  non_null_threshold=gold.non_null_threshold,
                  mean_f1=(result["long-answer-f1"] + result["short-answer-f1"]) / 2)
    return result


def score_files(predictions_path, gold_path) -> dict:
    gold = load_gold(gold_path)
    return score(read_predictions(predictions_path, gold), gold)


def document_counts(predictions: dict, gold: NQGold) -> dict:
    """{"long": [(tp, fp, fn)], "short": [...]} per gold document, in the gold's order, from the package's
    per-answer judgement: tp = correct, fp = predicted - correct, fn = gold has an answer - correct. Then
    2TP / (2TP + FP + FN) = 2C / (predicted + gold) is the package's F1 (2PR / (P + R)), so
    `intervals.f1_interval` bootstraps it over documents."""
    _, nq_eval = _package()
    out = {"long": [], "short": []}
    with non_null_threshold(gold.non_null_threshold):
        for eid, labels in gold.labels.items():
            for kind, judge in (("long", nq_eval.score_long_answer), ("short", nq_eval.score_short_answer)):
                has_gold, has_pred, correct, _ = judge(labels, predictions[eid])
                c = int(bool(correct))
                out[kind].append((c, int(bool(has_pred)) - c, int(bool(has_gold)) - c))
    return out


def rows_labels(rows: dict) -> dict:
    """{example_id: NQLabel} of Kaggle rows ({"<id>_long": "s:e", "<id>_short": ...}), scores 0: what the
    package's F1 of answers as written needs (it ignores scores)."""
    ids = dict.fromkeys(r.rsplit("_", 1)[0] for r in rows)
    return labels_of([prediction_entry(eid, rows[f"{eid}_long"], rows[f"{eid}_short"], 0.0, 0.0) for eid in ids])


def format_report(r: dict) -> str:
    lines = [f"NQ official evaluation (nq_eval of the {PACKAGE} package): {r['num_examples']} examples; gold: {r['gold_rule']}",
             "answers as written (compute_final_f1):",
             f"{'':7} {'F1':>7} {'P':>7} {'R':>7}"]
    for kind in ("long", "short"):
        lines.append(f"{kind:7} {r[f'{kind}-answer-f1']:7.4f} {r[f'{kind}-answer-precision']:7.4f} "
                     f"{r[f'{kind}-answer-recall']:7.4f}")
    lines += ["at nq_eval's best score threshold (its own output):",
              f"{'':7} {'F1':>7} {'P':>7} {'R':>7} {'thresh':>10} " + " ".join(f"{'R@P=' + str(t):>8}" for t in PR_TARGETS)]
    for kind in ("long", "short"):
        rp = " ".join(f"{r[f'{kind}-recall-at-precision>={t:.2}']:8.4f}" for t in PR_TARGETS)
        lines.append(f"{kind:7} {r[f'{kind}-best-threshold-f1']:7.4f} {r[f'{kind}-best-threshold-precision']:7.4f} "
                     f"{r[f'{kind}-best-threshold-recall']:7.4f} {r[f'{kind}-best-threshold']:10.4g} {rp}")
    return "\n".join(lines)


# ---------------------------------------------------------------------------
# Tuning


def _judged(records: list, gold: NQGold) -> dict:
    """Per scored document, as numpy arrays: whether its raw long/short answer is right (the package's
    judgement of the answer before the thresholds), whether it is non-blank, and whether the gold has one."""
    import numpy as np

    _, nq_eval = _package()
    # Right or wrong does not depend on the scores: 0 for all.
    labels = labels_of([prediction_entry(r["example_id"], r["raw_long"], r["raw_short"], 0.0, 0.0) for r in records])
    out = {k: [] for k in ("l_right", "l_nonblank", "l_gold", "s_right", "s_nonblank", "s_gold")}
    with non_null_threshold(gold.non_null_threshold):
        for r in records:
            eid = nq_example_id(r["example_id"])
            for k, judge in (("l", nq_eval.score_long_answer), ("s", nq_eval.score_short_answer)):
                has_gold, has_pred, correct, _ = judge(gold.labels[eid], labels[eid])
                out[f"{k}_right"].append(bool(correct))
                out[f"{k}_nonblank"].append(bool(has_pred))
                out[f"{k}_gold"].append(bool(has_gold))
    return {k: np.array(v, dtype=bool) for k, v in out.items()}


def _f1(c, p, g):
    import numpy as np

    return np.where(p + g > 0, 2 * c / np.maximum(p + g, 1), 0.0)


def tune(records: list, gold: NQGold, cfg=None, max_grid: int = 300) -> dict:
    """The thresholds maximising the mean of the package's long-answer-f1 and short-answer-f1 (answers as
    written) over scored documents (`tuning.read_scores`), as `tuning.tune` returns them: {"long_threshold",
    "short_threshold", "thresholds", "objective", "result" (`score` of the winner)}."""
    import dataclasses

    import numpy as np

    from solution.answers.postprocess import PostprocessConfig
    from solution.scoring.tuning import dinkelbach, middle_of_best, threshold_grid

    cfg = cfg or PostprocessConfig()
    records = scored(records, gold)
    j = _judged(records, gold)
    sc = np.array([r["score"] for r in records], dtype=np.float64)
    g_long, g_short = int(j["l_gold"].sum()), int(j["s_gold"].sum())
    long_grid = threshold_grid(sc, max_grid)
    answered = j["l_nonblank"][:, None] & (sc[:, None] > long_grid[None, :])  # [docs, long grid]
    f1_long = _f1(np.sum(answered & j["l_right"][:, None], 0), np.sum(answered, 0), g_long)
    if cfg.separate_thresholds:
        thresholds = {"long_threshold": float(long_grid[middle_of_best(f1_long)])}
        counts, grids, in_group = [], [], np.zeros(len(records), bool)
        for name, kind, key in (("short_threshold", "SHORT", "short_score"), ("yes_threshold", "YES", "yes_score"),
                                ("no_threshold", "NO", "no_score")):
            member = np.array([r["answer_type"] == kind for r in records])
            in_group |= member
            s = np.array([r[key] for r in records], dtype=np.float64)[member]
            grid = threshold_grid(s, max_grid) if len(s) else np.array([getattr(cfg, name)])
            ans = j["s_nonblank"][member][:, None] & (s[:, None] > grid[None, :])
            c, p = np.sum(ans & j["s_right"][member][:, None], 0), np.sum(ans, 0)
            counts.append(np.stack([c, p - c, int(j["s_gold"][member].sum()) - c], axis=1))
            grids.append((name, grid))
        choice = dinkelbach(counts, int(np.sum(j["s_gold"] & ~in_group)))
        thresholds.update({name: float(grid[i]) for (name, grid), i in zip(grids, choice)})
    else:
        ssc = np.array([r["short_score"] for r in records], dtype=np.float64)
        short_grid = threshold_grid(ssc, max_grid)
        is_short = np.array([r["answer_type"] == "SHORT" for r in records])
        short_pass = (~is_short)[:, None] | (ssc[:, None] > short_grid[None, :])  # [docs, short grid]
        table = np.zeros((len(long_grid), len(short_grid)))
        for i in range(len(long_grid)):
            sp = ((sc > long_grid[i]) & j["s_nonblank"])[:, None] & short_pass
            table[i] = (f1_long[i] + _f1(np.sum(sp & j["s_right"][:, None], 0), np.sum(sp, 0), g_short)) / 2
        rows, cols = np.nonzero(table >= table.max() - 1e-12)  # the middle of the plateau, as tuning.tune
        best_rows = np.unique(rows)
        i = int(best_rows[(len(best_rows) - 1) // 2])
        cols_i = cols[rows == i]
        thresholds = {"long_threshold": float(long_grid[i]), "short_threshold": float(short_grid[cols_i[len(cols_i) // 2]])}
    tuned = dataclasses.replace(cfg, **thresholds)
    result = score(labels_of([record_entry(r, tuned) for r in records]), gold)
    return {"long_threshold": thresholds["long_threshold"], "short_threshold": thresholds["short_threshold"],
            "thresholds": thresholds, "objective": result["mean_f1"], "result": result}


def scored(records: list, gold: NQGold) -> list:
    """The records of the gold's documents; every gold document must have one (the package scores whole files:
    a missing one is only "ids are not equal" to it)."""
    from solution.scoring.tuning import missing_scores

    records = [r for r in records if nq_example_id(r["example_id"]) in gold.labels]
    if not records:
        raise ValueError(f"no scored document is in the gold file {gold.path}")
    ids = {nq_example_id(r["example_id"]) for r in records}
    missing = [eid for eid in gold.labels if eid not in ids]
    if missing:
        raise ValueError(missing_scores(missing, len(gold.labels)))
    return records


def score_records(records: list, gold: NQGold, cfg) -> dict:
    """`score` of scored documents under `cfg`'s thresholds (the answers `record_entry` writes)."""
    return score(labels_of([record_entry(r, cfg) for r in records]), gold)


# ---------------------------------------------------------------------------
# Command line: the original-format gold the package's nq_eval reads


def main(argv=None) -> int:
    import argparse
    from pathlib import Path

    p = argparse.ArgumentParser(prog="python -m solution.scoring.nq_official",
                                description="Write a simplified-NQ gold file in NQ's original gzipped format, "
                                            "for the package's own command line (python -m "
                                            "natural_questions.nq_eval --gold_path OUT --predictions_path ...)")
    p.add_argument("--gold", required=True, help="simplified-NQ gold file (.jsonl or .jsonl.gz)")
    p.add_argument("--out", required=True, help="the original-format gold to write (.jsonl.gz)")
    args = p.parse_args(argv)
    try:
        if Path(args.out).resolve() == Path(args.gold).resolve():
            raise ValueError(f"--out {args.out} is --gold; write it elsewhere")
        n = write_original_gold(args.gold, args.out)
        gold = load_gold(args.gold)
    except (ValueError, OSError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    flags = "" if gold.non_null_threshold == FIVE_WAY_THRESHOLD else \
        f" --long_non_null_threshold={gold.non_null_threshold} --short_non_null_threshold={gold.non_null_threshold}"
    print(f"wrote {args.out}: {n} examples; gold: {gold.rule}\n"
          f"python -m natural_questions.nq_eval --gold_path {args.out} --predictions_path PRED.json{flags}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
