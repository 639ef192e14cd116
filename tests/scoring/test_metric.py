"""The competition metric (solution/scoring/metric.py) and its CLI (solution/evaluate.py).

Every expected TP/FP/FN below is counted by hand in the comments. Rule per row:
non-blank & valid -> TP; non-blank & not valid (or nothing valid) -> FP;
blank & something valid -> FN; blank & nothing valid -> nothing.
"""

from __future__ import annotations

import gzip
import json
import subprocess
import sys

import pytest
from conftest import ROOT

from solution.scoring.intervals import polarity_gap
from solution.scoring.metric import (
    Gold,
    SubmissionError,
    format_report,
    load_gold,
    read_submission,
    score,
    yes_no_polarity,
)

REPO = ROOT
DEV_SAMPLE = REPO / ".." / "shared" / "data" / "nq-real" / "simplified-nq-dev-sample.jsonl"

# A 50-token document with five top-level candidates of 10 tokens each.
DOC = " ".join(f"w{i}" for i in range(50))
CANDIDATES = [{"start_token": s, "end_token": s + 10, "top_level": True} for s in range(0, 50, 10)]


def ann(long=None, shorts=(), yes_no="NONE"):
    """One annotation; `long` is a candidate's (start, end)."""
    if long is None:
        la = {"start_token": -1, "end_token": -1, "candidate_index": -1}
    else:
        la = {"start_token": long[0], "end_token": long[1], "candidate_index": long[0] // 10}
    return {"long_answer": la, "yes_no_answer": yes_no,
            "short_answers": [{"start_token": s, "end_token": e} for s, e in shorts]}


def line(example_id, annotations):
    return json.dumps({"example_id": example_id, "question_text": "q?", "document_text": DOC,
                       "long_answer_candidates": CANDIDATES, "annotations": annotations})


# The gold file of most tests. Valid answers per example:
GOLD_LINES = [
    # 111: long {0:10}, short {2:4}
    line(111, [ann((0, 10), [(2, 4)])]),
    # -222 (negative id, five annotators): long {10:20, 20:30},
    #   short {12:13, 15:17, 22:24} -- ann 2's two spans separately, never merged into 12:17
    line(-222, [ann(), ann((10, 20), [(12, 13), (15, 17)]), ann((20, 30), [(22, 24)]), ann(), ann()]),
    # 333: nothing valid (five abstentions)
    line(333, [ann()] * 5),
    # "-9223372036854775808" (min int64, given as a JSON string): long {30:40}, short {YES}
    line("-9223372036854775808", [ann((30, 40), yes_no="YES"), ann()]),
    # 444: long {40:50}, short {} (long answer only)
    line(444, [ann((40, 50))]),
]


@pytest.fixture
def gold_path(tmp_path):
    p = tmp_path / "gold.jsonl"
    p.write_text("\n".join(GOLD_LINES) + "\n")
    return p


@pytest.fixture
def gold(gold_path):
    return load_gold(gold_path)


def write_csv(path, rows, header="example_id,PredictionString"):
    path.write_text("\n".join([header] + [f"{rid},{pred}" for rid, pred in rows]) + "\n")
    return path


def blank_submission(gold):
    return {f"{eid}_{kind}": "" for eid in gold for kind in ("long", "short")}


def counts(result):
    return (result["tp"], result["fp"], result["fn"])


# ---------------------------------------------------------------------------
# Gold


def test_load_gold_builds_answer_sets(gold):
    assert list(gold) == ["111", "-222", "333", "-9223372036854775808", "444"]  # text, file order
    assert gold["111"] == Gold(frozenset({"0:10"}), frozenset({"2:4"}))
    assert gold["-222"] == Gold(frozenset({"10:20", "20:30"}), frozenset({"12:13", "15:17", "22:24"}))
    assert gold["333"] == Gold(frozenset(), frozenset())
    assert gold["-9223372036854775808"] == Gold(frozenset({"30:40"}), frozenset({"YES"}))
    assert gold["444"] == Gold(frozenset({"40:50"}), frozenset())


def test_load_gold_from_gzip(tmp_path, gold):
    p = tmp_path / "gold.jsonl.gz"
    with gzip.open(p, "wt", encoding="utf-8") as f:
        f.write("\n".join(GOLD_LINES) + "\n")
    assert load_gold(p) == gold


def test_load_gold_needs_annotations(tmp_path):
    p = tmp_path / "test.jsonl"
    p.write_text(json.dumps({"example_id": 1, "question_text": "q?", "document_text": DOC,
                             "long_answer_candidates": CANDIDATES}) + "\n")
    with pytest.raises(ValueError, match=r"test\.jsonl:1: field 'annotations'"):
        load_gold(p)


# ---------------------------------------------------------------------------
# Scoring, one rule at a time (the other rows of the gold are blank)


def test_exact_match_is_tp(gold):
    pred = blank_submission(gold) | {"111_long": "0:10", "111_short": "2:4"}
    r = score(pred, gold)
    # long: 111 TP; blanks with gold: -222 FN, -9223.. FN, 444 FN        -> 1, 0, 3
    # short: 111 TP; blanks with gold: -222 FN, -9223.. (YES) FN         -> 1, 0, 2
    assert counts(r["long"]) == (1, 0, 3)
    assert counts(r["short"]) == (1, 0, 2)
    assert counts(r) == (2, 0, 5)
    assert r["micro_f1"] == pytest.approx(4 / 9)  # 2*2 / (2*2 + 0 + 5)
    assert r["precision"] == 1.0 and r["recall"] == pytest.approx(2 / 7)
    assert r["num_examples"] == 5


def test_single_example_cases():
    g = {"1": Gold(frozenset({"0:10"}), frozenset({"2:4"})), "2": Gold(frozenset(), frozenset())}
    # exact: long TP, short TP; example 2 blank with nothing valid -> nothing
    r = score({"1_long": "0:10", "1_short": "2:4", "2_long": "", "2_short": ""}, g)
    assert counts(r) == (2, 0, 0) and r["micro_f1"] == 1.0
    # wrong span: long 0:11 FP (not also FN); short 2:4 TP -> (1, 1, 0): F1 = 2/(2+1)
    r = score({"1_long": "0:11", "1_short": "2:4", "2_long": "", "2_short": ""}, g)
    assert counts(r["long"]) == (0, 1, 0) and counts(r) == (1, 1, 0)
    assert r["micro_f1"] == pytest.approx(2 / 3) and r["precision"] == 0.5 and r["recall"] == 1.0
    # a prediction where no gold exists: example 2 long 0:10 FP, short 3:4 FP; example 1 blank: 2 FN
    r = score({"1_long": "", "1_short": "", "2_long": "0:10", "2_short": "3:4"}, g)
    assert counts(r) == (0, 2, 2) and r["micro_f1"] == 0.0
    # all blank: example 1 two FN, example 2 nothing
    r = score({"1_long": "", "1_short": "", "2_long": "", "2_short": ""}, g)
    assert counts(r) == (0, 0, 2) and r["precision"] == 0.0 and r["recall"] == 0.0


def test_blank_with_no_gold_counts_nothing():
    g = {"5": Gold(frozenset(), frozenset())}
    r = score({"5_long": "", "5_short": ""}, g)
    # nothing counted anywhere; every ratio has a zero denominator -> 0.0
    assert counts(r) == counts(r["long"]) == counts(r["short"]) == (0, 0, 0)
    assert (r["micro_f1"], r["precision"], r["recall"]) == (0.0, 0.0, 0.0)


def test_multi_annotation_any_annotator_counts(gold):
    # -222: long gold {10:20 (annotator 2), 20:30 (annotator 3)}
    for long_pred in ("10:20", "20:30"):
        r = score(blank_submission(gold) | {"-222_long": long_pred}, gold)
        assert r["long"]["tp"] == 1 and r["long"]["fp"] == 0
    # annotator 3's short span 22:24 with annotator 2's long 10:20: each row judged alone -> 2 TP
    r = score(blank_submission(gold) | {"-222_long": "10:20", "-222_short": "22:24"}, gold)
    assert r["long"]["tp"] == 1 and r["short"]["tp"] == 1


def test_multi_span_short_answer(gold):
    # annotator 2 of -222 gave two short spans 12:13 and 15:17
    r = score(blank_submission(gold) | {"-222_short": "15:17"}, gold)
    # the second span alone is valid -> short TP; other short blanks: 111 FN, -9223.. FN
    assert counts(r["short"]) == (1, 0, 2)
    r = score(blank_submission(gold) | {"-222_short": "12:17"}, gold)
    # the merged first-start:last-end span is no annotator's span -> FP (and no FN for -222)
    assert counts(r["short"]) == (0, 1, 2)


def test_yes_no(gold):
    eid = "-9223372036854775808"  # short gold {YES}, long gold {30:40}
    base = blank_submission(gold)
    # YES -> TP; other shorts blank: 111 FN, -222 FN
    assert counts(score(base | {f"{eid}_short": "YES"}, gold)["short"]) == (1, 0, 2)
    # NO -> FP
    assert counts(score(base | {f"{eid}_short": "NO"}, gold)["short"]) == (0, 1, 2)
    # a span where gold is YES -> FP, even the long answer's span
    assert counts(score(base | {f"{eid}_short": "30:40"}, gold)["short"]) == (0, 1, 2)
    # YES in a long row matches no span -> long FP; other longs blank: 111, -222, 444 FN
    assert counts(score(base | {f"{eid}_long": "YES"}, gold)["long"]) == (0, 1, 3)
    # YES where the short gold is empty (444) -> FP
    assert counts(score(base | {"444_short": "YES"}, gold)["short"]) == (0, 1, 3)


POLARITY_LINES = [line(1, [ann((0, 10), yes_no="YES")]), line(2, [ann((0, 10), yes_no="YES")]),
                  line(3, [ann((0, 10), yes_no="YES")]), line(4, [ann((0, 10), yes_no="NO")]),
                  line(5, [ann((0, 10), yes_no="NO")]), line(6, [ann((0, 10), yes_no="YES"), ann((0, 10), yes_no="NO")]),
                  line(7, [ann((0, 10), [(2, 4)])])]


def test_yes_no_polarity_counts_what_is_said_on_each_kind_of_page(tmp_path):
    """Pages 1-3 YES, 4-5 NO, 6 both (counted in neither), 7 a span: NO said on one of two NO pages and on
    one of three YES pages."""
    path = tmp_path / "gold.jsonl"
    path.write_text("\n".join(POLARITY_LINES) + "\n")
    gold = load_gold(path)
    said = {"1": "YES", "2": "NO", "3": "", "4": "NO", "5": "YES", "6": "NO", "7": "NO"}
    predictions = blank_submission(gold) | {f"{eid}_short": p for eid, p in said.items()}
    p = yes_no_polarity(predictions, gold)
    assert p == {"yes_pages": 3, "no_pages": 2, "yes_on_yes": 1, "no_on_yes": 1, "yes_on_no": 1, "no_on_no": 1}
    gap = polarity_gap(p)
    assert gap["gap"] == pytest.approx(1 / 2 - 1 / 3) and gap["ci"][0] <= gap["gap"] <= gap["ci"][1]
    assert gap == polarity_gap(p)  # a fixed seed: the same interval each time
    # NO everywhere: no gap, and nothing to resample
    everywhere = polarity_gap(yes_no_polarity({k: "NO" for k in predictions}, gold))
    assert everywhere == {"gap": 0.0, "ci": [0.0, 0.0]}
    assert yes_no_polarity(predictions, {k: gold[k] for k in ("1", "2", "7")}) is None  # no NO page

    sub = write_csv(tmp_path / "sub.csv", list(predictions.items()))
    proc = run_cli("--submission", sub, "--gold", path)
    assert proc.returncode == 0, proc.stderr
    assert ("polarity: 2 NO pages (said NO on 1, YES on 1), 3 YES pages (said NO on 1, YES on 1): "
            "NO-share gap +0.167") in proc.stdout
    result = json.loads(run_cli("--submission", sub, "--gold", path, "--json").stdout)
    assert result["polarity"] == p | gap


def test_pooled_micro_f1(gold):
    pred = {
        "111_long": "0:10", "111_short": "2:5",         # long TP, short FP
        "-222_long": "20:30", "-222_short": "",        # long TP, short FN
        "333_long": "", "333_short": "",                # nothing, nothing
        "-9223372036854775808_long": "30:40",           # long TP
        "-9223372036854775808_short": "YES",            # short TP
        "444_long": "", "444_short": "41:42",           # long FN, short FP
    }
    r = score(pred, gold)
    assert counts(r["long"]) == (3, 0, 1)   # 111, -222, -9223.. TP; 444 FN
    assert counts(r["short"]) == (1, 2, 1)  # -9223.. TP; 111, 444 FP; -222 FN
    assert counts(r) == (4, 2, 2)
    assert r["micro_f1"] == pytest.approx(8 / 12)  # 2*4 / (8 + 2 + 2)
    assert r["precision"] == pytest.approx(4 / 6) and r["recall"] == pytest.approx(4 / 6)
    assert r["long"]["micro_f1"] == pytest.approx(6 / 7)  # 6 / (6 + 0 + 1)
    assert r["short"]["precision"] == pytest.approx(1 / 3) and r["short"]["recall"] == 0.5


def test_missing_and_extra_rows(gold):
    pred = blank_submission(gold)
    del pred["-222_short"]
    with pytest.raises(SubmissionError, match=r"1 missing row\(s\): -222_short"):
        score(pred, gold, source="sub.csv")
    pred = blank_submission(gold) | {"999_long": "", "999_short": "1:2"}
    with pytest.raises(SubmissionError, match=r"2 extra row\(s\).*999_long, 999_short") as e:
        score(pred, gold, source="sub.csv")
    assert str(e.value).startswith("sub.csv: ")


def test_many_missing_rows_lists_first_ten_and_count():
    g = {str(i): Gold(frozenset(), frozenset()) for i in range(15)}
    with pytest.raises(SubmissionError) as e:
        score({}, g)
    msg = str(e.value)
    assert "30 missing row(s): 0_long, 0_short, 1_long" in msg and "(20 more)" in msg
    assert "5_long" not in msg  # only the first ten are named


def test_score_rejects_malformed_prediction():
    g = {"1": Gold(frozenset(), frozenset())}
    with pytest.raises(SubmissionError, match="row 1_short: malformed PredictionString 'maybe'"):
        score({"1_long": "", "1_short": "maybe"}, g)


# ---------------------------------------------------------------------------
# Reading the CSV


def test_read_submission_negative_ids_and_whitespace(tmp_path, gold):
    p = tmp_path / "sub.csv"
    p.write_text("example_id,PredictionString\n"
                 "111_long, 0:10 \n"
                 "111_short,\"\t2:4  \"\n"
                 "-222_long,  \n"
                 "-222_short,15:17\n"
                 "\n"  # a blank line is no row
                 "333_long,\n333_short,\n"
                 "-9223372036854775808_long,030:40\n"  # leading zero -> 30:40
                 "-9223372036854775808_short, YES\n"
                 "444_long,40:50\n444_short,\n")
    pred = read_submission(p)
    assert pred["111_long"] == "0:10" and pred["111_short"] == "2:4" and pred["-222_long"] == ""
    assert pred["-9223372036854775808_long"] == "30:40" and pred["-9223372036854775808_short"] == "YES"
    r = score(pred, gold)
    # long: 111, -9223.., 444 TP; -222 blank FN.  short: 111, -222, -9223.. TP
    assert counts(r["long"]) == (3, 0, 1) and counts(r["short"]) == (3, 0, 0)


@pytest.mark.parametrize("body, match", [
    ("1_long,\n1_short,\n1_long,2:3\n", r"sub\.csv:4: duplicate row id 1_long \(first on line 2\)"),
    ("1_long,\n1_short,3-4\n", r"sub\.csv:3: row 1_short: malformed PredictionString '3-4'"),
    ("1_long,\n1_short,1:2 3:4\n", r"sub\.csv:3: row 1_short: malformed"),
    ("1_long,\n1_short,yes\n", r"sub\.csv:3: row 1_short: malformed"),
    ("1_long,1:2,extra\n", r"sub\.csv:2: expected 2 fields"),
    ("1_long\n", r"sub\.csv:2: expected 2 fields"),
    ("1_middle,\n", r"sub\.csv:2: row id '1_middle' is not"),
    ("1_long,\"unterminated\n", r"sub\.csv:2: malformed CSV"),
    ("1_long,\"a\"b\n", r"sub\.csv:2: malformed CSV"),
])
def test_read_submission_errors(tmp_path, body, match):
    p = tmp_path / "sub.csv"
    p.write_text("example_id,PredictionString\n" + body)
    with pytest.raises(SubmissionError, match=match):
        read_submission(p)


@pytest.mark.parametrize("content", ["", "id,prediction\n1_long,\n", "1_long,\n1_short,\n"])
def test_read_submission_bad_header(tmp_path, content):
    p = tmp_path / "bad.csv"
    p.write_text(content)
    with pytest.raises(SubmissionError, match=r"bad\.csv.*header"):
        read_submission(p)


def test_read_submission_not_utf8(tmp_path):
    p = tmp_path / "sub.csv"
    p.write_bytes(b"example_id,PredictionString\n1_long,\n1_short,\xff\n")
    with pytest.raises(SubmissionError, match=r"sub\.csv:3: not UTF-8"):
        read_submission(p)


def test_read_submission_accepts_bom(tmp_path):
    p = tmp_path / "sub.csv"
    p.write_bytes("\ufeffexample_id,PredictionString\r\n1_long,1:2\r\n".encode("utf-8"))
    assert read_submission(p) == {"1_long": "1:2"}


def test_format_report(gold):
    text = format_report(score(blank_submission(gold) | {"111_long": "0:10"}, gold))
    assert "examples: 5" in text
    for name in ("overall", "long", "short", "F1", "TP", "FP", "FN"):
        assert name in text


# ---------------------------------------------------------------------------
# CLI, end to end


def run_cli(*args):
    return subprocess.run([sys.executable, "-m", "solution.evaluate", *map(str, args)],
                          cwd=REPO, capture_output=True, text=True, timeout=60)


def test_cli_json(tmp_path, gold_path):
    sub = write_csv(tmp_path / "sub.csv", [
        ("111_long", "0:10"), ("111_short", "2:4"),        # TP, TP
        ("-222_long", "10:20"), ("-222_short", "12:17"),   # TP, FP (merged span)
        ("333_long", ""), ("333_short", "YES"),            # nothing, FP
        ("-9223372036854775808_long", ""),                 # FN
        ("-9223372036854775808_short", "NO"),              # FP
        ("444_long", "40:50"), ("444_short", ""),          # TP, nothing
    ])
    proc = run_cli("--submission", sub, "--gold", gold_path, "--json")
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)  # exactly one JSON object
    assert set(result) == {"micro_f1", "precision", "recall", "tp", "fp", "fn", "long", "short", "num_examples"}
    # long (3, 0, 1); short (1, 3, 0); overall (4, 3, 1): F1 = 8 / (8 + 3 + 1)
    assert counts(result["long"]) == (3, 0, 1) and counts(result["short"]) == (1, 3, 0)
    assert counts(result) == (4, 3, 1) and result["num_examples"] == 5
    assert result["micro_f1"] == pytest.approx(8 / 12)
    assert result["precision"] == pytest.approx(4 / 7) and result["recall"] == pytest.approx(4 / 5)
    assert set(result["long"]) == {"micro_f1", "precision", "recall", "tp", "fp", "fn"}

    proc = run_cli("--submission", sub, "--gold", gold_path)  # the table
    assert proc.returncode == 0 and "overall" in proc.stdout and "0.6667" in proc.stdout


def test_cli_user_errors(tmp_path, gold_path):
    broken = tmp_path / "broken.csv"
    broken.write_text("example_id,PredictionString\n111_long,0:10\n111_short,\"oops\n")
    proc = run_cli("--submission", broken, "--gold", gold_path)
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.startswith("error: ") and "broken.csv:3" in proc.stderr
    assert "Traceback" not in proc.stderr

    partial = write_csv(tmp_path / "partial.csv", [("111_long", ""), ("111_short", "")])
    proc = run_cli("--submission", partial, "--gold", gold_path, "--json")
    assert proc.returncode == 2 and proc.stdout == ""
    assert "partial.csv: 8 missing row(s): -222_long" in proc.stderr and "Traceback" not in proc.stderr

    proc = run_cli("--submission", tmp_path / "nope.csv", "--gold", gold_path)
    assert proc.returncode == 2 and proc.stderr.startswith("error: ") and "nope.csv" in proc.stderr


def test_cli_help_and_pure_python():
    proc = run_cli("--help")
    assert proc.returncode == 0 and "--submission" in proc.stdout and "--json" in proc.stdout
    # The metric runs in the offline Kaggle kernel and inside the trainer: no heavy imports.
    code = ("import sys, solution.evaluate; "
            "print(sorted({'torch', 'accelerate', 'deepspeed', 'pandas', 'numpy'} & set(sys.modules)))")
    proc = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert proc.stdout.strip() == "[]", proc.stderr


# ---------------------------------------------------------------------------
# Real five-way-annotated dev lines


def test_real_dev_sample_annotator_zero():
    if not DEV_SAMPLE.is_file():
        pytest.skip("../shared/data/nq-real not present (only in the project's CI checkout)")
    # Annotator 0 as the submission, counted straight from the raw JSON (not through solution.data.nq).
    pred, tp, fp, fn = {}, 0, 0, 0
    for raw in DEV_SAMPLE.read_text().splitlines():
        obj = json.loads(raw)
        eid, anns = str(obj["example_id"]), obj["annotations"]
        first = anns[0]
        la = first["long_answer"]
        long_pred = f"{la['start_token']}:{la['end_token']}" if la["candidate_index"] >= 0 else ""
        if first["yes_no_answer"] != "NONE":
            short_pred = first["yes_no_answer"]
        elif first["short_answers"]:
            s = first["short_answers"][0]
            short_pred = f"{s['start_token']}:{s['end_token']}"
        else:
            short_pred = ""
        valid_long = {f"{a['long_answer']['start_token']}:{a['long_answer']['end_token']}"
                      for a in anns if a["long_answer"]["candidate_index"] >= 0}
        valid_short = {f"{s['start_token']}:{s['end_token']}" for a in anns for s in a["short_answers"]}
        valid_short |= {a["yes_no_answer"] for a in anns if a["yes_no_answer"] != "NONE"}
        for p, valid in ((long_pred, valid_long), (short_pred, valid_short)):
            if p:
                tp, fp = tp + (p in valid), fp + (p not in valid)
            else:
                fn += bool(valid)
        pred[f"{eid}_long"], pred[f"{eid}_short"] = long_pred, short_pred

    r = score(pred, load_gold(DEV_SAMPLE))
    assert counts(r) == (tp, fp, fn)
    assert r["precision"] == pytest.approx(tp / (tp + fp))
    assert r["recall"] == pytest.approx(tp / (tp + fn))
    # By hand from the 10 lines: annotator 0 answers long on 2 examples (both valid) and short on 1
    # (valid); 3 long and 3 short rows have gold that annotator 0 left blank.
    # -> long (2, 0, 3), short (1, 0, 3), overall (3, 0, 6): P = 1, R = 1/3, F1 = 6/12.
    assert r["num_examples"] == 10
    assert counts(r["long"]) == (2, 0, 3) and counts(r["short"]) == (1, 0, 3)
    assert r["micro_f1"] == pytest.approx(0.5)
