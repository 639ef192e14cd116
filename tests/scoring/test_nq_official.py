"""NQ's official evaluation (solution/scoring/nq_official.py, `evaluate --metric nq`): the figures are the package's
own command line's on the same files, the predictions JSON is what its reader takes, bad input is one line."""

from __future__ import annotations

import json
import random
import subprocess
import sys

import pytest
from conftest import ROOT, real_nq, write_jsonl

pytest.importorskip("natural_questions")

from solution import evaluate  # noqa: E402
from solution.answers import nq_format  # noqa: E402
from solution.scoring import nq_official  # noqa: E402

# A 60-token document with six top-level candidates of 10 tokens each.
DOC = " ".join(f"w{i}" for i in range(60))
CANDIDATES = [{"start_token": s, "end_token": s + 10, "top_level": True} for s in range(0, 60, 10)]
SHORTS = [(s, s + 2) for s in range(1, 60, 5)]  # short spans, inside the candidates


def ann(long=None, shorts=(), yes_no="NONE"):
    """One simplified-NQ annotation; `long` is a candidate index."""
    la = ({"start_token": -1, "end_token": -1, "candidate_index": -1} if long is None else
          {**{k: CANDIDATES[long][k] for k in ("start_token", "end_token")}, "candidate_index": long})
    return {"long_answer": la, "yes_no_answer": yes_no,
            "short_answers": [{"start_token": s, "end_token": e} for s, e in shorts]}


def line(example_id, annotations) -> dict:
    return {"example_id": example_id, "question_text": "q?", "document_text": DOC,
            "long_answer_candidates": CANDIDATES, "annotations": annotations}


def random_annotation(rng: random.Random, agree: dict) -> dict:
    """An annotator who often agrees with the example's consensus `agree`, sometimes abstains or differs."""
    roll = rng.random()
    if roll < 0.3:
        return ann()
    if roll < 0.75:
        return ann(**agree)
    long = rng.randrange(len(CANDIDATES))
    kind = rng.random()
    if kind < 0.15:
        return ann(long, yes_no=rng.choice(["YES", "NO"]))
    shorts = rng.sample([s for s in SHORTS if CANDIDATES[long]["start_token"] <= s[0] < CANDIDATES[long]["end_token"]],
                        k=rng.choice([0, 1, 1, 2]))
    return ann(long, sorted(shorts))


def five_way_gold(path, num: int = 60, seed: int = 0, num_annotators: int = 5):
    rng = random.Random(seed)
    lines = []
    for i in range(num):
        long = rng.randrange(len(CANDIDATES))
        inside = [s for s in SHORTS if CANDIDATES[long]["start_token"] <= s[0] < CANDIDATES[long]["end_token"]]
        agree = rng.choice([{"long": long}, {"long": long, "shorts": [rng.choice(inside)]},
                            {"long": long, "yes_no": "YES"}, {}])
        eid = rng.randrange(-2 ** 63, 2 ** 63)
        lines.append(line(eid if i % 3 else str(eid), [random_annotation(rng, agree) for _ in range(num_annotators)]))
    return write_jsonl(path, lines)


def random_predictions(gold_path, path, seed: int = 1):
    """A predictions JSON of random answers and scores (ties included), through `prediction_entry`."""
    rng = random.Random(seed)
    entries = []
    for raw in gold_path.read_text().splitlines():
        obj = json.loads(raw)
        c = rng.choice(CANDIDATES + [None])
        long = f"{c['start_token']}:{c['end_token']}" if c else ""
        first = obj["annotations"][rng.randrange(len(obj["annotations"]))]  # often right
        copied = rng.random() < 0.5 and first["short_answers"]
        if copied:  # an annotator's answer, scored higher: the curve has a high-precision end
            long = f"{first['long_answer']['start_token']}:{first['long_answer']['end_token']}"
            s = first["short_answers"][0]
            short = f"{s['start_token']}:{s['end_token']}"
        else:
            short = rng.choice(["", "YES", "NO"] + [f"{s}:{e}" for s, e in SHORTS[:4]])
        scores = ([2.0, 3.25, 4.0], (0, 5)) if copied else ([-1.0, 0.5, 2.0], (-5, 1))  # ties included
        entries.append(nq_format.prediction_entry(obj["example_id"], long, short, rng.choice(scores[0]),
                                                    round(rng.uniform(*scores[1]), 1)))
    path.write_text(json.dumps({"predictions": entries}))
    return path


def package_cli(gold_jsonl, predictions, tmp_path, *flags) -> dict:
    """The package's own nq_eval, in its own process, on the original-format gold of the same file."""
    original = tmp_path / (gold_jsonl.stem + "-original.jsonl.gz")
    nq_official.write_original_gold(gold_jsonl, original)
    proc = subprocess.run([sys.executable, "-m", "natural_questions.nq_eval", f"--gold_path={original}",
                           f"--predictions_path={predictions}", "--num_threads=1", *flags],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_five_way_figures_equal_the_package_command_line(tmp_path, seed):
    gold = five_way_gold(tmp_path / "gold.jsonl", seed=seed)
    pred = random_predictions(gold, tmp_path / "pred.json", seed=seed + 10)
    theirs = package_cli(gold, pred, tmp_path)
    ours = nq_official.score_files(pred, gold)
    assert ours["non_null_threshold"] == 2 and ours["num_examples"] == 60
    assert set(theirs) <= set(ours)
    for key, value in theirs.items():
        assert ours[key] == pytest.approx(value, abs=1e-9), key
    assert 0 < ours["long-best-threshold-f1"] < 1 and 0 < ours["short-best-threshold-f1"] < 1  # not a trivial case
    assert ours["long-recall-at-precision>=0.5"] > 0 and ours["short-recall-at-precision>=0.5"] > 0
    assert abs(ours["long-best-threshold-f1"] - theirs["long-best-threshold-f1"]) <= 1e-9
    assert abs(ours["short-best-threshold-f1"] - theirs["short-best-threshold-f1"]) <= 1e-9


def test_one_annotation_gold_is_the_package_at_threshold_one(tmp_path):
    gold = five_way_gold(tmp_path / "gold.jsonl", seed=3, num_annotators=1)
    pred = random_predictions(gold, tmp_path / "pred.json", seed=4)
    theirs = package_cli(gold, pred, tmp_path, "--long_non_null_threshold=1", "--short_non_null_threshold=1")
    ours = nq_official.score_files(pred, gold)
    assert ours["non_null_threshold"] == 1 and "one annotation" in ours["gold_rule"]
    for key, value in theirs.items():
        assert ours[key] == pytest.approx(value, abs=1e-9), key
    assert ours["long-best-threshold-f1"] > 0


def test_the_rule_by_hand():
    """Two of five annotators make a gold answer; one does not. A prediction is right when it equals any one
    annotator's long span, or any one annotator's set of short spans."""
    gold = nq_official.NQGold({}, 2)
    from solution.data.nq import parse_example
    lines = [line(1, [ann(0, [(1, 3)]), ann(0, [(1, 3), (6, 8)]), ann(), ann(), ann()]),  # 2 say long 0
             line(2, [ann(1, [(11, 13)]), ann(), ann(), ann(), ann()])]  # only 1: no gold answer
    for i, obj in enumerate(lines, 1):
        ex = parse_example(json.dumps(obj), line=i, require_annotations=True)
        gold.labels[int(ex.example_id)] = nq_official.gold_labels(int(ex.example_id), ex.annotations)
    pred = nq_official.labels_of([nq_format.prediction_entry(1, "0:10", "1:3", 1.0, 1.0),
                                  nq_format.prediction_entry(2, "10:20", "11:13", 1.0, 1.0)])
    r = nq_official.score(pred, gold)
    # long: 1 right of 2 predicted, 1 gold -> P 0.5, R 1; short: the same (1:3 is annotator 0's whole set).
    assert (r["long-answer-precision"], r["long-answer-recall"]) == (0.5, 1.0)
    assert (r["short-answer-precision"], r["short-answer-recall"]) == (0.5, 1.0)
    pred = nq_official.labels_of([nq_format.prediction_entry(1, "0:10", "6:8", 1.0, 1.0),  # not a whole set
                                  nq_format.prediction_entry(2, "", "", 1.0, 1.0)])
    r = nq_official.score(pred, gold)
    assert r["long-answer-f1"] == 1.0 and r["short-answer-precision"] == 0.0


def test_evaluate_json_prints_the_package_names(tmp_path, capsys):
    gold = five_way_gold(tmp_path / "gold.jsonl")
    pred = random_predictions(gold, tmp_path / "pred.json")
    assert evaluate.main(["--metric", "nq", "--nq-predictions", str(pred), "--gold", str(gold), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    for key in ("long-best-threshold-f1", "short-best-threshold-f1", "long-recall-at-precision>=0.75",
                "short-recall-at-precision>=0.9", "long-answer-f1", "short-answer-recall"):
        assert key in out
    assert evaluate.main(["--metric", "nq", "--nq-predictions", str(pred), "--gold", str(gold)]) == 0
    text = capsys.readouterr().out
    assert "R@P=0.75" in text and "answers as written" in text


@pytest.mark.parametrize("content, field", [
    ("{not json", "not valid JSON"),
    ('{"preds": []}', "field 'predictions'"),
    ('{"predictions": [{"example_id": "5"}]}', "field 'predictions[0].example_id': expected an integer"),
    ('{"predictions": [{"example_id": 5, "long_answer": {"start_token": 1, "end_token": 3}, "long_answer_score": 1, '
     '"short_answers_score": 0}]}', "field 'predictions[0].long_answer.start_byte'"),
    ('{"predictions": [{"example_id": 5, "long_answer_score": 1}]}', "field 'predictions[0].short_answers_score'"),
    ('{"predictions": [{"example_id": 5, "long_answer": {"start_token": 4, "end_token": 4, "start_byte": -1, '
     '"end_byte": -1}, "long_answer_score": 1, "short_answers_score": 0}]}',
     "field 'predictions[0].long_answer': start_token 4, end_token 4: expected start < end"),
    ('{"predictions": [{"example_id": 5, "short_answers": [{"start_token": 1, "end_token": 3, "start_byte": -1, '
     '"end_byte": -1}], "yes_no_answer": "YES", "long_answer_score": 1, "short_answers_score": 0}]}',
     "field 'predictions[0].yes_no_answer': YES beside short answer spans"),
    ('{"predictions": [{"example_id": 5, "long_answer_score": 1, "short_answers_score": NaN}]}',
     "NaN is not a number"),  # refused by the JSON reader, before any field
    ('{"predictions": [{"example_id": 5, "long_answer_score": 1, "short_answers_score": 0}]}',
     "field 'predictions[].example_id': the ids must be the gold's"),
])
def test_bad_predictions_are_one_line_naming_file_and_field(tmp_path, capsys, content, field):
    gold = write_jsonl(tmp_path / "gold.jsonl", [line(7, [ann(0)] * 5)])
    pred = tmp_path / "pred.json"
    pred.write_text(content)
    code = evaluate.main(["--metric", "nq", "--nq-predictions", str(pred), "--gold", str(gold)])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and err.startswith(f"error: {pred}: "), err
    assert field in err, err


def test_missing_ids_are_named(tmp_path, capsys):
    gold = write_jsonl(tmp_path / "gold.jsonl", [line(7, [ann(0)] * 5), line(8, [ann(1)] * 5)])
    pred = tmp_path / "pred.json"
    pred.write_text(json.dumps({"predictions": [nq_format.prediction_entry(7, "0:10", "", 1.0, 0.0),
                                                nq_format.prediction_entry(9, "0:10", "", 1.0, 0.0)]}))
    assert evaluate.main(["--metric", "nq", "--nq-predictions", str(pred), "--gold", str(gold)]) == 2
    err = capsys.readouterr().err
    assert "1 missing (8), 1 not in the gold (9)" in err and err.count("\n") == 1


def test_a_gold_mixing_one_and_five_annotations_is_refused(tmp_path, capsys):
    gold = write_jsonl(tmp_path / "gold.jsonl", [line(7, [ann(0)] * 5), line(8, [ann(1)])])
    pred = tmp_path / "pred.json"
    pred.write_text(json.dumps({"predictions": []}))
    assert evaluate.main(["--metric", "nq", "--nq-predictions", str(pred), "--gold", str(gold)]) == 2
    assert "mixes examples with one annotation (line 2) and with 5 (line 1)" in capsys.readouterr().err


def scored_records(gold_path, seed: int = 0) -> list:
    """`--scores-out` lines of random raw answers (some right), as submission.predict writes them."""
    rng = random.Random(seed)
    records = []
    for raw in gold_path.read_text().splitlines():
        obj = json.loads(raw)
        a = obj["annotations"][rng.randrange(len(obj["annotations"]))]
        la = a["long_answer"]
        long = f"{la['start_token']}:{la['end_token']}" if la["start_token"] >= 0 else "0:10"
        kind = a["yes_no_answer"] if a["yes_no_answer"] != "NONE" else rng.choice(["SHORT", "SHORT", "LONG"])
        short = a["yes_no_answer"] if kind in ("YES", "NO") else (
            f"{a['short_answers'][0]['start_token']}:{a['short_answers'][0]['end_token']}"
            if kind == "SHORT" and a["short_answers"] else ("1:3" if kind == "SHORT" else ""))
        records.append({"example_id": str(obj["example_id"]), "raw_long": long, "raw_short": short, "answer_type": kind,
                        "score": rng.uniform(-3, 3), "short_score": rng.uniform(-3, 3),
                        "yes_score": rng.uniform(-3, 3), "no_score": rng.uniform(-3, 3)})
    return records


@pytest.mark.parametrize("separate", [False, True])
def test_tuning_finds_the_best_mean_f1_on_its_grid(tmp_path, separate):
    """The tuned thresholds' mean of the package's long and short F1 is the best of every threshold pair on a
    coarse grid (brute force through the package itself)."""
    from dataclasses import replace

    from solution.answers.postprocess import PostprocessConfig

    gold_path = five_way_gold(tmp_path / "gold.jsonl", num=40, seed=5)
    gold = nq_official.load_gold(gold_path)
    records = scored_records(gold_path)
    cfg = PostprocessConfig(separate_thresholds=separate)
    best = nq_official.tune(records, gold, cfg)
    assert best["objective"] == pytest.approx(best["result"]["mean_f1"])
    grid = [-3.5, -2, -1, 0, 1, 2, 3.5]
    for lt in grid:
        for st in grid:
            other = replace(cfg, long_threshold=lt, short_threshold=st, yes_threshold=st, no_threshold=st)
            assert nq_official.score_records(records, gold, other)["mean_f1"] <= best["objective"] + 1e-12


def test_tune_cli_writes_nq_thresholds(tmp_path, capsys):
    from helpers import write_model_dir

    gold_path = five_way_gold(tmp_path / "gold.jsonl", num=30, seed=6)
    scores = write_jsonl(tmp_path / "scores.jsonl", scored_records(gold_path))
    model = write_model_dir(tmp_path / "model")
    assert evaluate.main(["--tune", "--scores", str(scores), "--gold", str(gold_path), "--metric", "nq",
                          "--model", str(model), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    saved = json.loads((model / "qa_config.json").read_text())
    assert saved["tuned_thresholds"]["metric"] == "nq"
    assert saved["postprocess"]["long_threshold"] == out["long_threshold"]
    assert out["after"]["mean_f1"] >= out["before"]["mean_f1"]


def test_real_dev_lines_first_annotator_against_the_package(tmp_path):
    """The real five-way dev lines: annotator 0's answers as predictions, ours and the package's command line."""
    dev = real_nq("simplified-nq-dev-sample.jsonl")
    entries = []
    for raw in dev.read_text().splitlines():
        obj = json.loads(raw)
        a = obj["annotations"][0]
        la = a["long_answer"]
        long = f"{la['start_token']}:{la['end_token']}" if la["start_token"] >= 0 else ""
        short = a["yes_no_answer"] if a["yes_no_answer"] != "NONE" else (
            f"{a['short_answers'][0]['start_token']}:{a['short_answers'][0]['end_token']}" if a["short_answers"] else "")
        entries.append(nq_format.prediction_entry(obj["example_id"], long, short, 1.0, 1.0))
    pred = tmp_path / "pred.json"
    pred.write_text(json.dumps({"predictions": entries}))
    theirs = package_cli(dev, pred, tmp_path)
    ours = nq_official.score_files(pred, dev)
    for key, value in theirs.items():
        assert ours[key] == pytest.approx(value, abs=1e-9), key


# -- submission.predict --nq-predictions: the CSV's answers in NQ's format ----------------------------------


def predict_both(model_dir, data, out_dir, *extra):
    """submission.predict writing the CSV, the scores and the NQ JSON; (csv rows, scores, NQ entries by id)."""
    from solution.scoring.metric import read_submission
    from submission import predict

    csv, scores, nq = out_dir / "sub.csv", out_dir / "scores.jsonl", out_dir / "nq.json"
    code = predict.main(["--model", str(model_dir), "--input", str(data), "--output", str(csv), "--scores-out",
                         str(scores), "--nq-predictions", str(nq), "--quiet", *extra])
    assert code == 0
    entries = json.loads(nq.read_text())["predictions"]
    return read_submission(csv), [json.loads(x) for x in scores.read_text().splitlines()], \
        {e["example_id"]: e for e in entries}, nq


def assert_same_answers(rows: dict, records: list, entries: dict, cfg):
    """Every NQ entry holds its document's two CSV rows and the scores the thresholds compare."""
    assert len(entries) == len(records) == len(rows) // 2
    for r in records:
        e = entries[int(r["example_id"])]
        la, shorts = e["long_answer"], e["short_answers"]
        long = f"{la['start_token']}:{la['end_token']}" if la["start_token"] >= 0 else ""
        short = e["yes_no_answer"] if e["yes_no_answer"] != "NONE" else (
            f"{shorts[0]['start_token']}:{shorts[0]['end_token']}" if shorts else "")
        assert (long, short) == (rows[f"{r['example_id']}_long"], rows[f"{r['example_id']}_short"])
        assert la["start_byte"] == la["end_byte"] == -1 and all(s["start_byte"] == -1 for s in shorts)
        assert (e["long_answer_score"], e["short_answers_score"]) == nq_format.row_scores(r, cfg)


def test_predict_writes_the_csv_answers_in_nq_format(model_dir, tmp_path, capsys):
    from conftest import nq_line

    from solution.answers.postprocess import PostprocessConfig

    # Thresholds below every score: the tiny random model's answers are written, not blanked.
    sets = ["--set", "long_threshold=-1000", "--set", "short_threshold=-1000"]
    gold = write_jsonl(tmp_path / "gold.jsonl", [nq_line(example_id=str(-5 - i), long=0, shorts=[(12, 14)])
                                                 for i in range(4)])
    rows, records, entries, nq = predict_both(model_dir, gold, tmp_path, *sets)
    assert_same_answers(rows, records, entries, PostprocessConfig())
    assert any(rows.values())
    theirs = package_cli(gold, nq, tmp_path, "--long_non_null_threshold=1", "--short_non_null_threshold=1")
    ours = nq_official.score_files(nq, gold)
    for key, value in theirs.items():
        assert ours[key] == pytest.approx(value, abs=1e-9), key
    capsys.readouterr()


def test_predict_refuses_nq_predictions_over_its_input(model_dir, tmp_path, capsys):
    from conftest import nq_line

    from submission import predict

    data = write_jsonl(tmp_path / "test.jsonl", [nq_line(example_id="1", annotations=False)])
    text = data.read_text()
    code = predict.main(["--model", str(model_dir), "--input", str(data), "--output", str(tmp_path / "a.csv"),
                         "--nq-predictions", str(data), "--quiet"])
    err = capsys.readouterr().err
    assert code == 2 and err.startswith(f"error: --nq-predictions {data} is the same file as --input") and \
        err.count("\n") == 1, err
    assert data.read_text() == text and not (tmp_path / "a.csv").exists()


def test_real_dev_lines_predict_and_score_with_the_package(model_dir, tmp_path, capsys):
    """The pipeline on real NQ: predict the ten five-way dev lines with --nq-predictions, then our evaluate
    --metric nq and the package's own nq_eval on the same files agree."""
    from solution.answers.postprocess import PostprocessConfig

    dev = real_nq("simplified-nq-dev-sample.jsonl")
    rows, records, entries, nq = predict_both(model_dir, dev, tmp_path, "--set", "long_threshold=-1000")
    assert_same_answers(rows, records, entries, PostprocessConfig())
    theirs = package_cli(dev, nq, tmp_path)
    capsys.readouterr()  # predict's own lines
    assert evaluate.main(["--metric", "nq", "--nq-predictions", str(nq), "--gold", str(dev), "--json"]) == 0
    ours = json.loads(capsys.readouterr().out)
    assert ours["num_examples"] == 10 and ours["non_null_threshold"] == 2
    for key, value in theirs.items():
        assert ours[key] == pytest.approx(value, abs=1e-9), key


def test_the_worked_example_of_docs_submission(tmp_path):
    """docs/submission.md's example, three documents scored by the three metrics: Kaggle 1.0 (every
    annotator, each short span alone), MLE-bench 5/6 (the first annotator, right blanks count), NQ long
    F1 2/3 and short F1 0 (2 of 5 annotators make a gold answer, a short answer is a whole set)."""
    from solution.scoring import metric, mlebench

    doc = " ".join(f"w{i}" for i in range(100))
    cands = [{"start_token": 10, "end_token": 30, "top_level": True}, {"start_token": 40, "end_token": 90, "top_level": True}]

    def a(long=None, shorts=(), yes_no="NONE"):
        la = {"start_token": -1, "end_token": -1, "candidate_index": -1} if long is None else \
            {"start_token": long[0], "end_token": long[1], "candidate_index": int(long[0] == 40)}
        return {"long_answer": la, "yes_no_answer": yes_no,
                "short_answers": [{"start_token": s, "end_token": e} for s, e in shorts]}

    anns = {11: [a((40, 90), [(45, 47)]), a((40, 90), [(45, 47), (50, 52)]), a((40, 90)), a(), a()],
            22: [a((10, 30), yes_no="YES"), a(), a(), a(), a()], 33: [a()] * 5}
    gold = write_jsonl(tmp_path / "gold.jsonl", [{"example_id": k, "question_text": "q", "document_text": doc,
                                                  "long_answer_candidates": cands, "annotations": v}
                                                 for k, v in anns.items()])
    rows = {"11_long": "40:90", "11_short": "50:52", "22_long": "10:30", "22_short": "YES", "33_long": "", "33_short": ""}
    kaggle = metric.score(rows, metric.load_gold(gold))
    assert (kaggle["micro_f1"], kaggle["tp"], kaggle["fp"], kaggle["fn"]) == (1.0, 4, 0, 0)
    assert mlebench.score_predictions(rows, mlebench.read_answers(gold))["score"] == pytest.approx(5 / 6)
    nq = nq_official.score(nq_official.rows_labels(rows), nq_official.load_gold(gold))
    assert (nq["long-answer-precision"], nq["long-answer-recall"], nq["short-answer-f1"]) == (0.5, 1.0, 0)
    assert nq["long-answer-f1"] == pytest.approx(2 / 3)
