"""Scoring a row's predictions ({row id: PredictionString}) as every row of the answers benchmark is:
micro-F1 split long / short / YES / NO, MLE-bench's score, the NQ paper's official F1, each with its 95%
bootstrap interval over documents; and the paired differences between rows on the same documents."""

from __future__ import annotations

import functools


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
    from solution.scoring.metric import f1_figures, parse_prediction, yes_no_polarity
    out, both = {}, [0, 0, 0]
    for label in ("YES", "NO"):
        tp = fp = fn = 0
        for eid, g in gold.items():
            said = parse_prediction(predictions[f"{eid}_short"]) == label
            tp, fp, fn = tp + (said and label in g.short), fp + (said and label not in g.short), \
                fn + (not said and label in g.short)
        out[label.lower()] = f1_figures(tp, fp, fn)
        both = [both[0] + tp, both[1] + fp, both[2] + fn]
    out["yes_no"] = f1_figures(*both)  # YES and NO together: a row counts when either is said or valid
    polarity = yes_no_polarity(predictions, gold)
    if polarity:
        out["polarity"] = polarity | polarity_gap(polarity)
    return out


def score_rows(predictions: dict, gold_path: str) -> dict:
    """`metric.score` (what `solution.evaluate` prints) with the YES / NO split."""
    from solution.scoring.metric import score
    gold = gold_of(gold_path)
    return score(predictions, gold) | yes_no_split(predictions, gold)


FORM_FIELD = "question_form"
"""The gold lines' field saying whether a question was asked in a form training showed ("seen") or one held
out of it ("held_out"): nq-shaped's pages carry it, every other corpus's none."""


@functools.lru_cache(maxsize=None)
def forms_of(path: str) -> tuple | None:
    """Each gold document's question form, in file order, or None for a file whose first line has none (every
    profile but nq-shaped, the real lines). Once the first line has it, every line must
    (`split_by.field_values` names the one that does not): a page left out of both groups is never silent."""
    from solution.common.jsonio import loads
    from solution.data.nq import iter_lines
    from solution.scoring.split_by import field_values
    first = next((text for _, text in iter_lines(path) if text.strip()), None)
    if first is None or FORM_FIELD not in loads(first, f"{path}: field '<json>'"):
        return None
    return tuple(field_values(path, FORM_FIELD))


def form_split(split: str, predictions: dict, gold_path: str) -> dict:
    """{SPLIT_by_question_form: {form: documents, micro-F1, interval}} where the gold says each question's form:
    whether the reader learnt to read or learnt training's phrasings, which one overall figure averages."""
    from solution.scoring.split_by import scores_by_value
    forms = forms_of(gold_path)
    if forms is None:
        return {}
    return {f"{split}_by_question_form": scores_by_value(predictions, gold_of(gold_path), list(forms))}


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


def split_f1s(row: dict, dev: dict) -> dict:
    """{long_f1, short_f1, yes_f1, no_f1, yes_no_f1} of the row's test split; of the untuned dev predictions
    `dev` where there is no test gold (the real corpus)."""
    split = row.get("test") or dev
    return {f"{k}_f1": split[k]["micro_f1"] for k in ("long", "short", "yes", "no", "yes_no")}


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
        out |= paired_against(references, base, key, figure, suffix, best_name)
    return out


def paired_against(references: dict, base: dict, key: str, figure: str, suffix: str, best_name: str) -> dict:
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
