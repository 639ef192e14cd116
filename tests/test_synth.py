"""The synthetic corpus: exact simplified-NQ format, deterministic, NQ-like mix, learnable shape."""

import json
from collections import Counter

import pytest

from solution import synth
from solution.nq import is_html_token, read_examples

FILES = {"train": True, "dev": True, "test": False, "test-gold": True}  # name -> require_annotations
CANDIDATE_TAGS = ("P", "Table", "Tr", "Ul", "Li")
STOPWORDS = {"what", "is", "the", "of", "in", "who", "was", "a", "like", "how", "does", "when", "did"}


def _write(out, **kw):
    args = dict(seed=0, num_train=20, num_dev=5, num_test=5, min_words=300, max_words=1200) | kw
    synth.write_corpus(out, **args)
    return {name: out / f"simplified-nq-{name}.jsonl" for name in FILES}


def _objs(path):
    return [json.loads(line) for line in path.read_text().splitlines()]


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    """The default-sized training split (~1000 examples), small dev and test."""
    return _write(tmp_path_factory.mktemp("synth"), num_train=1000, num_dev=40, num_test=40, max_words=3000)


def test_same_seed_gives_identical_bytes_and_another_seed_differs(tmp_path):
    a, b, c = _write(tmp_path / "a"), _write(tmp_path / "b"), _write(tmp_path / "c", seed=1)
    for name in FILES:
        assert a[name].read_bytes() == b[name].read_bytes(), name
        assert a[name].read_bytes() != c[name].read_bytes(), name


def test_split_sizes_do_not_change_other_splits(tmp_path):
    # Each split has its own stream: asking for more training data leaves dev and test as they were.
    a, b = _write(tmp_path / "a"), _write(tmp_path / "b", num_train=30)
    assert a["dev"].read_bytes() == b["dev"].read_bytes()
    assert a["test"].read_bytes() == b["test"].read_bytes()


def test_every_file_reads_through_the_validated_reader(corpus):
    for name, require in FILES.items():
        examples = list(read_examples(corpus[name], require_annotations=require))
        assert len(examples) == (1000 if name == "train" else 40)


def test_field_layout_and_ids(corpus):
    train, dev, test, gold = (_objs(corpus[n]) for n in FILES)
    assert list(train[0]) == ["document_text", "long_answer_candidates", "question_text", "annotations",
                              "document_url", "example_id"]
    assert all(len(o["annotations"]) == 1 for o in train)
    assert all(len(o["annotations"]) == 5 for o in dev + gold)
    assert all(type(o["example_id"]) is int for o in train + dev)
    assert all(0 <= a["annotation_id"] < 2 ** 64 for o in train + dev + gold for a in o["annotations"])
    # Kaggle's test file: string ids, no answers, no url; the gold has the same ids in the same order.
    assert all(set(o) == {"example_id", "question_text", "document_text", "long_answer_candidates"} for o in test)
    assert all(isinstance(o["example_id"], str) for o in test)
    assert [o["example_id"] for o in test] == [str(o["example_id"]) for o in gold]
    assert [o["document_text"] for o in test] == [o["document_text"] for o in gold]
    assert all(o["document_url"].startswith("https://en.wikipedia.org/") for o in gold)
    ids = [int(o["example_id"]) for o in train + dev + test]
    assert len(set(ids)) == len(ids)  # unique across train, dev and test
    assert any(i < 0 for i in ids) and all(-2 ** 63 <= i < 2 ** 63 for i in ids)


def test_answer_type_mix_is_close_to_nq_training(corpus):
    mix = Counter(ex.answer_type for ex in read_examples(corpus["train"]))
    share = {t: mix[t] / 1000 for t in synth.ANSWER_TYPES}
    assert 0.40 <= share["NONE"] <= 0.60
    assert 0.25 <= share["SHORT"] <= 0.42
    assert 0.08 <= share["LONG"] <= 0.25
    assert 0.005 <= share["YES"] + share["NO"] <= 0.035
    assert mix["YES"] and mix["NO"]


def test_five_way_annotations_agree_with_the_true_answer(corpus):
    for name in ("dev", "test-gold"):
        for ex in read_examples(corpus[name], require_annotations=True):
            types = [a.answer_type for a in ex.annotations]
            if ex.answer_type == "NONE":
                assert set(types) == {"NONE"}
            else:  # each annotator gives the one true answer or abstains; one at least answers
                assert set(types) <= {"NONE", ex.answer_type} and ex.answer_type in types
                assert len({(a.long_answer, a.short_answers) for a in ex.annotations if a.answer_type != "NONE"}) == 1


def test_candidates_are_exactly_the_html_elements(corpus):
    nested = 0
    for obj in _objs(corpus["train"])[:200]:
        text = obj["document_text"]
        assert text == " ".join(text.split())  # single spaces
        tokens = text.split()
        assert tokens[1:4] == ["-", "wikipedia", "<H1>"] and tokens[4] == tokens[0]
        expected, stack = [], []
        for i, tok in enumerate(tokens):
            if tok.startswith("<") and tok.strip("</>").split("_")[0] in CANDIDATE_TAGS:
                assert is_html_token(tok)
                if tok.startswith("</"):
                    start = stack.pop()
                    expected.append({"start_token": start, "top_level": not stack, "end_token": i + 1})
                else:
                    stack.append(i)
        assert not stack
        expected.sort(key=lambda c: c["start_token"])
        assert obj["long_answer_candidates"] == expected
        nested += sum(not c["top_level"] for c in expected)
        assert "<H2>" in tokens or len(tokens) < 600
    assert nested > 0


def test_answers_are_top_level_and_share_words_with_the_question(corpus):
    for ex in read_examples(corpus["train"]):
        ann = ex.annotations[0]
        if ann.long_answer is None:
            continue
        assert ex.candidates[ann.candidate_index].top_level
        long_words = {t.lower() for t in ex.tokens[ann.long_answer.start_token:ann.long_answer.end_token]}
        shared = set(ex.question_text.split()) & long_words - STOPWORDS
        assert shared, (ex.question_text, ex.example_id)
        if ex.answer_type == "SHORT":
            (short,) = ann.short_answers
            assert not any(is_html_token(t) for t in ex.tokens[short.start_token:short.end_token])
        if ex.answer_type in ("YES", "NO"):
            assert not ann.short_answers


def test_document_lengths_span_the_bounds(corpus):
    lengths = [len(ex.tokens) for ex in read_examples(corpus["train"])]
    assert 300 <= min(lengths) and max(lengths) <= 3000
    assert sum(n > 1500 for n in lengths) > 100 and sum(n < 600 for n in lengths) > 100  # log-uniform: both ends


def test_cli_prints_a_summary_and_rejects_bad_options(tmp_path, capsys):
    synth.main(["--out", str(tmp_path), "--num-train", "10", "--num-dev", "3", "--num-test", "3", "--seed", "7"])
    out = capsys.readouterr().out
    assert "train" in out and "NONE" in out and "simplified-nq-test-gold.jsonl" in out
    for bad in (["--min-words", "50"], ["--min-words", "500", "--max-words", "400"], ["--num-train", "0"]):
        with pytest.raises(SystemExit) as exc:
            synth.main(["--out", str(tmp_path)] + bad)
        assert exc.value.code == 2
