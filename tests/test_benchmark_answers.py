"""scripts/benchmark_answers.py: its technique table uses the agreed names; the YES/NO split counts right."""

import importlib.util

from conftest import ROOT, nq_line, write_jsonl

spec = importlib.util.spec_from_file_location("benchmark_answers", ROOT / "scripts" / "benchmark_answers.py")
bench = importlib.util.module_from_spec(spec)
spec.loader.exec_module(bench)


def test_every_technique_of_issue_13_is_a_row():
    assert set(bench.TECHNIQUES) | {"ensemble"} == {"top_level", "no_answer_score", "thresholds", "n_best",
                                                    "max_context", "structure_tokens", "ensemble"}
    sets = {s.split("=")[0] for _, s_list in bench.TECHNIQUES.values() for s in s_list}
    assert sets == {"top_level_only", "subtract_type_null", "score_space", "separate_thresholds",
                    "n_best_aggregation", "max_context"}


def test_yes_no_split(tmp_path):
    gold = write_jsonl(tmp_path / "gold.jsonl", [nq_line("1", long=0, yes_no="YES"), nq_line("2", long=0, yes_no="YES"),
                                                 nq_line("3", long=0, yes_no="NO"), nq_line("4")])
    sub = tmp_path / "sub.csv"
    # YES: right on 1, missed on 2, said wrongly on 3 and 4 -> tp 1, fp 2, fn 1. NO: said YES on 3 -> fn 1.
    sub.write_text("example_id,PredictionString\n" + "".join(
        f"{i}_long,\n{i}_short,{p}\n" for i, p in (("1", "YES"), ("2", ""), ("3", "YES"), ("4", "YES"))))
    split = bench.yes_no_split(sub, str(gold))
    assert (split["yes"]["tp"], split["yes"]["fp"], split["yes"]["fn"]) == (1, 2, 1)
    assert (split["no"]["tp"], split["no"]["fp"], split["no"]["fn"]) == (0, 0, 1)
    assert split["yes"]["micro_f1"] == 2 / (2 + 2 + 1)
