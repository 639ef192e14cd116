"""A polarity model beside the answer model (solution.answers.polarity, submission.predict --polarity-model):
only a yes/no answer's YES or NO changes, to the polarity model's on the same page, and that model runs on
those pages alone."""

import csv

import pytest
from conftest import small_test_file
from helpers import ANSWER_ALL, write_model_dir

from solution.answers.postprocess import DocumentPrediction, PostprocessConfig


def answer(answer_type, short, yes=1.0, no=2.0):
    return DocumentPrediction("d", "3:9", short, answer_type, 5.0, 4.0, 0, raw_long="3:9", raw_short=short,
                              yes_score=yes, no_score=no)


def test_a_yes_no_answer_takes_the_polarity_models_reading_and_both_type_scores_become_the_larger():
    from solution.answers.polarity import with_polarity

    cfg = PostprocessConfig()
    out = with_polarity(answer("NO", "NO", yes=1.0, no=2.0), answer("NO", "NO", yes=7.0, no=3.0), cfg)
    assert (out.answer_type, out.raw_short, out.short, out.long) == ("YES", "YES", "YES", "3:9")
    assert out.yes_score == out.no_score == 2.0
    back = with_polarity(answer("YES", "YES", yes=2.0, no=1.0), answer("YES", "YES", yes=0.0, no=3.0), cfg)
    assert (back.answer_type, back.short) == ("NO", "NO")


def test_the_margin_a_polarity_was_chosen_by_goes_into_the_scores_file_and_only_there():
    """The polarity model's YES-minus-NO score is kept in the `--scores-out` record of the pages it read, so
    that the YES/NO choice can be studied (or re-made against another cut) from the file alone."""
    from solution.answers.polarity import with_polarity
    from solution.answers.postprocess import score_record

    cfg = PostprocessConfig()
    read = with_polarity(answer("NO", "NO", yes=1.0, no=2.0), answer("NO", "NO", yes=7.0, no=3.0), cfg)
    assert read.polarity_margin == 4.0 and score_record(read)["polarity_margin"] == 4.0
    assert "polarity_margin" not in score_record(answer("NO", "NO"))  # no polarity model read it
    one_sided = with_polarity(answer("YES", "YES"), answer("YES", "YES", yes=float("-inf"), no=3.0), cfg)
    assert one_sided.short == "NO" and score_record(one_sided)["polarity_margin"] == -1e30  # JSON has no inf


def test_a_span_answer_and_an_unread_page_are_left_as_they_are():
    from solution.answers.polarity import with_polarity

    cfg = PostprocessConfig()
    span = answer("SHORT", "4:5")
    assert with_polarity(span, answer("YES", "YES", yes=9.0, no=0.0), cfg) is span
    unread = DocumentPrediction("d", "", "", "UNKNOWN", float("-inf"), float("-inf"), -1)
    no = answer("NO", "NO")
    assert with_polarity(no, unread, cfg) is no


def test_with_separate_thresholds_the_new_polarity_is_kept_or_dropped_on_the_larger_score():
    from solution.answers.polarity import with_polarity

    cfg = PostprocessConfig(separate_thresholds=True, yes_threshold=1.5, no_threshold=10.0)
    out = with_polarity(answer("NO", "NO", yes=1.0, no=2.0), answer("YES", "YES", yes=5.0, no=0.0), cfg)
    assert out.short == "YES"  # 2.0 > yes_threshold 1.5; as NO it was dropped (2.0 < 10.0)


@pytest.fixture(scope="module")
def pages(tmp_path_factory):
    return small_test_file(tmp_path_factory.mktemp("synth"), num_test=4)


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    root = tmp_path_factory.mktemp("models")
    kinds = {"says-yes": {"YES": 50.0}, "says-short": {"SHORT": 50.0}, "reads-no": {"NO": 60.0, "YES": 50.0}}
    return {name: str(write_model_dir(root / name, seed=1, postprocess=ANSWER_ALL, type_bias=bias))
            for name, bias in kinds.items()}


def rows(path):
    with open(path, newline="") as f:
        return {r["example_id"]: r["PredictionString"] for r in csv.DictReader(f)}


def test_predict_takes_yes_or_no_from_the_polarity_model_and_every_long_answer_from_the_answer_model(
        models, pages, tmp_path):
    from submission.predict import predict_file

    alone, routed = tmp_path / "alone.csv", tmp_path / "routed.csv"
    predict_file(models["says-yes"], str(pages), str(alone), quiet=True)
    result = predict_file(models["says-yes"], str(pages), str(routed), quiet=True, polarity_model=models["reads-no"])
    before, after = rows(alone), rows(routed)
    shorts = [k for k in before if k.endswith("_short")]
    assert [before[k] for k in shorts] == ["YES"] * len(shorts)  # the answer model types every page YES
    assert [after[k] for k in shorts] == ["NO"] * len(shorts)  # the polarity model reads NO on each
    assert {k: v for k, v in after.items() if k.endswith("_long")} == {k: v for k, v in before.items()
                                                                       if k.endswith("_long")}
    assert result["models"][1]["windows"] > 0


def test_predict_writes_the_polarity_margin_of_each_page_the_polarity_model_read(models, pages, tmp_path):
    import json

    from solution.scoring.tuning import read_scores
    from submission.predict import predict_file

    scores = tmp_path / "scores.jsonl"
    predict_file(models["says-yes"], str(pages), str(tmp_path / "routed.csv"), quiet=True, scores_out=str(scores),
                 polarity_model=models["reads-no"])
    records = [json.loads(line) for line in scores.read_text().splitlines()]
    assert records and all(r["answer_type"] == "NO" and r["polarity_margin"] < 0 for r in records)
    assert len(read_scores(scores)) == len(records)  # tuning reads the file as it is written


def test_the_polarity_model_runs_no_window_where_no_answer_is_a_yes_or_no(models, pages, tmp_path):
    from submission.predict import predict_file

    alone, routed = tmp_path / "alone.csv", tmp_path / "routed.csv"
    predict_file(models["says-short"], str(pages), str(alone), quiet=True)
    result = predict_file(models["says-short"], str(pages), str(routed), quiet=True,
                          polarity_model=models["reads-no"])
    assert routed.read_bytes() == alone.read_bytes()
    assert result["models"][1]["windows"] == 0


def test_a_polarity_model_that_is_no_model_directory_is_one_line_before_any_page(models, pages, tmp_path, capsys):
    from submission import predict

    out = tmp_path / "out.csv"
    code = predict.main(["--model", models["says-yes"], "--input", str(pages), "--output", str(out), "--quiet",
                         "--device", "cpu", "--polarity-model", str(tmp_path / "nowhere")])
    err = capsys.readouterr().err
    assert code == 2 and "nowhere" in err and len(err.strip().splitlines()) == 1
    assert not out.exists()


def test_the_polarity_offset_moves_where_a_margin_reads_yes():
    from solution.answers.polarity import with_polarity

    leans_no = answer("NO", "NO", yes=1.0, no=3.0)  # margin -2
    assert with_polarity(answer("NO", "NO"), leans_no, PostprocessConfig()).short == "NO"
    assert with_polarity(answer("NO", "NO"), leans_no, PostprocessConfig(polarity_offset=-3.0)).short == "YES"


def polarity_pages(tmp_path):
    """The shared twenty yes/no pages' score records, and their gold written as a dev file."""
    from conftest import write_jsonl
    from helpers import polarity_pages as pages

    records, lines = pages()
    return records, write_jsonl(tmp_path / "dev.jsonl", lines)


def test_the_polarity_cut_reads_the_most_pages_right_and_a_tie_goes_to_the_cut_nearest_zero(tmp_path):
    from solution.answers.polarity import polarity_cut, with_cut
    from solution.scoring.metric import load_gold

    records, dev = polarity_pages(tmp_path)
    gold = load_gold(dev)
    cut = polarity_cut(records, gold)
    assert cut["right"] == cut["pages"] == 20 and cut["right_at_0"] == 13
    assert -4.1 < cut["polarity_offset"] < -2.0 and cut["polarity_offset"] == pytest.approx(-3.05)
    assert [r["answer_type"] for r in with_cut(records, cut["polarity_offset"])] == ["NO"] * 10 + ["YES"] * 10
    read_right = [dict(r, polarity_margin=m) for r, m in zip(records, [-1.0] * 10 + [1.0] * 10)]
    assert polarity_cut(read_right, gold)["polarity_offset"] == 0.0  # every cut from -1 to 1 ties: 0
    assert polarity_cut([{k: v for k, v in r.items() if k != "polarity_margin"} for r in records], gold) is None


def test_the_polarity_cut_weighs_the_no_pages_as_much_as_the_yes_pages(tmp_path):
    """Ten YES pages and two NO pages whose margins sit among the YES ones: the cut that reads the most pages
    right says YES everywhere (10 of 12, NO F1 0); the balanced cut gives up three YES pages to read both NO
    pages right (9 of 12, each kind's share 0.7 and 1.0)."""
    from solution.answers.polarity import polarity_cut
    from solution.scoring.metric import load_gold

    records, dev = polarity_pages(tmp_path)
    gold = load_gold(dev)
    no, yes = records[:2], records[10:]
    pages = [dict(r, polarity_margin=m) for r, m in zip(no + yes, [2.5, 3.5, *range(1, 11)])]
    cut = polarity_cut(pages, gold)
    assert cut["polarity_offset"] == pytest.approx(3.75)
    assert (cut["right"], cut["pages"], cut["right_at_0"]) == (9, 12, 10)
    assert cut["balanced"] == pytest.approx(0.85) and cut["balanced_at_0"] == pytest.approx(0.5)
    only_yes = polarity_cut([dict(r, polarity_margin=float(m)) for r, m in zip(yes, range(-5, 5))], gold)
    assert only_yes["right"] == 10 and only_yes["balanced"] == 1.0  # one kind alone: its share, no division by 0


def test_tune_sets_the_polarity_offset_in_the_model_directory_from_the_scores_margins(tmp_path, capsys):
    import json

    from helpers import settings_dir

    from solution import evaluate
    from solution.model.qa_config import read_postprocess

    records, dev = polarity_pages(tmp_path)
    scores = tmp_path / "scores.jsonl"
    scores.write_text("".join(json.dumps(r) + "\n" for r in records))
    model = settings_dir(tmp_path / "model")
    assert evaluate.main(["--tune", "--scores", str(scores), "--gold", str(dev), "--model", str(model)]) == 0
    assert "polarity cut: -3.0500 reads 20 of the 20" in capsys.readouterr().out
    assert read_postprocess(str(model)).polarity_offset == pytest.approx(-3.05)
    plain = tmp_path / "plain.jsonl"  # no polarity model read these pages: the offset is left as it is
    plain.write_text("".join(json.dumps({k: v for k, v in r.items() if k != "polarity_margin"}) + "\n"
                             for r in records))
    model = settings_dir(tmp_path / "model-cut-at-1", {"polarity_offset": -1.0})
    assert evaluate.main(["--tune", "--scores", str(plain), "--gold", str(dev), "--model", str(model)]) == 0
    assert read_postprocess(str(model)).polarity_offset == -1.0


def test_predict_reads_yes_where_the_polarity_offset_sits_below_the_models_margin(models, pages, tmp_path):
    from submission.predict import predict_file

    routed = tmp_path / "routed.csv"
    predict_file(models["says-yes"], str(pages), str(routed), quiet=True, polarity_model=models["reads-no"],
                 overrides=("polarity_offset=-1000",))
    shorts = [v for k, v in rows(routed).items() if k.endswith("_short")]
    assert shorts and shorts == ["YES"] * len(shorts)
