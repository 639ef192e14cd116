"""The first pass's recall in the answers benchmark's record (`--first-pass`): for each ranking named, the
share of the answerable pages whose gold long answer sits in one of the 4, 8 and 16 windows it keeps, with a
95% bootstrap interval over the pages and its CPU seconds a page, on the corpus's test pages and on the real
NQ lines (`--real-lines`). Windows are cut as the nq-profile recipe cuts them (`solution.corpus_stats`, whose
`--first-pass` gives the same figures for any file); the rows train nothing, like the references."""

from __future__ import annotations

import functools
from dataclasses import replace
from pathlib import Path

from solution.experiments.answers.corpus import REAL_DEV_FILE, REAL_TRAIN_FILE
from solution.experiments.answers.rows import attempt
from solution.experiments.answers.techniques import FIRST_PASS


def first_pass_pages(corpus: dict, real_lines: str | None) -> list:
    """[(name, files)] the recall is measured on: the corpus's test pages where it has test gold, and the real
    lines' train and dev samples pooled where a folder of them is given."""
    pages = [("test", [corpus["test_gold"]])] if corpus.get("test_gold") else []
    if real_lines:
        pages.append(("real_lines", [str(Path(real_lines) / REAL_TRAIN_FILE), str(Path(real_lines) / REAL_DEV_FILE)]))
    return pages


def recall_row(stats, ranking: str) -> dict:
    """One ranking's figures from a `corpus_figures.CorpusStats` that scored it."""
    recall = stats.first_pass_recall(ranking)
    if not recall:
        raise ValueError("no page with a gold long answer and a question content word to measure recall on")
    pages = next(iter(recall.values()))["num_documents"]
    row = {"num_documents": pages,
           "cpu_seconds_per_page": round(stats.first_pass_seconds[ranking] / pages, 4)}
    for n, r in recall.items():
        row |= {f"recall_at_{n}": r["share"], f"recall_at_{n}_ci": r["ci"]}
    return row


def first_pass_rows(corpus: dict, rankings: list, keep_first: int, real_lines: str | None) -> list:
    """A row per ranking of `rankings` and set of pages (`first_pass_pages`), the first pass keeping each
    page's first `keep_first` windows whatever their rank (`window.first_pass_keep_first`)."""
    if not rankings:
        return []
    from solution.scoring.corpus_figures import default_featurizer, pooled_stats, sentence_embed

    featurizer = default_featurizer()
    featurizer.config = replace(featurizer.config, first_pass_keep_first=keep_first)
    embed = sentence_embed(featurizer, rankings)
    rows = []
    for name, files in first_pass_pages(corpus, real_lines):
        print(f"--> first pass {', '.join(rankings)} (keep first {keep_first}) on {name}: {', '.join(files)}",
              flush=True)
        stats = functools.cache(lambda: pooled_stats(files, featurizer, rankings, embed))  # one pass, every ranking
        rows += [attempt({"technique": FIRST_PASS, "enabled": None, "seed": None, "num_train_documents": 0,
                          "ranking": r, "keep_first": keep_first, "split": name, "files": files},
                         lambda r=r: recall_row(stats(), r)) for r in rankings]
    return rows


def first_pass_table(rows: list) -> str:
    """The first-pass rows as a table: recall at 4, 8 and 16 windows with intervals, pages, seconds a page."""
    lines = ["| first pass | keep first | pages | scored | recall at 4 | recall at 8 [95% CI] | recall at 16 "
             "| CPU s a page |", "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        head = f"| {r['ranking']} | {r['keep_first']} | {r['split']} "
        if "error" in r:
            lines.append(head + f"| failed: {r['error'][:80]} ||||")
            continue
        ci = r["recall_at_8_ci"]
        lines.append(head + f"| {r['num_documents']} | {r['recall_at_4']:.3f} | {r['recall_at_8']:.3f} "
                     f"[{ci[0]:.3f}, {ci[1]:.3f}] | {r['recall_at_16']:.3f} | {r['cpu_seconds_per_page']} |")
    return "\n".join(lines)
