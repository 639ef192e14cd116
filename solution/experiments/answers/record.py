"""Reading the answers benchmark's records: each row checked for what merging, the table and the charts
read, and the records of a run made in pieces merged into one (records of one corpus only)."""

from __future__ import annotations

import json
import re

from solution.experiments.answers.runs import StepFailed
from solution.experiments.answers.techniques import FIRST_PASS, REFERENCES

ROW_KEY = ("technique", "enabled", "seed", "num_train_documents")  # one row of a record; pages may be absent (old records)
# What tells two first-pass rows apart (absent from every other row).
FIRST_PASS_KEY = ("ranking", "keep_first", "split")
# The figures the table and the charts read: a number, or null where there is none (no test gold).
FIGURES = ("dev_f1_untuned", "dev_f1_tuned", "test_f1", "test_mlebench", "dev_mlebench", "long_f1", "short_f1",
           "yes_f1", "no_f1", "test_f1_delta", "dev_f1_delta", "best_reference_delta", "best_long_reference_delta",
           "train_seconds", "dev_long_f1", "test_long_f1", "dev_nq_long_f1", "dev_nq_short_f1", "test_nq_long_f1",
           "test_nq_short_f1", "recall_at_4", "recall_at_8", "recall_at_16", "cpu_seconds_per_page")
ENSEMBLE_SEEDS = re.compile(r"[0-9]+(\+[0-9]+)*")


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


def is_number(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def row_problem(r) -> str | None:
    """What makes `r` no row of a record (None: it is one)."""
    if not isinstance(r, dict):
        return f"expected an object, got {type(r).__name__}"
    missing = [k for k in ROW_KEY[:3] if k not in r]
    if missing:
        return f"field '{missing[0]}': missing (not a row benchmark_answers wrote)"
    seed, technique = r["seed"], r["technique"]
    no_model = technique in (*REFERENCES, FIRST_PASS)  # rows of no trained model have no seed
    checks = {"technique": isinstance(technique, str),
              "enabled": r["enabled"] in (None, True, False) and not is_number(r["enabled"]),
              "seed": (isinstance(seed, int) and not isinstance(seed, bool)) or (seed is None and no_model)
              or (technique == "ensemble" and isinstance(seed, str) and bool(ENSEMBLE_SEEDS.fullmatch(seed))),
              "num_train_documents": (r.get("num_train_documents") is None and technique != "learning_curve")
              or (isinstance(r.get("num_train_documents"), int) and not isinstance(r["num_train_documents"], bool)),
              "corpus": isinstance(r.get("corpus"), (str, type(None))),
              "corpus_seed": r.get("corpus_seed") is None or isinstance(r["corpus_seed"], int)}
    checks |= {k: r.get(k) is None or is_number(r[k]) for k in FIGURES}
    checks |= {k: r[k] is None or (isinstance(r[k], list) and len(r[k]) == 2 and all(map(is_number, r[k])))
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


def merged_order(r: dict) -> tuple:
    """A merged record's order: the first passes and references first (as a run writes them), then each seed's
    rows, the ensembles, the curve by pages."""
    if r["technique"] in REFERENCES:
        return 0, REFERENCES.index(r["technique"])
    if r["technique"] == FIRST_PASS:
        return 0, -1
    if r["technique"] == "ensemble":
        return 2, 0
    if r["technique"] == "learning_curve":
        return 3, r["num_train_documents"]
    return 1, r["seed"]


def merge_records(paths: list) -> list:
    """The rows of several records of one corpus (a benchmark run in pieces) as one record: a row of a later
    file replaces the same row (technique, enabled, seed, pages; a first pass's ranking, kept windows and pages) of
    an earlier one; first passes and references first, then
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
            merged[tuple(r.get(k) for k in ROW_KEY + FIRST_PASS_KEY)] = r
    return sorted(merged.values(), key=merged_order)
