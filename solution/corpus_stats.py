"""How NQ-shaped a simplified-NQ file is: the figures that hold the synthetic `nq` profile to the real sample.

    python -m solution.corpus_stats FILE [FILE ...] [--json] [--first-pass | --model DIR]

What each figure counts, and how: `solution.scoring.corpus_figures`; this command reads the files, prints
the tables (or one JSON object) and says what was wrong with its arguments.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import replace

from solution.scoring.corpus_figures import (
    FIRST_PASS_WINDOWS,
    NEED_ROWS,
    OVERLAP_ROWS,
    ROWS,
    SHAPE_PAGES,
    SHAPE_ROWS,
    WINDOW_NEED_ROWS,
    corpus_figures,
    default_featurizer,
    model_featurizer,
    recall_key,
    sentence_embed,
)
from solution.windows.first_pass import METHODS as FIRST_PASS_METHODS


def format_table(figures: dict, title: str = "figure") -> str:
    lines = [f"| {title} | value |", "|---|---|"]
    for key, label, kind in ROWS:
        v = figures[key]
        text = "-" if v is None else (f"{v:,.0f}" if kind == "count" else f"{v:.2f}")
        lines.append(f"| {label} | {text} |")
    lines.append(f"| documents (gold long answers) | {figures['documents']:,} ({figures['gold_long_answers']:,}) |")
    return "\n".join(lines)


def format_needs(figures: dict) -> str:
    """What the techniques need: documents having each thing, of the documents with gold annotations."""
    total = figures["annotated_documents"]
    lines = [f"| documents with ... (of {total:,} with gold) | documents | share | measures |", "|---|---|---|---|"]
    for key, what, settings in NEED_ROWS + WINDOW_NEED_ROWS:
        if key in figures:
            share = f"{figures[key] / total:.3f}" if total else "-"
            lines.append(f"| {what} | {figures[key]:,} | {share} | {settings} |")
    return "\n".join(lines)


def format_overlap(figures: dict) -> str:
    """How much the question's words say where the answer is (rows without a figure are left out)."""
    lines = [f"| question/answer overlap (of {figures['coverage_documents']:,} gold long answers) | value |",
             "|---|---|"]
    rows = OVERLAP_ROWS + tuple((recall_key(m, n), f"first pass ({m}) recall: a window holding the gold long answer "
                                f"among the {n} kept") for m in FIRST_PASS_METHODS[1:] for n in FIRST_PASS_WINDOWS)
    for key, label in rows:
        if key in figures:
            v = figures[key]
            lines.append(f"| {label} | {'-' if v is None else f'{v:.2f}'} |")
    return "\n".join(lines)


def format_shape(figures: dict) -> str:
    """Where the gold sits and how the page and question are written (SHAPE_ROWS), each with its sample size."""
    sizes = {"question_names_subject_share": "subject_documents", "repeated_shape_share": "shape_pages",
             "yes_question_words_on_page_share": "yes_documents", "no_question_words_on_page_share": "no_documents"}
    lines = ["| page and question shape | value | of |", "|---|---|---|"]
    for key, label in SHAPE_ROWS:
        v, n = figures[key], figures[sizes.get(key, "position_documents")]
        lines.append(f"| {label.format(pages=SHAPE_PAGES)} | {'-' if v is None else f'{v:.2f}'} | {n:,} |")
    return "\n".join(lines)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m solution.corpus_stats", description=__doc__.split("\n\n")[0])
    p.add_argument("files", nargs="+", metavar="FILE", help="simplified-NQ files (.jsonl or .jsonl.gz), pooled")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--model", metavar="DIR", help="a model directory: also count the documents whose gold answers "
                   "sit in several windows, near a window's edge, or in no window whole, cut as DIR cuts them")
    p.add_argument("--first-pass", nargs="*", metavar="NAME",
                   help=f"also the recall of the gold long answer at 4, 8 and 16 windows of each first pass named "
                   f"({', '.join(FIRST_PASS_METHODS)}; none named: words), and its CPU seconds a document, windows "
                   "cut by the default tokenizer with the nq-profile recipe's settings (needs torch and transformers; "
                   "--model DIR cuts them as DIR does; meaning and fused embed every sentence, seconds a page)")
    p.add_argument("--keep-first", type=int, default=None, metavar="N",
                   help="the first pass keeps each page's first N windows holding a candidate whatever their rank "
                   "(window.first_pass_keep_first; default 0, or DIR's)")
    args = p.parse_args(argv)
    methods = args.first_pass or ["words"]
    unknown = [m for m in methods if m not in FIRST_PASS_METHODS]
    if unknown:
        print(f"error: --first-pass: unknown first pass {unknown[0]!r} (one of {', '.join(FIRST_PASS_METHODS)}; "
              "the files go before --first-pass)", file=sys.stderr)
        return 2
    try:
        featurizer = (model_featurizer(args.model) if args.model
                      else default_featurizer() if args.first_pass is not None else None)
        if featurizer is not None and args.keep_first is not None:
            featurizer.config = replace(featurizer.config, first_pass_keep_first=args.keep_first)
        embed = sentence_embed(featurizer, methods)
        figures = corpus_figures(args.files, featurizer, methods, embed)
    except (ValueError, FileNotFoundError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(figures))
    else:
        print(format_table(figures, ", ".join(args.files)) + "\n\n" + format_needs(figures) + "\n\n"
              + format_overlap(figures) + "\n\n" + format_shape(figures))
    return 0


if __name__ == "__main__":
    sys.exit(main())
