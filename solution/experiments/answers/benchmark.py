"""Every row of the answers benchmark in its order of cost: the no-training references, the baselines,
the techniques that only post-process, the ensembles, the techniques that retrain, the learning curve."""

from __future__ import annotations

from pathlib import Path

from solution.experiments.answers.references import reference_rows
from solution.experiments.answers.rows import (
    baseline,
    curve_rows,
    ensemble_rows,
    ensemble_seeds,
    polarity_rows,
    technique_rows,
    yes_no_rows,
    yes_no_trained_rows,
)
from solution.experiments.answers.techniques import POLARITY, REFERENCES, TECHNIQUES, YES_NO_TECHNIQUE, YES_NO_TRAINED


def benchmark(corpus: dict, plan: dict, out: Path, techniques: list, partial=lambda rows: None,
              ensembles_wanted: bool = True, references_only: bool = False, reference_names=REFERENCES) -> list:
    """Every row, cheapest proof first: the no-training references, the baselines of every seed (the
    ensembles' members too), the techniques that only post-process, the ensembles, then the techniques that
    retrain and the curve. `partial(rows)` gets the rows done so far after each phase, so a run cut short
    leaves its results. No techniques, or `ensembles_wanted` false: no ensembles, whose extra seeds would
    triple the training (no techniques: the baselines of `plan["seeds"]`, the references and the curve
    alone). `references_only`: the references alone, nothing trained. `reference_names`: the no-training rows
    scored (the baselines' differences are against those alone)."""
    references = reference_rows(corpus, reference_names)
    if references_only:
        return list(references.values())
    baselines, per_technique, ensembles, curve = {}, {}, [], []
    names = techniques + ([YES_NO_TECHNIQUE[0]] if "thresholds" in techniques and corpus.get("yes_no") else [])
    names += [f"{n}_yes_no" for n in techniques if n in (*YES_NO_TRAINED, POLARITY) and corpus.get("yes_no")]

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
                if name == POLARITY and retrains:
                    per_technique[seed, name], per_technique[seed, f"{name}_yes_no"] = polarity_rows(
                        baselines[seed], corpus, plan, out)
                    partial(rows())
                elif bool(TECHNIQUES[name][0]) == retrains:  # polarity (it retrains) is the branch above
                    per_technique[seed, name] = technique_rows(baselines[seed], [name], corpus, plan, out, references)
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
