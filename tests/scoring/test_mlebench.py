"""MLE-bench's grader (solution/scoring/mlebench.py, evaluate --metric mlebench) against MLE-bench's own code.

`reference_grade` below is grade.py from github.com/openai/mle-bench
(mlebench/competitions/tensorflow2-question-answering/grade.py), transcribed line for line with
only its import of InvalidSubmissionError replaced and a row's valid answers in a function of their own
(`reference_valid_answers`, so each function reads at once); it calls scikit-learn's f1_score as there.
The submission is read as MLE-bench's `utils.read_csv` reads it (pandas, round-trip floats), the
gold as its `read_jsonl` does, with each example_id made a string as its prepare.py writes it.
"""

from __future__ import annotations

import json
import random
import subprocess
import sys
import warnings

import pandas as pd
import pytest
from conftest import ROOT, nq_line, write_jsonl
from sklearn.metrics import f1_score

from solution.scoring import mlebench
from solution.scoring.metric import SubmissionError


class InvalidSubmissionError(Exception):
    pass


def reference_valid_answers(sample_id: str, true_annotations: dict) -> list:  # grade.py's lines, verbatim
    if sample_id.endswith("_long"):
        sample_id = sample_id.split("_long")[0]
        annotation = true_annotations[sample_id]
        valid_answers = []
        if annotation["long_answer"]["start_token"] != -1:
            valid_answers.append(
                (
                    int(annotation["long_answer"]["start_token"]),
                    int(annotation["long_answer"]["end_token"]),
                ),
            )
    elif sample_id.endswith("_short"):
        sample_id = sample_id.split("_short")[0]
        annotation = true_annotations[sample_id]
        valid_answers = [
            (int(short_answer["start_token"]), int(short_answer["end_token"]))
            for short_answer in annotation["short_answers"]
        ]
        if annotation["yes_no_answer"] != "NONE":
            valid_answers.append(annotation["yes_no_answer"])
    else:
        raise InvalidSubmissionError(
            f"sample_id {sample_id} does not end with '_long' or '_short'"
        )
    return valid_answers


def prepare_for_metric(submission: pd.DataFrame, answers: dict):  # grade.py, verbatim but the docstring
    if len(submission) != 2 * len(answers):
        raise InvalidSubmissionError(
            f"Submission length {len(submission)} != 2 * answers length {len(answers)}"
        )
    submission.fillna("", inplace=True)
    submission = submission.astype(str)

    expected_ids = []
    for sample in answers:
        expected_ids.append(f"{sample['example_id']}_long")
        expected_ids.append(f"{sample['example_id']}_short")

    if not ({"example_id", "PredictionString"}).issubset(submission.columns):
        raise InvalidSubmissionError(
            "Submission requires 'example_id' and 'PredictionString' columns."
        )
    if not set(submission["example_id"]) == set(expected_ids):
        raise InvalidSubmissionError(
            "Submission example_ids do not match expected_ids. Please ensure you have a "
            "long and short answer for each example_id in the answers."
        )
    if not len(set(submission["example_id"])) == len(submission):
        raise InvalidSubmissionError(
            "Submission example_ids are not unique. Please ensure you have a "
            "long and short answer for each example_id in the answers."
        )

    y_pred = [1 if row["PredictionString"].strip() else 0 for _, row in submission.iterrows()]

    y_true = []
    true_annotations = {sample["example_id"]: sample["annotations"][0] for sample in answers}
    for idx, row in submission.iterrows():
        sample_id = row["example_id"]

        pred = row["PredictionString"].strip()
        if ":" in pred and len(pred.split(":")) == 2:
            start_token, end_token = pred.split(":")
            pred = (int(start_token), int(end_token))
        elif pred in ["YES", "NO", ""]:
            pass
        else:
            raise InvalidSubmissionError(f"Invalid submission format: {pred}")

        valid_answers = reference_valid_answers(sample_id, true_annotations)

        if pred:
            if pred in valid_answers:
                y_true.append(1)
            else:
                y_true.append(0)
        else:
            if valid_answers:
                y_true.append(1)
            else:
                y_true.append(0)

    assert len(y_true) == len(y_pred), f"y_true {len(y_true)} != y_pred {len(y_pred)}"
    return y_true, y_pred


def reference_grade(submission_path, gold_path) -> float:
    """MLE-bench: read_csv(round-trip floats), read_jsonl, grade (ids as prepare.py writes them)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # pandas 3 deprecates float_precision; MLE-bench still passes it
        submission = pd.read_csv(submission_path, float_precision="round_trip")
    answers = [json.loads(line) for line in open(gold_path)]
    for a in answers:
        a["example_id"] = str(a["example_id"])
    y_true, y_pred = prepare_for_metric(submission, answers)
    return f1_score(y_true=y_true, y_pred=y_pred, average="micro")


# ---------------------------------------------------------------------------
# Generated gold and submissions


DOC = " ".join(f"w{i}" for i in range(60))
CANDS = [{"start_token": s, "end_token": s + 10, "top_level": True} for s in range(0, 60, 10)]


def random_gold(rng: random.Random, n: int) -> list:
    """Train-format lines (one annotation each) of every answer kind, ids as JSON integers."""
    out = []
    for i in range(n):
        kind = rng.choice(["none", "long", "short", "shorts", "yes", "no"])
        long = None if kind == "none" else rng.randrange(6)
        shorts = []
        if kind in ("short", "shorts"):
            s = 10 * long + rng.randrange(5)
            shorts = [(s, s + 2)] + ([(s + 3, s + 5)] if kind == "shorts" else [])
        yes_no = {"yes": "YES", "no": "NO"}.get(kind, "NONE")
        out.append(nq_line(example_id=rng.randrange(-2**63, 2**63), document=DOC, candidates=CANDS, long=long,
                           shorts=shorts, yes_no=yes_no))
    return out


def random_prediction(rng: random.Random, obj: dict, kind: str) -> str:
    """Right, wrong, blank, YES/NO, odd spacing and NA spellings that pandas reads as blank."""
    ann = obj["annotations"][0]
    right = []
    if kind == "long" and ann["long_answer"]["start_token"] != -1:
        right = [f"{ann['long_answer']['start_token']}:{ann['long_answer']['end_token']}"]
    if kind == "short":
        right = [f"{s['start_token']}:{s['end_token']}" for s in ann["short_answers"]]
        right += [ann["yes_no_answer"]] if ann["yes_no_answer"] != "NONE" else []
    choices = ["", "", "NA", "nan", "YES", "NO", f"{rng.randrange(60)}:{rng.randrange(60)}", " 3 : 5 ", "+10:20"]
    return rng.choice(right * 4 + choices) if right else rng.choice(choices)


def write_submission(path, rows) -> None:
    pd.DataFrame(rows, columns=["example_id", "PredictionString"]).to_csv(path, index=False)


def rows_for(gold: list, rng: random.Random) -> list:
    rows = [(f"{o['example_id']}_{k}", random_prediction(rng, o, k)) for o in gold for k in ("long", "short")]
    rng.shuffle(rows)  # MLE-bench does not need the gold's order
    return rows


def evaluate_json(submission, gold, *extra):
    return subprocess.run([sys.executable, "-m", "solution.evaluate", "--submission", str(submission),
                           "--gold", str(gold), "--metric", "mlebench", "--json", *extra],
                          cwd=ROOT, capture_output=True, text=True)


# ---------------------------------------------------------------------------
# The score


@pytest.mark.parametrize("seed", range(6))
def test_score_equals_mlebench_grade_on_random_submissions(tmp_path, seed):
    rng = random.Random(seed)
    gold = random_gold(rng, rng.randrange(5, 60))
    gold_path = write_jsonl(tmp_path / "gold.jsonl", gold)
    sub = tmp_path / "submission.csv"
    write_submission(sub, rows_for(gold, rng))
    ours = mlebench.score_files(sub, gold_path)
    assert ours["score"] == pytest.approx(reference_grade(sub, gold_path), abs=1e-9, rel=0)
    assert ours["score"] == reference_grade(sub, gold_path)  # the same arithmetic: the same bits
    assert ours["correct"] == ours["tp"] + ours["tn"]


def test_the_cli_prints_the_score_as_json(tmp_path):
    rng = random.Random(7)
    gold = random_gold(rng, 30)
    gold_path = write_jsonl(tmp_path / "gold.jsonl", gold)
    sub = tmp_path / "submission.csv"
    write_submission(sub, rows_for(gold, rng))
    proc = evaluate_json(sub, gold_path)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["score"] == reference_grade(sub, gold_path)
    assert out["score_rounded"] == round(out["score"], 5) and out["metric"] == "mlebench"


def test_a_right_blank_counts_and_only_the_first_annotation_is_gold(tmp_path):
    # Kaggle's F1 of this submission is 0 (no TP); MLE-bench's is 3/4: three right blanks. The second
    # annotation's long answer 10:20 would be right under Kaggle's rule, not here.
    gold = [nq_line(example_id=5, document=DOC, candidates=CANDS, long=None),
            nq_line(example_id=6, document=DOC, candidates=CANDS, long=None)]
    gold[0]["annotations"].append({**gold[0]["annotations"][0],
                                   "long_answer": {"start_token": 10, "end_token": 20, "candidate_index": 1}})
    gold_path = write_jsonl(tmp_path / "gold.jsonl", gold)
    sub = tmp_path / "s.csv"
    write_submission(sub, [("5_long", "10:20"), ("5_short", ""), ("6_long", ""), ("6_short", "")])
    assert mlebench.score_files(sub, gold_path)["score"] == 0.75 == reference_grade(sub, gold_path)


def test_an_all_blank_submission_scores_the_share_of_unanswerable_rows(tmp_path):
    # pandas reads a column blank throughout as float; grade.py's fillna("") then fails under pandas 3
    # (pandas 2 made the cells blank). Scored as blanks here; the labels' f1_score says what that gives.
    rng = random.Random(3)
    gold = random_gold(rng, 40)
    gold_path = write_jsonl(tmp_path / "gold.jsonl", gold)
    sub = tmp_path / "s.csv"
    write_submission(sub, [(f"{o['example_id']}_{k}", "") for o in gold for k in ("long", "short")])
    answers = mlebench.read_answers(gold_path)
    y_true = [int(bool(a["annotation"]["long"])) for a in answers]
    y_true += [int(bool(a["annotation"]["short"]) or a["annotation"]["yes_no"] != "NONE") for a in answers]
    expected = f1_score(y_true, [0] * len(y_true), average="micro")
    assert mlebench.score_files(sub, gold_path)["score"] == expected


# ---------------------------------------------------------------------------
# Refusals: each where grade.py refuses, and named


def _refusal_cases(gold: list) -> dict:
    ids = [f"{o['example_id']}_{k}" for o in gold for k in ("long", "short")]
    # Non-blank short rows: a column blank throughout fails grade.py's fillna under pandas 3, not the check tried.
    good = [(i, "YES" if i.endswith("_short") else "") for i in ids]
    return {
        "a row short": (good[:-1], "rows; MLE-bench wants 2 per gold example"),
        "a row too many": (good + [("1_long", "")], "rows; MLE-bench wants 2 per gold example"),
        "an id not in the gold": ([("999_long", "")] + good[1:], "not in the gold"),
        "an id twice": ([good[1]] + good[1:], "row ids are not the gold's"),
        "two integers wanted": ([(ids[0], "a:b")] + good[1:], "two integers"),
        "three fields": ([(ids[0], "1:2:3")] + good[1:], "not blank, start:end, YES or NO"),
        "a word": ([(ids[1], "MAYBE")] + [good[0]] + good[2:], "not blank, start:end, YES or NO"),
    }


@pytest.mark.parametrize("case", list(_refusal_cases(random_gold(random.Random(0), 3))))
def test_refuses_what_mlebench_refuses(tmp_path, case):
    gold = random_gold(random.Random(0), 3)
    gold_path = write_jsonl(tmp_path / "gold.jsonl", gold)
    rows, message = _refusal_cases(gold)[case]
    sub = tmp_path / "s.csv"
    write_submission(sub, rows)
    with pytest.raises((InvalidSubmissionError, ValueError)):  # ValueError: grade.py's int("a")
        reference_grade(sub, gold_path)
    with pytest.raises(SubmissionError, match=message):
        mlebench.score_files(sub, gold_path)
    proc = evaluate_json(sub, gold_path)
    assert proc.returncode == 2 and "error:" in proc.stderr and message.split(";")[0] in proc.stderr


def test_refuses_a_file_without_the_columns(tmp_path):
    gold = random_gold(random.Random(1), 2)
    gold_path = write_jsonl(tmp_path / "gold.jsonl", gold)
    sub = tmp_path / "s.csv"
    pd.DataFrame({"id": [f"{o['example_id']}_{k}" for o in gold for k in ("long", "short")],
                  "PredictionString": ["", "YES"] * 2}).to_csv(sub, index=False)
    with pytest.raises(InvalidSubmissionError):
        reference_grade(sub, gold_path)
    with pytest.raises(SubmissionError, match="needs the columns example_id, PredictionString"):
        mlebench.score_files(sub, gold_path)


def test_a_gold_repeating_an_id_refuses_every_submission(tmp_path):
    gold = random_gold(random.Random(2), 2)
    gold_path = write_jsonl(tmp_path / "gold.jsonl", gold + [gold[0]])
    sub = tmp_path / "s.csv"
    ids = [f"{o['example_id']}_{k}" for o in gold + [gold[0]] for k in ("long", "short")]
    write_submission(sub, [(i, "NO") for i in ids])
    with pytest.raises(InvalidSubmissionError, match="not unique"):
        reference_grade(sub, gold_path)
    with pytest.raises(SubmissionError, match="the gold repeats example_id"):
        mlebench.score_files(sub, gold_path)


def test_score_predictions_is_the_file_score(tmp_path):
    rng = random.Random(11)
    gold = random_gold(rng, 25)
    gold_path = write_jsonl(tmp_path / "gold.jsonl", gold)
    rows = [(i, p.replace("NA", "").replace("nan", "")) for i, p in rows_for(gold, rng)]
    sub = tmp_path / "s.csv"
    write_submission(sub, rows)
    answers = mlebench.read_answers(gold_path)
    assert mlebench.score_predictions(dict(rows), answers) == mlebench.score_files(sub, gold_path)


def test_a_bad_gold_line_is_named(tmp_path):
    gold = random_gold(random.Random(4), 2)
    del gold[1]["annotations"]
    gold_path = write_jsonl(tmp_path / "gold.jsonl", gold)
    with pytest.raises(ValueError, match=r"gold.jsonl:2: field 'annotations'"):
        mlebench.read_answers(gold_path)


# ---------------------------------------------------------------------------
# The split: prepare.py's procedure, run as MLE-bench runs it


def reference_split(path) -> tuple:
    """(train ids, test ids, test rows) in prepare.py's order: its loop over pandas' 1,000-line chunks
    and scikit-learn's train_test_split, transcribed from prepare.py (file writes left out)."""
    from sklearn.model_selection import train_test_split

    train_ids, test_ids, test_rows = [], [], []
    for df in pd.read_json(path, orient="records", lines=True, chunksize=1_000):
        df["example_id"] = df["example_id"].astype(str)
        new_train, new_test = train_test_split(df, test_size=0.1, random_state=0)
        train_ids.extend(new_train["example_id"].tolist())
        test_ids.extend(new_test["example_id"].tolist())
        test_rows.extend(new_test.to_dict("records"))
    return train_ids, test_ids, test_rows


def run_split(*args):
    return subprocess.run([sys.executable, "-m", "solution.split", *map(str, args), "--quiet"],
                          cwd=ROOT, capture_output=True, text=True)


def test_split_chunk_is_train_test_split():
    from sklearn.model_selection import train_test_split

    for n in list(range(2, 60)) + [373, 999, 1000]:
        train, test = train_test_split(list(range(n)), test_size=0.1, random_state=0)
        assert mlebench.split_chunk(n) == (test, train), n


def test_split_like_mlebench_matches_prepare_py_document_for_document(tmp_path):
    rng = random.Random(5)
    lines = random_gold(rng, 2_345)  # three chunks, the last of 345 lines
    src = write_jsonl(tmp_path / "simplified-nq-train.jsonl", lines)
    proc = run_split("--input", src, "--out", tmp_path / "mle", "--like", "mlebench", "--json")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["test"] == 100 + 100 + 35
    train_ids, test_ids, test_rows = reference_split(src)
    read = lambda name: [json.loads(x) for x in (tmp_path / "mle" / name).read_text().splitlines()]  # noqa: E731
    assert [str(o["example_id"]) for o in read("simplified-nq-test-gold.jsonl")] == test_ids
    assert [str(o["example_id"]) for o in read("simplified-nq-train.jsonl")] == train_ids
    by_id = {str(o["example_id"]): o for o in lines}
    assert read("simplified-nq-test-gold.jsonl") == [by_id[i] for i in test_ids]  # the lines themselves
    unlabelled = read("simplified-nq-test.jsonl")
    assert unlabelled == [{k: r[k] for k in ("example_id", "question_text", "document_text",
                                             "long_answer_candidates")} for r in test_rows]


def test_split_like_mlebench_refuses_what_prepare_py_cannot_split(tmp_path):
    # 1,001 lines: the last chunk is one line, whose train part train_test_split refuses to leave empty.
    src = write_jsonl(tmp_path / "t.jsonl", random_gold(random.Random(6), 1_001))
    from sklearn.model_selection import train_test_split

    with pytest.raises(ValueError, match="train set will be empty"):
        train_test_split([0], test_size=0.1, random_state=0)
    proc = run_split("--input", src, "--out", tmp_path / "o", "--like", "mlebench")
    assert proc.returncode == 2 and "a chunk of 1 line(s)" in proc.stderr
    proc = run_split("--input", src, "--out", tmp_path / "o", "--like", "mlebench", "--seed", "3")
    assert proc.returncode == 2 and "drop --seed" in proc.stderr


def test_split_like_mlebench_keeps_a_repeated_id_in_train_and_test_and_says_so(tmp_path, capsys):
    from solution import split

    test, train = mlebench.split_chunk(40)
    ids = [str(100 + i) for i in range(40)]
    ids[train[0]] = ids[test[0]]  # one id on two lines: one drawn for test, the other for train
    src = write_jsonl(tmp_path / "t.jsonl", [nq_line(example_id=i, long=0) for i in ids])
    split.main(["--input", str(src), "--out", str(tmp_path / "o"), "--like", "mlebench", "--quiet"])
    err = capsys.readouterr().err
    assert (f"warning: {src}: 1 example_ids appear on more than one line, kept as MLE-bench's prepare.py keeps them: "
            f"1 in both train and test ({ids[test[0]]}), 0 twice in test") in err, err
    read = lambda name: [json.loads(x)["example_id"] for x in (tmp_path / "o" / name).read_text().splitlines()]  # noqa: E731
    assert ids[test[0]] in read("simplified-nq-train.jsonl") and ids[test[0]] in read("simplified-nq-test.jsonl")
