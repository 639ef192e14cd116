"""The recipe's figures (`scripts/gpu_check.py --recipe-figures DIR`): dev's tuned micro-F1 and test's, each with its
95% bootstrap interval over documents, and the same for the word-matching reference on the same pages, with the
paired difference. numpy and the project's scoring only, as on the bare GPU image.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

# What recipe_figures reads, in the recipe's folder.
FIGURE_INPUTS = ("dev-scores.jsonl", "test.csv", "stage2/model/qa_config.json",
                 *(f"nq-profile/simplified-nq-{name}.jsonl" for name in ("dev", "test", "test-gold")))


def interval_figures(predictions: dict, gold: dict) -> tuple:
    """({f1, ci, num_documents}, per-document counts) of `predictions` against `gold`."""
    from solution.scoring.intervals import f1_interval
    from solution.scoring.metric import document_counts

    counts = document_counts(predictions, gold)
    return f1_interval(counts), counts


def lexical_figures(dev_path: Path, test_path: Path, dev_gold: dict, test_gold: dict) -> tuple:
    """Word matching (solution.lexical), its thresholds tuned on dev, on test: ({dev_f1_tuned, test...}, counts)."""
    from solution.model.references import lexical_records
    from solution.scoring.tuning import predictions_with, tuned_on_dev

    tuned, best = tuned_on_dev(lexical_records(dev_path), dev_gold)
    test, counts = interval_figures(predictions_with(lexical_records(test_path), tuned), test_gold)
    return {"dev_f1_tuned": best["result"]["micro_f1"], "test_f1": test["f1"], "test_f1_ci": test["ci"],
            "thresholds": best["thresholds"]}, counts


def recipe_figures(recipe_dir: Path) -> dict:
    """Dev (tuned) and test micro-F1 of the stage-2 model with their intervals, word matching's, the difference."""
    from solution.answers.postprocess import PostprocessConfig
    from solution.model.qa_config import read_qa_config
    from solution.scoring.intervals import paired_difference
    from solution.scoring.metric import load_gold, read_submission
    from solution.scoring.tuning import predictions_with, read_scores

    profile = recipe_dir / "nq-profile"
    dev_path, test_path = profile / "simplified-nq-dev.jsonl", profile / "simplified-nq-test.jsonl"
    dev_gold, test_gold = load_gold(dev_path), load_gold(profile / "simplified-nq-test-gold.jsonl")
    # recipe-tune wrote the dev-tuned thresholds into the model directory: the dev predictions under them.
    tuned = PostprocessConfig(**read_qa_config(recipe_dir / "stage2" / "model" / "qa_config.json")["postprocess"])
    dev, _ = interval_figures(predictions_with(read_scores(recipe_dir / "dev-scores.jsonl"), tuned), dev_gold)
    test, counts = interval_figures(read_submission(recipe_dir / "test.csv"), test_gold)
    lexical, lexical_counts = lexical_figures(dev_path, test_path, dev_gold, test_gold)
    delta = paired_difference(lexical_counts, counts)
    return {"dev_f1_tuned": dev["f1"], "dev_f1_ci": dev["ci"], "num_dev_documents": dev["num_documents"],
            "test_f1": test["f1"], "test_f1_ci": test["ci"], "num_test_documents": test["num_documents"],
            "thresholds": {"long_threshold": tuned.long_threshold, "short_threshold": tuned.short_threshold},
            "lexical": lexical, "minus_lexical": delta["delta"], "minus_lexical_ci": delta["ci"]}


def print_recipe_figures(recipe_dir: Path) -> int:
    """--recipe-figures: the figures as one JSON line (exit 0), or one line naming what is missing (exit 2)."""
    missing = [name for name in FIGURE_INPUTS if not (recipe_dir / name).is_file()]
    if missing:
        print(f"error: --recipe-figures {recipe_dir}: the recipe did not finish: no {', '.join(missing)}",
              file=sys.stderr)
        return 2
    try:
        figures = recipe_figures(recipe_dir)
    except (OSError, ValueError, KeyError, TypeError) as e:  # a file cut short or of another shape
        print(f"error: --recipe-figures {recipe_dir}: {type(e).__name__}: {e}", file=sys.stderr)
        return 2
    print(json.dumps(figures))
    return 0
