"""A file's feature-cache entry joined from its parts' entries: the windows and every summary field are
those featurising the whole gives, a later build of the whole reuses it, and a whole that is not its
parts' concatenation (or repeats an id across them) is refused before anything is built."""

import json

import pytest
from conftest import nq_line, write_jsonl
from helpers import cache_window, corpus

from solution.common.jsonio import read_json_object
from solution.data.nq import NQFormatError
from solution.windows import assemble
from solution.windows.assemble import NotConcatenationError, assemble_train_features
from solution.windows.dataset import build_train_features
from solution.windows.sampling import NegativeSampling

WINDOW = cache_window()
# Rates below 1 and a seed that is not the default: which negatives are kept is drawn per window.
SAMPLING = NegativeSampling(0.5, unanswerable_keep_rate=0.4)
SEED = 3
CUTS = (5, 11)  # three parts: lines 1-5, 6-11, 12-16


def page_lines(tmp_path, bad_line=None, overlong=0) -> list:
    """Twelve answerable pages (the cache tests' corpus, with `bad_line` as its line 4), four without
    an answer and `overlong` whose short answer no window holds (two misses each), as JSON lines."""
    lines = corpus(tmp_path / "corpus.jsonl", bad_line=bad_line).read_text().splitlines()
    for i in range(4):
        doc = "T <H1> T </H1> " + " ".join(f"<P> none {i} {j} tells of Place{j} . </P>" for j in range(8))
        lines.append(json.dumps(nq_line(example_id=str(2000 + i), document=doc, question=f"capital {i}")))
    for i in range(overlong):
        doc = "T <H1> T </H1> <P> intro . </P> <P> " + " ".join(f"w{i}x{k}" for k in range(70)) + " . </P>"
        toks = doc.split()
        lines.append(json.dumps(nq_line(example_id=str(3000 + i), document=doc, long=1, question="what",
                                        shorts=[(toks.index(f"w{i}x0"), toks.index(f"w{i}x69") + 1)])))
    return lines


def write_split(folder, lines, cuts=CUTS) -> tuple:
    """`folder`/whole.jsonl holding `lines`, and the parts it is cut into at `cuts`."""
    folder.mkdir(parents=True, exist_ok=True)
    bounds = [0, *cuts, len(lines)]
    parts = [str(write_jsonl(folder / f"part{k}.jsonl", lines[a:b])) for k, (a, b) in enumerate(zip(bounds, bounds[1:]))]
    return str(write_jsonl(folder / "whole.jsonl", lines)), parts


def assembled(whole, parts, tokenizer, cache, **kwargs):
    logged = []
    ds, summary = assemble_train_features(whole, parts, tokenizer, WINDOW, SAMPLING, str(cache), seed=SEED,
                                          log=logged.append, **kwargs)
    return ds, summary, logged


def direct(whole, tokenizer, cache, **kwargs):
    logged = []
    ds, summary = build_train_features(whole, tokenizer, WINDOW, SAMPLING, str(cache), seed=SEED, log=logged.append,
                                       **kwargs)
    return ds, summary, logged


def in_order(ds) -> list:
    """Every column of every window, in the entry's order."""
    return [(r["example_id"], r["window_index"], tuple(r["input_ids"]), tuple(r["token_type_ids"]),
             tuple(r["nq_token_index"]), r["start_positions"], r["end_positions"], r["answer_type"]) for r in ds]


def entry(summary):
    return read_json_object(summary["dataset_dir"] + "/../summary.json")


@pytest.fixture(scope="module")
def built(tmp_path_factory, tokenizer):
    """The three parts' entries and the whole's, assembled in one cache; the whole featurised in another."""
    tmp = tmp_path_factory.mktemp("assemble")
    # 22 misses, six in the second part and 16 in the third: the whole keeps the first 20, as one process does.
    whole, parts = write_split(tmp / "data", page_lines(tmp, overlong=11), cuts=(10, 19))
    asm = assembled(whole, parts, tokenizer, tmp / "asm")
    return {"tmp": tmp, "whole": whole, "parts": parts, "asm": asm, "direct": direct(whole, tokenizer, tmp / "direct")}


def test_the_assembled_entry_is_the_featurised_one(built):
    (ds, summary, logged), (d_ds, d_summary, _) = built["asm"], built["direct"]
    featurised = [m for m in logged if m.startswith("features: featurising")]
    assert len(featurised) == 3 and not any(built["whole"] in m for m in featurised)
    assert any("assembling" in m for m in logged)
    assert in_order(ds) == in_order(d_ds)
    # Every field summary.json records is the same (the summary is of the whole file, the key its key).
    # Only `dataset_dir`, which is not in summary.json, differs: the two entries live in two caches.
    assert entry(summary) == entry(d_summary)
    assert {k: v for k, v in summary.items() if k != "dataset_dir"} == \
        {k: v for k, v in d_summary.items() if k != "dataset_dir"}
    assert summary["path"] == built["whole"] and summary["lines"] == 27 and summary["documents"] == 27
    assert len(summary["misses"]) == 20 and summary["misses"][0].startswith("3000: short")
    # The rates drew: some negatives kept in both kinds of page, not all.
    assert summary["negatives_kept_answerable"] > 0 and summary["negatives_kept_unanswerable"] > 0
    assert summary["windows_kept"] < summary["windows"]


def test_a_later_build_of_the_whole_reuses_the_assembled_entry(built, tokenizer):
    ds, summary, _ = built["asm"]
    again, again_summary, logged = direct(built["whole"], tokenizer, built["tmp"] / "asm", verify=True)
    assert "reusing cache" in logged[-1] and not any(m.startswith("features: featurising") for m in logged)
    assert again_summary["dataset_dir"] == summary["dataset_dir"] and in_order(again) == in_order(ds)
    # A limit at least the line count keeps the windows, and the key build_train_features gives it.
    _, limited, logged = assembled(built["whole"], built["parts"], tokenizer, built["tmp"] / "asm", limit=27)
    assert limited["windows_digest"] == summary["windows_digest"] and limited["source"]["limit"] == 27
    _, _, logged = direct(built["whole"], tokenizer, built["tmp"] / "asm", limit=27)
    assert "reusing cache" in logged[-1]


def test_a_cached_whole_is_proven_and_returned_without_joining_or_building(built, tokenizer, monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("joined or built again")

    monkeypatch.setattr(assemble, "join_windows", refuse)
    monkeypatch.setattr(assemble, "build_train_features", refuse)
    ds, summary, logged = assembled(built["whole"], built["parts"], tokenizer, built["tmp"] / "asm", verify=True)
    assert "reusing cache" in logged[-1] and summary["dataset_dir"] == built["asm"][1]["dataset_dir"]
    assert len(ds) == summary["windows_kept"] == built["asm"][1]["windows_kept"]


def test_a_failed_join_leaves_nothing_behind(built, tokenizer, monkeypatch):
    def full(directory, num_windows, files):
        raise RuntimeError("stopped while joining")

    monkeypatch.setattr(assemble, "write_meta", full)
    cache = built["tmp"] / "asm"
    before = sorted(p.name for p in cache.iterdir())
    with pytest.raises(RuntimeError, match="stopped while joining"):
        assembled(built["whole"], built["parts"], tokenizer, cache, limit=1000)  # another key: not cached
    assert sorted(p.name for p in cache.iterdir()) == before


def test_skipped_lines_are_counted_and_named_as_the_whole_files(tmp_path, tokenizer):
    # The bad line is line 4 of the whole, line 2 of the second part (lines 3-9): named as line 4.
    whole, parts = write_split(tmp_path / "data", page_lines(tmp_path, bad_line="{broken"), cuts=(2, 9))
    _, summary, _ = assembled(whole, parts, tokenizer, tmp_path / "asm", on_error="skip")
    _, d_summary, _ = direct(whole, tokenizer, tmp_path / "direct", on_error="skip")
    assert entry(summary) == entry(d_summary)
    assert summary["skipped"] == 1 and summary["first_errors"][0].startswith(f"{whole}:4: ")


@pytest.mark.parametrize("change, names", [
    (lambda lines, parts: lines[:7] + ["x" + lines[7]] + lines[8:], "line 8 should be line 3 of part {part1}"),
    (lambda lines, parts: lines, "line 12 comes after the last line of the last part"),
    (lambda lines, parts: lines[:10], "line 11 should be line 6 of part {part1} (the file ends before it)"),
], ids=["a line changed", "a part missing", "the whole cut short"])
def test_a_whole_that_is_not_its_parts_is_refused_before_anything_is_built(tmp_path, tokenizer, change, names):
    lines = page_lines(tmp_path)
    _, parts = write_split(tmp_path / "data", lines)
    whole = str(write_jsonl(tmp_path / "data" / "other.jsonl", change(lines, parts)))
    given = parts[:2] if names.startswith("line 12") else parts
    with pytest.raises(NotConcatenationError) as refused:
        assemble_train_features(whole, given, tokenizer, WINDOW, SAMPLING, str(tmp_path / "asm"), seed=SEED)
    assert names.format(part1=parts[1]) in str(refused.value)
    assert not (tmp_path / "asm").exists()


def test_an_id_in_two_parts_is_refused_before_anything_is_built_as_featurising_refuses_it(tmp_path, tokenizer):
    lines = page_lines(tmp_path)
    lines[9] = json.dumps(nq_line(example_id="1002", question="who wrote the book"))  # line 3's id, in part 1
    whole, parts = write_split(tmp_path / "data", lines)
    with pytest.raises(NQFormatError) as refused:
        assembled(whole, parts, tokenizer, tmp_path / "asm")
    assert not (tmp_path / "asm").exists()
    with pytest.raises(NQFormatError) as featurising:
        direct(whole, tokenizer, tmp_path / "direct")
    assert str(refused.value) == str(featurising.value)
    assert "whole.jsonl:10: field 'example_id': duplicate example_id 1002 (first on line 3)" in str(refused.value)


def test_a_skipped_line_that_holds_an_id_is_no_duplicate(tmp_path, tokenizer):
    lines = page_lines(tmp_path)
    lines[9] = '{"example_id": 1002, "question_text": '  # not JSON: skipped, as featurising skips it
    whole, parts = write_split(tmp_path / "data", lines)
    _, summary, _ = assembled(whole, parts, tokenizer, tmp_path / "asm", on_error="skip")
    assert summary["skipped"] == 1 and summary["documents"] == 15


def test_hard_negatives_and_a_limit_below_the_line_count_are_refused(tmp_path, tokenizer):
    whole, parts = write_split(tmp_path / "data", page_lines(tmp_path))
    with pytest.raises(ValueError, match="hard-negative sampling"):
        assemble_train_features(whole, parts, tokenizer, WINDOW, NegativeSampling(hard_negatives_file="s.jsonl"),
                                str(tmp_path / "asm"))
    with pytest.raises(ValueError, match="limit 15 is below .* 16 lines"):
        assemble_train_features(whole, parts, tokenizer, WINDOW, SAMPLING, str(tmp_path / "asm"), limit=15)
    assert not (tmp_path / "asm").exists()


def test_a_file_that_is_its_own_one_part_is_featurised_once_and_not_joined_again(tmp_path, tokenizer):
    whole, _ = write_split(tmp_path / "f", page_lines(tmp_path))
    ds, summary, logged = assembled(whole, [whole], tokenizer, tmp_path / "c")
    alone, alone_summary, _ = direct(whole, tokenizer, tmp_path / "d")
    assert in_order(ds) == in_order(alone) and summary["windows_kept"] == alone_summary["windows_kept"]
    assert [line for line in logged if "assembling" in line] == []  # no copy of the entry over itself
    assert len([line for line in logged if "featurising" in line]) == 1
