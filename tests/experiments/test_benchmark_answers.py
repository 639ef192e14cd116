"""scripts/benchmark_answers.py and its package solution.experiments.answers: its technique table uses the
agreed names; the YES/NO split counts right; paired deltas, the window cache, and (slow) a --quick run whose
rows carry consistent intervals and deltas."""

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import ROOT, nq_line, write_jsonl

from solution.experiments.answers import benchmark as phases
from solution.experiments.answers import charts, figures, record, references, report, runs, techniques
from solution.experiments.answers import corpus as corpus_files
from solution.experiments.answers import rows as row_steps
from solution.scoring.metric import load_gold, read_submission

spec = importlib.util.spec_from_file_location("benchmark_answers", ROOT / "scripts" / "benchmark_answers.py")
bench = importlib.util.module_from_spec(spec)  # the command: its arguments and main
spec.loader.exec_module(bench)


def test_every_technique_of_the_winning_solutions_is_a_row():
    assert set(techniques.TECHNIQUES) == {"top_level", "no_answer_score", "thresholds", "n_best", "max_context",
                                     "structure_tokens", "max_windows", "max_windows_4", "max_windows_16",
                                     "first_pass_meaning", "first_pass_stems", "first_pass_meaning_trained",
                                     "first_pass_meaning_negatives", "yes_no_repeat",
                                     "yes_no_pages", "yes_no_whole", "yes_no_balanced", "batch_32", "epochs_2", "polarity",
                                     "sentence_weight_2", "sentence_weight_8", "sentence_weight_32"}
    sets = {s for _, s_list in techniques.TECHNIQUES.values() for s in s_list}
    assert {s.split("=")[0] for s in sets} == {"top_level_only", "subtract_type_null", "score_space",
                                               "separate_thresholds", "n_best_aggregation", "max_context",
                                               "max_windows_per_document", "first_pass", "first_pass_keep_first",
                                               "sentence_weight"}
    assert {"max_windows_per_document=0", "max_windows_per_document=4", "max_windows_per_document=16"} <= sets
    assert techniques.FULL["config"] == "configs/train/nq-profile.yaml" and techniques.FULL["train"] == []


def test_yes_no_split(tmp_path):
    gold = write_jsonl(tmp_path / "gold.jsonl", [nq_line("1", long=0, yes_no="YES"), nq_line("2", long=0, yes_no="YES"),
                                                 nq_line("3", long=0, yes_no="NO"), nq_line("4")])
    sub = tmp_path / "sub.csv"
    # YES: right on 1, missed on 2, said wrongly on 3 and 4 -> tp 1, fp 2, fn 1. NO: said YES on 3 -> fn 1.
    sub.write_text("example_id,PredictionString\n" + "".join(
        f"{i}_long,\n{i}_short,{p}\n" for i, p in (("1", "YES"), ("2", ""), ("3", "YES"), ("4", "YES"))))
    split = figures.yes_no_split(read_submission(sub), load_gold(gold))
    assert (split["yes"]["tp"], split["yes"]["fp"], split["yes"]["fn"]) == (1, 2, 1)
    assert (split["no"]["tp"], split["no"]["fp"], split["no"]["fn"]) == (0, 0, 1)
    assert split["yes"]["micro_f1"] == 2 / (2 + 2 + 1)
    polarity = {k: split["polarity"][k] for k in ("yes_pages", "no_pages", "yes_on_yes", "no_on_yes", "yes_on_no",
                                                   "no_on_no")}
    assert polarity == {"yes_pages": 2, "no_pages": 1, "yes_on_yes": 1, "no_on_yes": 0, "yes_on_no": 1, "no_on_no": 0}
    assert split["polarity"]["gap"] == 0.0


def five_way(**kw):
    obj = nq_line(**kw)
    obj["annotations"] = obj["annotations"] * 5
    return obj


def test_first_paragraph_row_in_the_nq_papers_units(tmp_path):
    """The NQ paper's baseline: the first top-level <P> as the long answer, no short answer; its official
    long F1 here is 2 x 1 right / (3 predicted + 2 gold), counted by hand: the package's figure."""
    pytest.importorskip("natural_questions")
    gold = write_jsonl(tmp_path / "dev.jsonl", [five_way(example_id="1", long=0, shorts=[(12, 14)]),
                                                five_way(example_id="2", long=4), five_way(example_id="3")])
    rows = references.first_paragraph_rows(str(gold))
    assert rows == {"1_long": "6:18", "1_short": "", "2_long": "6:18", "2_short": "", "3_long": "6:18", "3_short": ""}
    row = references.first_paragraph_row({"dev": str(gold), "test": None})
    assert row["dev_nq_long_f1"] == pytest.approx(2 * 1 / (3 + 2)) and row["dev_nq_short_f1"] == 0
    assert row["dev_nq_long_f1_ci"][0] <= row["dev_nq_long_f1"] <= row["dev_nq_long_f1_ci"][1]
    assert row["dev_f1_tuned"] == row["dev_f1_untuned"] == pytest.approx(2 * 1 / (2 * 1 + 2 + 1))  # Kaggle: 1 TP, 2 FP, 1 FN
    line = report.table([{"technique": "first_paragraph", "enabled": None, "seed": None, "num_train_documents": 0} | row],
                       "check").splitlines()[-1]
    assert line.endswith(f"| {row['dev_nq_long_f1']:.3f} [{row['dev_nq_long_f1_ci'][0]:.3f}, "
                         f"{row['dev_nq_long_f1_ci'][1]:.3f}] (dev) | 0.000 [0.000, 0.000] (dev) |"), line


def f1(counts):
    tp, fp, fn = np.sum(counts, axis=0)
    return 2 * tp / (2 * tp + fp + fn)


def test_deltas_are_the_row_minus_its_reference_on_the_same_documents():
    base = {"_counts": {"test": [(1, 0, 0), (0, 1, 1), (0, 0, 2), (2, 0, 0)], "dev": [(1, 0, 0), (0, 0, 1)]}}
    row = {"_counts": {"test": [(1, 0, 0), (1, 0, 1), (0, 1, 1), (2, 0, 0)], "dev": [(1, 0, 0), (1, 0, 0)]}}
    d = figures.deltas(base, row)
    assert d["test_f1_delta"] == pytest.approx(f1(row["_counts"]["test"]) - f1(base["_counts"]["test"]))
    assert d["dev_f1_delta"] == pytest.approx(f1(row["_counts"]["dev"]) - f1(base["_counts"]["dev"]))
    assert d["test_f1_delta_ci"][0] <= d["test_f1_delta"] <= d["test_f1_delta_ci"][1]
    weak = {"_counts": {"test": [(0, 1, 1), (0, 1, 1), (0, 0, 2), (0, 1, 2)]}, "test_f1": 0.0}
    lexical = {"_counts": {"test": base["_counts"]["test"]}, "test_f1": f1(base["_counts"]["test"])}
    refs = figures.reference_deltas({"lexical": lexical, "bm25": weak, "first_paragraph": {}}, row)
    assert refs["lexical_delta"] == pytest.approx(d["test_f1_delta"])  # the baseline minus the lexical answerer
    assert refs["bm25_delta"] == pytest.approx(f1(row["_counts"]["test"]))
    assert "first_paragraph_delta" not in refs  # a failed reference row: no delta, no error
    assert refs["best_reference"] == "lexical" and refs["best_reference_delta"] == refs["lexical_delta"]
    assert figures.deltas(base, {"_counts": {"dev": row["_counts"]["dev"]}}).keys() == {"dev_f1_delta", "dev_f1_delta_ci"}
    assert figures.reference_deltas({"lexical": {}}, row) == {}


def test_a_technique_s_on_row_is_paired_against_the_no_training_rows_as_the_baseline_is(monkeypatch, tmp_path):
    """A technique that may become the recipe (two passes did) states its margin over the references too."""
    base = {"technique": "baseline", "seed": 0, "_model": "m", "_counts": {"test": [(1, 0, 0), (0, 1, 1), (0, 0, 2)]}}
    on = {"_counts": {"test": [(1, 0, 0), (1, 0, 0), (1, 0, 1)]}}
    lexical = {"_counts": {"test": [(0, 1, 1), (1, 0, 0), (0, 0, 2)]}, "test_f1": 0.4}
    monkeypatch.setattr(row_steps, "evaluate", lambda *a: dict(on))
    rows = row_steps.technique_rows(base, ["thresholds"], {"num_train_documents": 3}, {}, tmp_path, {"lexical": lexical})
    assert rows[-1]["lexical_delta"] == pytest.approx(f1(on["_counts"]["test"]) - f1(lexical["_counts"]["test"]))
    assert rows[-1]["best_reference"] == "lexical" and "test_f1_delta" in rows[-1]


def test_the_recipe_s_margin_is_also_stated_on_long_answers_against_the_best_reference_there():
    """A reference that answers long only (the sentence match) can be the best on the long rows while word
    matching is the best on both rows: each margin is paired against its own best."""
    base = {"_counts": {"test": [(2, 0, 0), (1, 1, 1), (0, 0, 2), (1, 0, 1)],
                        "test_long": [(1, 0, 0), (1, 0, 0), (0, 0, 1), (1, 0, 0)]}}
    lexical = {"_counts": {"test": [(2, 0, 0), (0, 1, 1), (1, 0, 1), (1, 0, 1)],
                           "test_long": [(1, 0, 0), (0, 1, 1), (1, 0, 0), (0, 1, 1)]}}
    sentences = {"_counts": {"test": [(1, 0, 1), (1, 0, 1), (0, 1, 2), (1, 0, 1)],
                             "test_long": [(1, 0, 0), (1, 0, 0), (0, 1, 1), (1, 0, 0)]}}
    for r in (lexical, sentences):
        r |= {"test_f1": f1(r["_counts"]["test"]), "test_long_f1": f1(r["_counts"]["test_long"])}
    refs = figures.reference_deltas({"lexical": lexical, "sentences": sentences, "first_paragraph": {}}, base)
    assert refs["best_reference"] == "lexical" and refs["best_long_reference"] == "sentences"
    assert refs["best_long_reference_delta"] == refs["sentences_long_delta"] == pytest.approx(
        f1(base["_counts"]["test_long"]) - f1(sentences["_counts"]["test_long"]))
    assert refs["lexical_long_delta"] == pytest.approx(f1(base["_counts"]["test_long"]) - f1(lexical["_counts"]["test_long"]))
    lo, hi = refs["best_long_reference_delta_ci"]
    assert lo <= refs["best_long_reference_delta"] <= hi
    line = report.table([{"technique": "baseline", "enabled": False, "seed": 0, "test_f1": 0.5} | refs], "t").splitlines()[-1]
    assert "vs lexical " in line and "; long vs sentences " in line


def test_references_only_scores_the_four_no_training_rows_and_trains_nothing(monkeypatch, tmp_path):
    methods = []
    monkeypatch.setattr(references, "lexical_row", lambda corpus, method="words": methods.append(method) or {"test_f1": 0.1})
    monkeypatch.setattr(references, "first_paragraph_row", lambda corpus: {"test_f1": 0.0})
    monkeypatch.setattr(row_steps, "train", lambda *a, **k: pytest.fail("references-only trains nothing"))
    rows = phases.benchmark({"dev": "d", "test": "t"}, dict(techniques.QUICK), tmp_path, [], references_only=True)
    assert [r["technique"] for r in rows] == ["lexical", "bm25", "first_paragraph", "sentences"]
    assert methods == ["words", "bm25", "sentences"] and all(r["seed"] is None for r in rows)
    assert "sentences" in techniques.NO_TECHNIQUE  # never drawn as a technique's bar pair
    with pytest.raises(SystemExit):
        bench.parse_args(["--json", "x.json", "--references-only", "--merge", "a.json"])


def test_references_names_the_no_training_rows_scored(monkeypatch, tmp_path):
    """--references: a run in pieces may leave the sentence match (~40 CPU minutes) to the record it is merged
    after; the rows it names alone are scored, and a name of none is refused before any work."""
    methods = []
    monkeypatch.setattr(references, "lexical_row", lambda corpus, method="words": methods.append(method) or {"test_f1": 0.1})
    monkeypatch.setattr(references, "first_paragraph_row", lambda corpus: {"test_f1": 0.0})
    rows = phases.benchmark({"dev": "d", "test": "t"}, dict(techniques.QUICK), tmp_path, [], references_only=True,
                            reference_names=["first_paragraph", "lexical"])
    assert [r["technique"] for r in rows] == ["lexical", "first_paragraph"] and methods == ["words"]
    assert bench.parse_args(["--json", "x.json", "--references", ""]).references == []
    assert bench.parse_args(["--json", "x.json"]).references == list(techniques.REFERENCES)
    for argv in (["--references", "lexical,words"], ["--references", "", "--references-only"]):
        with pytest.raises(SystemExit):
            bench.parse_args(["--json", "x.json", *argv])


def test_every_row_carries_its_long_rows_f1_with_an_interval(tmp_path):
    pytest.importorskip("natural_questions")
    gold = write_jsonl(tmp_path / "dev.jsonl", [five_way(example_id="1", long=0, shorts=[(12, 14)]),
                                                five_way(example_id="2", long=4), five_way(example_id="3")])
    row = references.first_paragraph_row({"dev": str(gold), "test": None})
    assert row["dev_long_f1"] == pytest.approx(row["dev_untuned"]["long"]["micro_f1"])
    assert row["dev_long_f1_ci"][0] <= row["dev_long_f1"] <= row["dev_long_f1_ci"][1]
    assert len(row["_counts"]["dev_long"]) == 3


def test_ensemble_members_take_the_next_seeds():
    assert row_steps.ensemble_seeds([0, 1]) == [0, 1, 2]
    assert row_steps.ensemble_seeds([0]) == [0, 1, 2]
    assert row_steps.ensemble_seeds([3, 7, 1, 4]) == [3, 7, 1]


def test_the_window_cache_runs_each_window_once_and_returns_its_logits():
    ran = []

    def base(batch):  # logits that depend on the window's ids alone; records what it was asked to run
        ids = batch["input_ids"].numpy().astype(np.float32)
        ran.append(len(ids))
        return ids * 2, ids * 3, ids[:, :5]

    def batch(rows, width=6):
        ids = torch.zeros(len(rows), width, dtype=torch.long)
        mask = torch.zeros_like(ids)
        for i, r in enumerate(rows):
            ids[i, :len(r)], mask[i, :len(r)] = torch.tensor(r), 1
        return {"input_ids": ids, "attention_mask": mask, "token_type_ids": torch.zeros_like(ids)}

    from solution.answers.inference import LogitCache  # the cache the benchmark's models load with

    cached = LogitCache(base)
    a, b, c = [101, 7, 8, 9, 102], [101, 5, 102], [101, 6, 6, 102]
    cached(batch([a, b]))
    s, e, t = cached(batch([c, b, a], width=5))  # b and a known: c alone runs
    assert ran == [2, 1]
    assert s.shape == (3, 5) and t.shape == (3, 5)
    for i, r in enumerate([c, b, a]):
        assert s[i, :len(r)].tolist() == [2.0 * x for x in r] and e[i, :len(r)].tolist() == [3.0 * x for x in r]
    assert cached(batch([b])) and ran == [2, 1]


def test_bad_sizes_and_seeds_are_refused_by_name(capsys):
    for argv in (["--train-sizes", "300,x"], ["--train-sizes", "0,10"], ["--seeds", ""], ["--techniques", "nope"]):
        with pytest.raises(SystemExit):
            bench.parse_args(["--json", "x.json", *argv])
        assert argv[0].lstrip("-").split("-")[0] in capsys.readouterr().err


def _close(a, b):
    return a == pytest.approx(b, abs=1e-12)


def _check_intervals(r, documents=6):
    assert r["dev_f1_ci"][0] <= r["dev_f1_tuned"] <= r["dev_f1_ci"][1], r
    assert r["test_f1_ci"][0] <= r["test_f1"] <= r["test_f1_ci"][1], r
    assert (r["num_dev_documents"], r["num_test_documents"]) == (documents, documents)
    assert 0.0 <= r["test_mlebench"] <= 1.0 and 0.0 <= r["dev_mlebench"] <= 1.0
    assert isinstance(r["num_train_documents"], int)


def _check_delta(r, ref):
    assert _close(r["test_f1_delta"], r["test_f1"] - ref["test_f1"]), r
    assert _close(r["dev_f1_delta"], r["dev_f1_tuned"] - ref["dev_f1_tuned"]), r
    assert r["test_f1_delta_ci"][0] <= r["test_f1_delta"] <= r["test_f1_delta_ci"][1]


@pytest.mark.slow
def test_quick_run_rows_carry_intervals_deltas_lexical_ensembles_and_the_curve(tmp_path):
    out = tmp_path / "answers.json"
    r = subprocess.run([sys.executable, "scripts/benchmark_answers.py", "--quick", "--json", str(out),
                        "--out", str(tmp_path / "run")], cwd=ROOT, capture_output=True, text=True)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    rows = json.loads(out.read_text())
    assert not [x for x in rows if "error" in x or "_counts" in x]
    for x in rows:  # the yes/no rows score 3 more pages on each side
        _check_intervals(x, 9 if x["technique"].endswith("_yes_no") else 6)
    lexical = next(x for x in rows if x["technique"] == "lexical")
    assert lexical["num_train_documents"] == 0
    bm25 = next(x for x in rows if x["technique"] == "bm25")
    assert bm25["short_f1"] == 0.0 and bm25["num_train_documents"] == 0  # long answers only
    assert next(x for x in rows if x["technique"] == "first_paragraph")["thresholds"] is None
    sentences = next(x for x in rows if x["technique"] == "sentences")  # the backbone's own sentence vectors
    assert sentences["short_f1"] == 0.0 and sentences["num_train_documents"] == 0  # long answers only
    for x in rows:  # the NQ paper's units: official long and short F1, each inside its interval
        for key in ("dev_nq_long_f1", "dev_nq_short_f1", "test_nq_long_f1", "test_nq_short_f1"):
            assert x[f"{key}_ci"][0] <= x[key] <= x[f"{key}_ci"][1], (x["technique"], key)
    base = next(x for x in rows if x["technique"] == "baseline" and x["seed"] == 0)
    assert _close(base["lexical_delta"], base["test_f1"] - lexical["test_f1"])
    assert base["lexical_delta_ci"][0] <= base["lexical_delta"] <= base["lexical_delta_ci"][1]
    assert _close(base["sentences_delta"], base["test_f1"] - sentences["test_f1"])
    best_long = max((x for x in rows if x["technique"] in techniques.REFERENCES), key=lambda x: x["test_long_f1"])
    assert base["best_long_reference"] == best_long["technique"]
    assert _close(base["best_long_reference_delta"], base["test_long_f1"] - best_long["test_long_f1"])
    on = {x["technique"]: x for x in rows if x["enabled"] is True and x["technique"] in techniques.TECHNIQUES}
    assert set(on) == set(techniques.TECHNIQUES)
    for x in on.values():
        _check_delta(x, base)
    # the first pass runs 8 windows a page: all of them are more, 4 are fewer
    assert on["max_windows"]["num_test_windows"] > base["num_test_windows"] > on["max_windows_4"]["num_test_windows"]
    members = {x["seed"]: x for x in rows if x["technique"] == "ensemble" and x["enabled"] is False}
    ensembles = {x["seed"]: x for x in rows if x["technique"] == "ensemble" and x["enabled"]}
    assert set(members) == {0, 1, 2} and set(ensembles) == {"0+1", "0+1+2"}
    for name, x in ensembles.items():
        seeds = [int(s) for s in name.split("+")]
        best = max((members[s] for s in seeds), key=lambda m: m["dev_f1_tuned"])
        assert x["best_member"] == best["seed"]
        _check_delta(x, best)
    # thresholds again on dev and test with 3 yes/no pages added to each: the baseline's model, more documents
    yes_no = {x["enabled"]: x for x in rows if x["technique"] == "thresholds_yes_no"}
    assert set(yes_no) == {False, True} and yes_no[True]["yes_no_documents_added"] == 3
    assert yes_no[False]["num_test_documents"] == base["num_test_documents"] + 3
    assert yes_no[False]["num_dev_documents"] == base["num_dev_documents"] + 3
    _check_delta(yes_no[True], yes_no[False])
    # yes_no_repeat's model and the baseline's on the same pages with the yes/no supplement (off: the baseline)
    repeat = {x["enabled"]: x for x in rows if x["technique"] == "yes_no_repeat_yes_no"}
    assert set(repeat) == {False, True} and repeat[False]["test_f1"] == yes_no[False]["test_f1"]
    assert repeat[True]["train_overrides"] == ["--yes_no_repeat", "8"] and "yes_no_f1" in repeat[True]
    _check_delta(repeat[True], repeat[False])
    whole = {x["enabled"]: x for x in rows if x["technique"] == "yes_no_whole_yes_no"}
    assert set(whole) == {False, True} and whole[False]["test_f1"] == yes_no[False]["test_f1"]
    assert whole[True]["train_overrides"][-2:] == ["--long_overrun_yes_no", "false"]
    curve = sorted((x for x in rows if x["technique"] == "learning_curve"), key=lambda x: x["num_train_documents"])
    assert [x["num_train_documents"] for x in curve] == [6, 12] and curve[1]["test_f1"] == base["test_f1"]
    from solution.scoring.mlebench import score_files  # the grader on the CSV the script wrote: the same score
    gold = tmp_path / "run" / "data" / "simplified-nq-test-gold.jsonl"
    assert score_files(tmp_path / "run" / "baseline-seed0" / "test.csv", gold)["score"] == base["test_mlebench"]
    assert out.with_suffix(".png").stat().st_size > 0 and (tmp_path / "answers-curve.png").stat().st_size > 0
    # the polarity stage beside yes_no_pages's model, on the pages with the yes/no supplement (off: the baseline)
    polarity = {x["enabled"]: x for x in rows if x["technique"] == "polarity_yes_no"}
    assert set(polarity) == {False, True} and polarity[False]["test_f1"] == yes_no[False]["test_f1"]
    _check_delta(polarity[True], polarity[False])
    # Stage 1 trained once per seed, and every stage 2 of a seed starts from its model; the polarity stage from
    # yes_no_pages's model, its replay from its first training.
    models = tmp_path / "run" / "models"
    warm = {p.name.split("-")[1]: p for p in models.iterdir() if p.name.startswith("warm-seed")}
    assert set(warm) == {"seed0", "seed1", "seed2"}
    starts = {"polarity_whole": "yes_no_pages", "polarity_replay": "polarity_whole"}
    for p in models.iterdir():
        if not p.name.startswith("warm-"):
            command = json.loads((p / "benchmark_train.json").read_text())["command"]
            seed, name = command[command.index("--seed") + 1], p.name.rsplit("-seed", 1)[0]
            start = next(models.glob(f"{starts[name]}-seed{seed}-*")) if name in starts else warm[f"seed{seed}"]
            assert command[command.index("--model_name_or_path") + 1] == str(start / "model")
            # every page of the corpus (12), the curve its own, yes_no_pages its 3 yes/no pages more, the
            # polarity stage its 3 YES and 3 NO pages, then (up to) 800 of the corpus's
            pages = command[len(command) - 1 - command[::-1].index("--max_train_examples") + 1]
            assert pages == {"curve6": "6", "yes_no_pages": "15", "yes_no_whole": "15", "yes_no_balanced": "15",
                             "polarity_whole": "6", "polarity_replay": "800"}.get(name, "12"), p.name


@pytest.mark.parametrize("record", ["answers.json", "answers-nq.json", "answers-nq-lexical.json"])
def test_the_landed_record_holds_what_its_page_reports(record):
    """A landed answers record: each F1 inside its own interval, each difference the gap between the rows
    it compares (a hand-edited figure fails here), and docs/answers.md's headline drawn from it (every
    figure on every answers page: tests/house/test_docs.py). The nq-shaped and nq profiles' records
    (answers.json, answers-nq.json) also carry the NQ paper's long and short F1 on every row; the nq-lexical
    one was measured before those columns existed, its models are gone."""
    rows = json.loads((ROOT / "docs" / "benchmarks" / record).read_text())
    assert not [x for x in rows if "error" in x]
    for x in [x for x in rows if x["technique"] == techniques.FIRST_PASS]:  # recall, not answers
        assert x["recall_at_4"] <= x["recall_at_8"] <= x["recall_at_16"], (x["ranking"], x["split"])
        for n in (4, 8, 16):
            assert x[f"recall_at_{n}_ci"][0] <= x[f"recall_at_{n}"] <= x[f"recall_at_{n}_ci"][1]
    rows = [x for x in rows if x["technique"] != techniques.FIRST_PASS]
    base = {x["seed"]: x for x in rows if x["technique"] == "baseline"}
    lexical = next(x for x in rows if x["technique"] == "lexical")
    for x in rows:
        assert x["test_f1_ci"][0] <= x["test_f1"] <= x["test_f1_ci"][1], x["technique"]
    for x in rows:
        if x["technique"] in techniques.TECHNIQUES and x["enabled"]:
            _check_delta(x, base[x["seed"]])
    for x in base.values():
        assert _close(x["lexical_delta"], x["test_f1"] - lexical["test_f1"])
    if record != "answers-nq-lexical.json":
        for x in rows:
            for key in ("dev_nq_long_f1", "dev_nq_short_f1", "test_nq_long_f1", "test_nq_short_f1"):
                assert x[f"{key}_ci"][0] <= x[key] <= x[f"{key}_ci"][1], (x["technique"], x["seed"], key)
    for x in rows:  # a polarity row: its cut read the dev pages it says, YES and NO F1 inside the yes/no F1's span
        if x["technique"].startswith("polarity") and x["enabled"] and x.get("polarity_cut"):
            cut = x["polarity_cut"]  # the YES and NO pages weighed alike (a cut of most pages right: older rows)
            assert cut.get("balanced_at_0", 0) <= cut.get("balanced", 1) and cut["right"] <= cut["pages"]
            assert "balanced" in cut or cut["right_at_0"] <= cut["right"], x["technique"]
            assert min(x["yes_f1"], x["no_f1"]) <= x["yes_no_f1"] <= max(x["yes_f1"], x["no_f1"]), x["technique"]
    page = (ROOT / "docs" / "answers.md").read_text()
    for x in base.values():
        assert f"{x['test_f1']:.3f} ({x['test_f1_ci'][0]:.3f}-{x['test_f1_ci'][1]:.3f})" in page
        assert f"{x['lexical_delta']:+.3f} ({x['lexical_delta_ci'][0]:+.3f} to {x['lexical_delta_ci'][1]:+.3f})" in page


def test_corpus_seed_profile_and_no_techniques_parse():
    args = bench.parse_args(["--json", "x.json", "--corpus-seed", "7", "--techniques", "", "--seeds", "0"])
    assert (args.corpus_seed, args.profile, args.techniques, args.seeds) == (7, "nq", [], [0])
    assert bench.parse_args(["--json", "x.json", "--profile", "nq-lexical"]).profile == "nq-lexical"
    with pytest.raises(SystemExit):
        bench.parse_args(["--json", "x.json", "--corpus-seed", "-1"])


def test_every_model_trains_on_every_page_unless_its_row_says_otherwise(monkeypatch, tmp_path):
    """A technique's model trains on the corpus's pages, as its baseline does, not on the config's own cap;
    the curve on its N; `yes_no_pages` on its own file (the file whose digest names the model)."""
    calls = []
    monkeypatch.setattr(runs, "warm_start", lambda *a: ([], 0.0))
    monkeypatch.setattr(runs, "train_run", lambda name, args, config, train_file, out:
                        calls.append((args, train_file)) or (tmp_path / name, 1.0))
    corpus = {"train": "t.jsonl", "dev": "d.jsonl", "train_overrides": [], "num_train_documents": 4000,
              "yes_no_train": "ty.jsonl", "yes_no_train_pages": "4800"}
    plan = {"config": "configs/train/nq-profile.yaml"}

    def pages(args):
        return args[len(args) - 1 - args[::-1].index("--max_train_examples") + 1]
    runs.train("yes_no_repeat", 0, techniques.TECHNIQUES["yes_no_repeat"][0], corpus, plan, tmp_path)
    runs.train("curve500", 0, [], corpus, plan, tmp_path, 500)
    runs.train("yes_no_pages", 0, techniques.TECHNIQUES["yes_no_pages"][0], corpus, plan, tmp_path)
    assert [pages(a) for a, _ in calls] == ["4000", "500", "4800"]
    assert [f for _, f in calls] == ["t.jsonl", "t.jsonl", "ty.jsonl"]


def test_the_polarity_rows_read_yes_and_no_with_a_polarity_model_trained_from_yes_no_pages_model(monkeypatch, tmp_path):
    """`polarity`: the answer model is `yes_no_pages`'s (the same command), the polarity stage trains from it
    (six passes over the balanced yes/no pages, then the first 800 training pages), and both the main and the
    yes/no rows read with it as the polarity model; off is the baseline."""
    from solution.experiments.answers import rows as rows_module

    calls, scored = [], []
    monkeypatch.setattr(runs, "warm_start", lambda *a: (["--model_name_or_path", "stage1"], 0.0))
    monkeypatch.setattr(runs, "train_run", lambda name, args, config, train_file, out:
                        calls.append((name, args, train_file)) or (tmp_path / name, 1.0))
    monkeypatch.setattr(rows_module, "evaluate", lambda models, sets, corpus, d, polarity=None:
                        scored.append((models, corpus["dev"], polarity)) or {"test_f1": 0.5, "dev_f1_tuned": 0.5})
    monkeypatch.setattr(rows_module, "deltas", lambda off, on: {})
    corpus = {"train": "t.jsonl", "dev": "d.jsonl", "train_overrides": [], "num_train_documents": 4000,
              "yes_no_train": "ty.jsonl", "yes_no_train_pages": "4800", "polarity_train": "tp.jsonl",
              "polarity_train_pages": "1600", "yes_no": {"dev": "dy.jsonl", "added": 80}}
    base = {"technique": "baseline", "enabled": False, "seed": 0, "_model": tmp_path / "baseline", "test_f1": 0.4}
    main, yes_no = rows_module.polarity_rows(base, corpus, {"config": "configs/train/nq-profile.yaml"}, tmp_path)

    def flag(args, name):
        return args[len(args) - 1 - args[::-1].index(name) + 1]
    (answer, a_args, a_file), (whole, w_args, w_file), (replay, r_args, r_file) = calls
    assert (answer, whole, replay) == ("yes_no_pages-seed0", "polarity_whole-seed0", "polarity_replay-seed0")
    plan = {"config": "configs/train/nq-profile.yaml"}
    runs.train("yes_no_pages", 0, techniques.TECHNIQUES["yes_no_pages"][0], corpus, plan, tmp_path)
    assert calls[-1][1] == a_args  # the yes_no_pages technique's own model: trained once for both
    assert flag(a_args, "--model_name_or_path") == "stage1" and a_file == "ty.jsonl"
    assert flag(w_args, "--model_name_or_path") == str(tmp_path / "yes_no_pages-seed0") and w_file == "tp.jsonl"
    assert (flag(w_args, "--num_train_epochs"), flag(w_args, "--max_train_examples")) == ("6", "1600")
    assert flag(w_args, "--long_overrun_yes_no") == "false"
    assert flag(r_args, "--model_name_or_path") == str(tmp_path / "polarity_whole-seed0") and r_file == "t.jsonl"
    assert flag(r_args, "--max_train_examples") == "800" and "--num_train_epochs" not in r_args
    assert [(m, d, p) for m, d, p in scored] == [
        ([tmp_path / "yes_no_pages-seed0"], "d.jsonl", tmp_path / "polarity_replay-seed0"),
        ([tmp_path / "baseline"], "dy.jsonl", None),
        ([tmp_path / "yes_no_pages-seed0"], "dy.jsonl", tmp_path / "polarity_replay-seed0")]
    assert [(r["technique"], r["enabled"]) for r in main + yes_no] == [
        ("polarity", False), ("polarity", True), ("polarity_yes_no", False), ("polarity_yes_no", True)]
    assert main[0]["test_f1"] == 0.4 and main[1]["train_seconds"] == 3.0
    assert yes_no[1]["train_seconds"] == 3.0 and "train_seconds" not in yes_no[0]  # the same model's training


def test_records_of_one_corpus_merge_into_one_a_later_row_replacing_an_earlier(tmp_path):
    def row(technique, seed, pages=4000, enabled=False, f1=0.5, corpus_seed=0):
        return {"technique": technique, "enabled": enabled, "seed": seed, "num_train_documents": pages,
                "test_f1": f1, "corpus": "nq", "corpus_seed": corpus_seed}
    a = tmp_path / "a.json"
    a.write_text(json.dumps([row("learning_curve", 0, 4000), row("baseline", 0), row("yes_no_repeat", 0, enabled=True),
                             row("lexical", None, 0), row("learning_curve", 0, 500)]))
    b = tmp_path / "b.json"
    b.write_text(json.dumps([row("baseline", 1), row("yes_no_repeat", 0, enabled=True, f1=0.6),
                             row("learning_curve", 1, 4000)]))
    rows = record.merge_records([a, b])
    assert [(r["technique"], r["seed"], r["num_train_documents"]) for r in rows] == [
        ("lexical", None, 0), ("baseline", 0, 4000), ("yes_no_repeat", 0, 4000), ("baseline", 1, 4000),
        ("learning_curve", 0, 500), ("learning_curve", 0, 4000), ("learning_curve", 1, 4000)]
    assert rows[2]["test_f1"] == 0.6
    # the curve is the first seed's: seed 1's baseline is not a point of it
    assert [(r["seed"], r["num_train_documents"]) for r in charts.curve_points(rows, "test_f1")] == [(0, 500), (0, 4000)]
    c = tmp_path / "c.json"
    c.write_text(json.dumps([row("baseline", 2, corpus_seed=7)]))
    with pytest.raises(runs.StepFailed, match="one corpus"):
        record.merge_records([a, c])
    with pytest.raises(runs.StepFailed, match="missing.json: no such file"):
        record.merge_records([a, tmp_path / "missing.json"])


def test_no_ensembles_trains_the_seeds_asked_for_alone(monkeypatch):
    """--no-ensembles: the techniques of --seeds without the third seed the ensembles would train."""
    trained = []
    monkeypatch.setattr(references, "lexical_row", lambda corpus, method="words": {})
    monkeypatch.setattr(references, "first_paragraph_row", lambda corpus: {})
    monkeypatch.setattr(phases, "baseline", lambda seed, *a: trained.append(seed) or
                        {"technique": "baseline", "seed": seed, "_model": "m"})
    monkeypatch.setattr(phases, "technique_rows", lambda base, names, *a: [])
    monkeypatch.setattr(phases, "ensemble_rows", lambda *a: [{"technique": "ensemble"}])
    monkeypatch.setattr(phases, "curve_rows", lambda base, *a: [])
    plan = {"seeds": [0, 1]}
    rows = phases.benchmark({}, plan, Path("x"), ["thresholds"], ensembles_wanted=False)
    assert trained == [0, 1] and not [r for r in rows if r["technique"] == "ensemble"]
    trained.clear()
    rows = phases.benchmark({}, plan, Path("x"), ["thresholds"])
    assert trained == [0, 1, 2] and [r for r in rows if r["technique"] == "ensemble"]
    assert bench.parse_args(["--json", "x.json", "--no-ensembles"]).ensembles is False


def test_the_curve_projection_fits_f1_on_log_pages_and_seconds_on_pages():
    """F1 = a + b log2(pages): +0.1 a doubling from 0.2 at 500 pages reaches 0.8 at 500 x 2^6 = 32,000 pages;
    the seconds a line through the points (300 + 0.3 x pages here). Fewer than three points, or a curve that
    does not rise, project nothing."""
    def point(n, f, t):
        return {"technique": "learning_curve", "num_train_documents": n, "test_f1": f,
                "test_f1_ci": [f - 0.05, f + 0.05], "train_seconds": t}
    rows = [point(500, 0.2, 450), point(1000, 0.3, 600), point(2000, 0.4, 900), point(4000, 0.5, 1500)]
    fit = charts.curve_projection(rows)
    assert fit["pages_for_target"] == 32000 and fit["per_doubling"] == pytest.approx(0.1)
    assert fit["train_seconds_for_target"] == pytest.approx(300 + 0.3 * 32000, rel=1e-6)
    assert charts.curve_projection(rows[:2]) is None
    flat = [point(n, 0.3, 100) for n in (500, 1000, 2000)]
    assert "pages_for_target" not in charts.curve_projection(flat)


# ---------------------------------------------------------------------------
# --merge: each record's corpus as written; what it cannot read or tell apart, one line


def merge(tmp_path, *records, out="merged.json"):
    """`--merge RECORDS --json OUT` in this process, stopped after 20 s instead of hanging on a pipe."""
    import signal

    def stop(*_):
        raise TimeoutError("--merge still running after 20 s")
    previous = signal.signal(signal.SIGALRM, stop)
    signal.alarm(20)
    try:
        return bench.main(["--merge", *map(str, records), "--json", str(tmp_path / out)])
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def test_merge_keeps_each_records_corpus_as_written(tmp_path):
    """The nq-lexical record's rows say corpus "nq" and no seed (written before rows recorded one): merged
    alone they stay so, never "nq, corpus seed 0", the nq profile's record they would then pass for."""
    lexical = ROOT / "docs" / "benchmarks" / "answers-nq-lexical.json"
    assert merge(tmp_path, lexical) == 0
    written = json.loads((tmp_path / "merged.json").read_text())
    assert {(r.get("corpus"), r.get("corpus_seed")) for r in written} == {("nq", None)}
    assert sorted(map(json.dumps, written)) == sorted(map(json.dumps, json.loads(lexical.read_text())))


def test_merge_of_a_record_of_old_rows_without_pages_works(tmp_path):
    """The real-corpus record was written before rows counted their training pages."""
    real = ROOT / "docs" / "benchmarks" / "answers-real.json"
    assert merge(tmp_path, real) == 0
    assert len(json.loads((tmp_path / "merged.json").read_text())) == len(json.loads(real.read_text()))


def test_merge_refuses_records_it_cannot_tell_apart_naming_both_files(tmp_path, capsys):
    lexical = ROOT / "docs" / "benchmarks" / "answers-nq-lexical.json"
    profile = ROOT / "docs" / "benchmarks" / "answers-nq.json"
    for records in ([profile, lexical], [lexical, tmp_path / "copy.json"]):
        (tmp_path / "copy.json").write_text(lexical.read_text())
        assert merge(tmp_path, *records) == 2
        err = capsys.readouterr().err
        assert err.startswith("error: ") and err.count("\n") == 1, err
        assert str(records[0]) in err and str(records[1]) in err, err
        assert not (tmp_path / "merged.json").exists()


def _row(**fields):
    return {"technique": "baseline", "enabled": False, "seed": 0, "num_train_documents": 10, "test_f1": 0.5,
            "corpus": "nq", "corpus_seed": 0, **fields}


@pytest.mark.parametrize("content, said", [
    ({"rows": []}, "expected a JSON list of rows"),
    ([], "no rows"),
    ([5], "row 0: expected an object"),
    ([_row(), {"enabled": False, "seed": 0}], "row 1: field 'technique'"),
    ([_row(technique=None)], "row 0: field 'technique'"),
    ([_row(seed=[0])], "row 0: field 'seed'"),
    ([_row(enabled="yes")], "row 0: field 'enabled'"),
    ([_row(num_train_documents="10")], "row 0: field 'num_train_documents'"),
    ([_row(test_f1="0.5")], "row 0: field 'test_f1'"),
    ([_row(test_f1_ci=[0.1])], "row 0: field 'test_f1_ci'"),
    ([_row(), _row(technique="top_level", seed=None)], "row 1: field 'seed'"),
    ([_row(), _row(corpus_seed=3)], "rows of 2 corpora"),
    ("[[[[" * 100000 + "]]]]" * 100000, "nested deeper"),
    ("[" + '{"technique": "baseline", "test_f1": 1' + "0" * 400 + "}]", "digits"),
])
def test_merge_of_what_is_not_a_record_is_one_line(tmp_path, capsys, content, said):
    bad = tmp_path / "bad.json"
    bad.write_text(content if isinstance(content, str) else json.dumps(content))
    assert merge(tmp_path, bad) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: {bad}") and err.count("\n") == 1 and said in err, err
    assert not (tmp_path / "merged.json").exists()


@pytest.mark.parametrize("kind", ["fifo", "folder", "missing"])
def test_merge_refuses_a_pipe_or_folder_before_reading(tmp_path, capsys, kind):
    import os

    bad = tmp_path / "record"
    if kind == "fifo":
        os.mkfifo(bad)
    elif kind == "folder":
        bad.mkdir()
    assert merge(tmp_path, bad) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: {bad}") and err.count("\n") == 1, err


def fake_trainings(monkeypatch, seconds: float) -> list:
    """`runs.run` standing in for solution.train: it writes a model directory and records each command."""
    trained = []

    def fake_run(args, stdout=None):
        model = Path(args[args.index("--output_dir") + 1]) / "model"
        model.mkdir(parents=True, exist_ok=True)
        (model / "qa_config.json").write_text("{}")
        trained.append(args)
        return seconds
    monkeypatch.setattr(runs, "run", fake_run)
    return trained


def test_a_training_marker_cut_short_trains_that_model_again(monkeypatch, tmp_path):
    """A model's `benchmark_train.json` that will not parse (a run killed while writing it) is no proof that the
    model finished: it is trained again, not a JSONDecodeError."""
    trained = fake_trainings(monkeypatch, 12.34)
    train_file = write_jsonl(tmp_path / "train.jsonl", [nq_line()])
    args = ["--seed", "0"]
    model, secs = runs.train_run("baseline", args, "configs/train/tiny.yaml", str(train_file), tmp_path)
    assert (secs, len(trained)) == (12.3, 1)
    assert runs.train_run("baseline", args, "configs/train/tiny.yaml", str(train_file), tmp_path) == (model, 12.3)
    assert len(trained) == 1  # the finished model is reused
    marker = model.parent / "benchmark_train.json"
    marker.write_text(marker.read_text()[:10])
    assert runs.train_run("baseline", args, "configs/train/tiny.yaml", str(train_file), tmp_path) == (model, 12.3)
    assert len(trained) == 2


def test_a_model_is_found_whether_its_paths_were_given_from_the_repository_or_whole(monkeypatch, tmp_path):
    """`--out runs/x` and `--out /checkout/runs/x` train the same model: the second finds the first's."""
    trained = fake_trainings(monkeypatch, 1.0)
    train_file = write_jsonl(tmp_path / "train.jsonl", [nq_line()])
    relative = ["--seed", "0", "--model_name_or_path", "runs/x/models/warm/model"]
    whole = ["--seed", "0", "--model_name_or_path", str(ROOT / "runs/x/models/warm/model")]
    first = runs.train_run("baseline", relative, "configs/train/tiny.yaml", str(train_file), tmp_path)
    assert runs.train_run("baseline", whole, "configs/train/tiny.yaml", str(train_file), tmp_path) == first
    assert len(trained) == 1
    outside = ["--seed", "0", "--model_name_or_path", str(tmp_path / "warm")]  # outside the repository: as given
    assert runs.key_args(outside) == outside and runs.key_args(whole) == relative


def test_the_real_lines_are_the_folder_the_command_is_given(monkeypatch, tmp_path, capsys):
    """--corpus real reads the folder --real-lines (or NQ_REAL_LINES) names, never a path outside the checkout
    it guesses; without one, or with a folder that is not there, one line says so and nothing is trained."""
    monkeypatch.delenv("NQ_REAL_LINES", raising=False)
    assert bench.parse_args(["--json", "x.json"]).real_lines is None
    assert bench.main(["--corpus", "real", "--json", str(tmp_path / "a.json")]) == 2
    assert "--real-lines" in capsys.readouterr().err
    assert bench.main(["--corpus", "real", "--real-lines", str(tmp_path / "none"), "--json", str(tmp_path / "a.json")]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: {tmp_path / 'none'} not found") and err.count("\n") == 1, err
    monkeypatch.setenv("NQ_REAL_LINES", str(tmp_path))
    args = bench.parse_args(["--json", "x.json", "--corpus", "real"])
    corpus = corpus_files.real_corpus(Path(args.real_lines), techniques.FULL)
    assert (corpus["train"], corpus["dev"], corpus["test"]) == (
        str(tmp_path / "simplified-nq-train-sample.jsonl"), str(tmp_path / "simplified-nq-dev-sample.jsonl"), None)
    assert not (tmp_path / "a.json").exists()


def test_the_first_pass_rows_record_recall_with_intervals_on_test_pages_and_the_real_lines(tmp_path):
    """--first-pass: a row per ranking and set of pages (the corpus's test pages; the real lines' two samples
    pooled), each recall at 4, 8 and 16 windows as `corpus_stats` measures it on the same files, inside its
    interval, with the pages it was scored on; they merge apart from each other and are read as a record's
    rows (they have no test F1, no seed and no bar)."""
    import shutil
    from dataclasses import replace

    from solution import corpus_stats, synth
    from solution.experiments.answers.first_pass import first_pass_rows, first_pass_table

    assert synth.main(["--profile", "nq-shaped", "--out", str(tmp_path / "c"), "--seed", "3", "--num-train", "1",
                       "--num-dev", "1", "--num-test", "12"]) == 0
    gold = tmp_path / "c" / "simplified-nq-test-gold.jsonl"
    real = tmp_path / "real"
    real.mkdir()
    for name in (corpus_files.REAL_TRAIN_FILE, corpus_files.REAL_DEV_FILE):
        shutil.copy(gold, real / name)
    rows = first_pass_rows({"test_gold": str(gold)}, ["words", "stems"], 1, str(real))
    assert [(r["ranking"], r["split"], r["keep_first"]) for r in rows] == [
        ("words", "test", 1), ("stems", "test", 1), ("words", "real_lines", 1), ("stems", "real_lines", 1)]
    featurizer = corpus_stats.default_featurizer()
    featurizer.config = replace(featurizer.config, first_pass_keep_first=1)
    alone = corpus_stats.corpus_figures([str(gold)], featurizer, ["words", "stems"])
    for r in rows:
        assert "error" not in r and r["seed"] is None and r["num_train_documents"] == 0
        assert r["num_documents"] == alone["first_pass_documents"] * (2 if r["split"] == "real_lines" else 1) > 0
        assert r["recall_at_8"] == pytest.approx(alone[corpus_stats.recall_key(r["ranking"], 8)])
        assert r["recall_at_4"] <= r["recall_at_8"] <= r["recall_at_16"]
        for n in (4, 8, 16):
            assert r[f"recall_at_{n}_ci"][0] <= r[f"recall_at_{n}"] <= r[f"recall_at_{n}_ci"][1]
        assert record.row_problem(r | {"corpus": "nq-shaped", "corpus_seed": 3}) is None
    assert "| stems | 1 | real_lines |" in first_pass_table(rows)
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    base = {"technique": "baseline", "enabled": False, "seed": 0, "num_train_documents": 4000, "test_f1": 0.5}
    tagged = [r | {"corpus": "nq-shaped", "corpus_seed": 3} for r in rows]
    a.write_text(json.dumps([base | {"corpus": "nq-shaped", "corpus_seed": 3}] + tagged[:2]))
    b.write_text(json.dumps(tagged[2:]))
    merged = record.merge_records([a, b])
    assert [(r["technique"], r.get("split")) for r in merged] == [
        ("first_pass", "test"), ("first_pass", "test"), ("first_pass", "real_lines"), ("first_pass", "real_lines"),
        ("baseline", None)]
    assert techniques.FIRST_PASS in techniques.NO_TECHNIQUE  # never drawn as a technique's bar pair


def test_first_pass_options_are_checked_before_any_work(tmp_path, capsys):
    """A first pass that is not one, --first-pass with --merge, a negative keep, or a real-lines folder without
    its two samples: refused in one line, before a page is written."""
    assert bench.parse_args(["--json", "x.json"]).first_pass == []
    args = bench.parse_args(["--json", "x.json", "--first-pass", "words, meaning", "--references-only",
                             "--references", ""])
    assert (args.first_pass, args.first_pass_keep_first, args.references) == (["words", "meaning"], 0, [])
    for argv in (["--first-pass", "bm25"], ["--first-pass", "words", "--merge", "a.json"],
                 ["--first-pass", "words", "--first-pass-keep-first", "-1"]):
        with pytest.raises(SystemExit):
            bench.parse_args(["--json", "x.json", *argv])
    real = tmp_path / "real"
    real.mkdir()
    (real / corpus_files.REAL_TRAIN_FILE).write_text("")
    out = tmp_path / "run"
    capsys.readouterr()
    assert bench.main(["--profile", "nq-shaped", "--first-pass", "words", "--real-lines", str(real), "--json",
                       str(tmp_path / "a.json"), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err == f"error: {real / corpus_files.REAL_DEV_FILE} not found: the real NQ sample's folder holds it\n"
    assert not out.exists() and not (tmp_path / "a.json").exists()


def test_num_test_sizes_the_synthetic_test_split_alone(monkeypatch, tmp_path, capsys):
    """--num-test reaches the corpus's synth command as the plan's test pages; the training and dev pages do
    not move with it (so a run in the same --out keeps its models' keys), and it is refused where it would
    change nothing."""
    from solution.experiments.answers import command

    args = bench.parse_args(["--json", "x.json", "--num-test", "600", "--techniques", ""])
    plan = command.plan_of(args)
    assert plan["num_test"] == 600 and plan["num_dev"] == techniques.FULL["num_dev"]
    assert command.plan_of(bench.parse_args(["--json", "x.json"]))["num_test"] == techniques.FULL["num_test"]
    ran = []
    monkeypatch.setattr(corpus_files, "run", lambda cmd: ran.append(cmd) or 0.0)
    corpus_files.synthetic_corpus(args, plan | {"yes_no": 0}, tmp_path)
    synth = ran[0]
    assert synth[synth.index("--num-test") + 1] == "600" and synth[synth.index("--num-dev") + 1] == "400"
    # Its rows name their own corpus, so a record of those test pages is never merged into one of the plan's.
    assert report.corpus_name(args) == "nq-test600"
    assert report.corpus_name(bench.parse_args(["--json", "x.json", "--num-test", "400"])) == "nq"
    assert report.corpus_name(bench.parse_args(["--json", "x.json", "--quick", "--num-test", "9"])) == "nq-test9-quick"
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    row = {"technique": "baseline", "enabled": False, "seed": 0, "num_train_documents": 4000, "corpus_seed": 0}
    a.write_text(json.dumps([row | {"corpus": "nq"}]))
    b.write_text(json.dumps([row | {"corpus": "nq-test600"}]))
    with pytest.raises(runs.StepFailed, match="one corpus"):
        record.merge_records([a, b])
    for argv in (["--num-test", "0"], ["--num-test", "5", "--corpus", "real"], ["--num-test", "5", "--merge", "a.json"]):
        with pytest.raises(SystemExit):
            bench.parse_args(["--json", "x.json", *argv])
        assert "--num-test" in capsys.readouterr().err
