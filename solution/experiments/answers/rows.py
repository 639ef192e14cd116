"""The answers benchmark's trained rows: each seed's baseline, each technique off and on with the on row's
paired differences, the ensembles against their best member, the yes/no rows and the learning curve. A step
that fails becomes its row's `error`, never the end of the run."""

from __future__ import annotations

import subprocess
from pathlib import Path

from solution.experiments.answers.figures import deltas, reference_deltas
from solution.experiments.answers.runs import StepFailed, train
from solution.experiments.answers.techniques import (
    NUM_ENSEMBLE_MEMBERS,
    POLARITY,
    POLARITY_REPLAY,
    POLARITY_WHOLE,
    TECHNIQUES,
    YES_NO_TECHNIQUE,
)
from solution.experiments.answers.variant import evaluate


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
    """The recipe as it is for `seed`, with its paired differences against each no-training row."""
    head = {"technique": "baseline", "enabled": False, "seed": seed,
            "num_train_documents": corpus["num_train_documents"]}
    row = attempt(head, lambda: trained("baseline", seed, [], [], corpus, plan, out))
    return row | reference_deltas(references, row)


def technique_rows(base: dict, techniques: list, corpus: dict, plan: dict, out: Path, references: dict) -> list:
    """Each technique's off row (the baseline) and on row, with the on row's paired deltas against it and, as
    the baseline has them, against each no-training row scored (a technique may change what the recipe is)."""
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
        rows.append(row | deltas(base, row) | reference_deltas(references, row))
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


def yes_no_pair(base: dict, name: str, on_model: dict, on_head: dict, sets: list, corpus: dict, out: Path,
                polarity=None) -> list:
    """Rows `name` off (the baseline's model) and on (`on_model`'s "_model" with `sets`, and the polarity model
    `polarity` where given) on dev and test with the yes/no supplement added, the on row with its paired
    deltas. The window cache runs each model's windows once, however many rows score them."""
    seed, added = base["seed"], corpus["yes_no"]
    head = {"technique": name, "seed": seed, "num_train_documents": corpus["num_train_documents"],
            "yes_no_documents_added": added["added"]}
    if "_model" not in base or "_model" not in on_model:
        return [head | {"enabled": flag, "error": f"a model of seed {seed} failed"} for flag in (False, True)]
    off = attempt(head | {"enabled": False}, lambda: evaluate([base["_model"]], [], added, out / f"{name}-off-seed{seed}"))
    on = attempt(head | {"enabled": True, **on_head},
                 lambda: evaluate([on_model["_model"]], sets, added, out / f"{name}-seed{seed}", polarity))
    return [off, on | deltas(off, on)]


def yes_no_rows(base: dict, corpus: dict, out: Path) -> list:
    """The baseline and `separate_thresholds` on dev and test with the yes/no supplement added (off, on)."""
    name, sets = YES_NO_TECHNIQUE
    return yes_no_pair(base, name, base, {"set": sets}, sets, corpus, out)


def yes_no_trained_rows(base: dict, row: dict, name: str, corpus: dict, out: Path, polarity=None) -> list:
    """The baseline's model (off) and technique `name`'s (on, `row`, with the polarity model `polarity` where
    given) on dev and test with the yes/no supplement added, with the on row's paired deltas."""
    trained_as = {"train_overrides": row.get("train_overrides"), "train_seconds": row.get("train_seconds")}
    return yes_no_pair(base, f"{name}_yes_no", row, trained_as, [], corpus, out, polarity)


def polarity_models(seed: int, corpus: dict, plan: dict, out: Path) -> tuple:
    """(answer model, polarity model, seconds of their trainings): the answer model is `yes_no_pages`'s (the
    same command, so the same model, trained once for both rows), the polarity stage's two trainings from it."""
    answer, answer_secs = train("yes_no_pages", seed, TECHNIQUES["yes_no_pages"][0], corpus, plan, out)
    whole, whole_secs = train("polarity_whole", seed, POLARITY_WHOLE, corpus, plan, out, start=answer)
    reader, replay_secs = train("polarity_replay", seed, POLARITY_REPLAY, corpus, plan, out, start=whole)
    return answer, reader, round(answer_secs + whole_secs + replay_secs, 1)


def polarity_rows(base: dict, corpus: dict, plan: dict, out: Path) -> tuple:
    """([polarity off, on] on the corpus's pages, [polarity_yes_no off, on] with the yes/no supplement added):
    off is the baseline, on the answer model with the polarity model beside it, its cut and thresholds tuned
    on dev; each on row with its paired deltas against the baseline."""
    seed = base["seed"]
    off = base | {"technique": POLARITY, "enabled": False}
    head = {"technique": POLARITY, "enabled": True, "seed": seed, "train_overrides": TECHNIQUES[POLARITY][0],
            "num_train_documents": corpus["num_train_documents"]}
    if "_model" not in base:
        on = head | {"error": f"the baseline of seed {seed} failed"}
        return [off, on], yes_no_pair(base, f"{POLARITY}_yes_no", on, {}, [], corpus, out) if corpus.get("yes_no") else []

    def trained_pair() -> dict:
        answer, reader, secs = polarity_models(seed, corpus, plan, out)
        return evaluate([answer], [], corpus, out / f"{POLARITY}-seed{seed}", reader) | {
            "train_seconds": secs, "_model": answer, "_polarity": reader}

    on = attempt(head, trained_pair)
    main = [off, on | deltas(base, on)]
    if not corpus.get("yes_no"):
        return main, []
    return main, yes_no_trained_rows(base, on, POLARITY, corpus, out, on.get("_polarity"))


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
