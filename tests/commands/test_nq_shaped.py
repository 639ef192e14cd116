"""The nq-shaped profile: valid simplified-NQ, and the page and question shapes it changes from `nq`, each
measured on ~50 generated pages with the figures `solution.corpus_stats` reports (the `nq` maker fails each)."""

import json
import random
import re
import statistics

import pytest

from solution.data.nq import read_examples
from solution.data.synth import corpus as synth_corpus
from solution.data.synth import nq_pages
from solution.data.synth.nq_shaped import compose_filler, make_nq_shaped_example
from solution.data.words import content_words, page_title, segments, stem
from solution.scoring.corpus_figures import sentence_shape

PAGES = 50


def _pages(make, answer_types, seed=0):
    rng = random.Random(seed)
    return [make(rng, answer_types[i % len(answer_types)], 1000, 12000, held_out=True) for i in range(PAGES)]


def _rank_fractions(pages) -> list:
    """The gold's rank among the page's top-level candidates (of the top-level one holding it), as a fraction."""
    out = []
    for p in pages:
        gold = p["candidates"][p["answer"]["candidate_index"]]
        tops = [c for c in p["candidates"] if c["top_level"]]
        rank = next(i for i, c in enumerate(tops)
                    if c["start_token"] <= gold["start_token"] and gold["end_token"] <= c["end_token"])
        out.append(rank / len(tops))
    return out


@pytest.fixture(scope="module")
def answered():
    return _pages(make_nq_shaped_example, ["SHORT", "LONG", "SHORT"])


def test_written_pages_are_valid_simplified_nq(tmp_path):
    synth_corpus.write_corpus(tmp_path, seed=0, num_train=8, num_dev=8, num_test=8, profile="nq-shaped")
    for name, annotated in (("train", True), ("dev", True), ("test", False), ("test-gold", True)):
        exs = list(read_examples(tmp_path / f"simplified-nq-{name}.jsonl", require_annotations=annotated))
        assert len(exs) == 8


def test_gold_sits_near_the_top_of_the_page(answered):
    fractions = _rank_fractions(answered)
    assert statistics.median(fractions) < 0.2  # real lines: 0.08; nq: 0.49
    assert sum(f < 0.1 for f in fractions) / len(fractions) > 0.4  # real: 0.57; nq: 0.10
    assert sum(f == 0 for f in fractions) / len(fractions) > 0.04  # real: 0.17; nq: never


def test_the_lead_paragraph_states_asked_facts(answered):
    def first_paragraph_is_gold(p):
        first = next(i for i, c in enumerate(p["candidates"]) if c["top_level"] and p["tokens"][c["start_token"]] == "<P>")
        return p["answer"]["candidate_index"] == first
    assert sum(map(first_paragraph_is_gold, answered)) / len(answered) > 0.15  # real: 0.33; nq: 0


def test_questions_name_their_subject(answered):
    named = [p["entity"].lower()[:6] in {stem(w) for w in content_words(p["question"])} for p in answered]
    assert sum(named) / len(named) > 0.75  # real: 0.88 hold a title word; nq: 0.66


def test_half_the_no_questions_name_a_value_on_the_page():
    pages = _pages(make_nq_shaped_example, ["NO"], seed=1)
    on_page = []
    for p in pages:
        page = {stem(t) for t in p["tokens"] if not t.startswith("<")}
        words = {stem(w) for w in content_words(p["question"])} - {stem(w) for w in content_words(p["entity"])}
        on_page.append(words - {"true", "would"} <= page)
    assert 0.25 < sum(on_page) / len(on_page) < 0.75  # nq: 0.07


def test_filler_sentences_are_composed_not_a_few_fixed_ones(answered):
    shapes = []
    for p in answered[:20]:
        title = page_title(p["tokens"])
        shapes.append({sentence_shape([p["tokens"][i] for i in seg], title) for c in p["candidates"] if c["top_level"]
                       for seg in segments(p["tokens"], c["start_token"], c["end_token"]) if len(seg) >= 6})
    repeated = [len({s for s in mine if any(s in other for other in shapes if other is not mine)}) / len(mine)
                for mine in shapes]
    assert statistics.fmean(repeated) < 0.25  # real: 0.02; nq: 0.83
    rng = random.Random(0)
    assert len({" ".join(compose_filler(rng, lambda slot: "X")) for _ in range(500)}) > 450


def test_same_seed_same_pages():
    first = _pages(make_nq_shaped_example, ["SHORT"])[:3]
    assert first == _pages(make_nq_shaped_example, ["SHORT"])[:3]


def _lines(path) -> list:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_lines_say_whether_their_question_form_was_held_out(tmp_path):
    """Every line of every file carries "question_form"; training's are all "seen"; about NQ_HELD_OUT_QUESTIONS
    of dev's and test's are "held_out", and exactly those questions are in a held-out form."""
    synth_corpus.write_corpus(tmp_path, seed=0, num_train=8, num_dev=30, num_test=30, profile="nq-shaped")
    files = {n: _lines(tmp_path / f"simplified-nq-{n}.jsonl") for n in ("train", "dev", "test", "test-gold")}
    held_forms = (nq_pages.ASK_NOUN_HELD + nq_pages.ASK_YES_NO_HELD + nq_pages.ASK_TOPIC_HELD
                  + tuple(f for a in nq_pages.READING_ATTRIBUTES.values() for f in a[4]))
    patterns = [re.compile(".+".join(re.escape(p) for p in re.split(r"\{[a-z]\}", t))) for t in held_forms]
    for name, lines in files.items():
        assert all(o["question_form"] in ("seen", "held_out") for o in lines), name
        for o in lines:
            in_held_form = any(p.fullmatch(o["question_text"]) for p in patterns)
            assert in_held_form == (o["question_form"] == "held_out"), (name, o["question_text"], o["question_form"])
    assert {o["question_form"] for o in files["train"]} == {"seen"}
    for name in ("dev", "test"):
        share = sum(o["question_form"] == "held_out" for o in files[name]) / len(files[name])
        assert 0.25 <= share <= 0.75, (name, share)
    assert [o["question_form"] for o in files["test"]] == [o["question_form"] for o in files["test-gold"]]
    assert list(files["test"][0]) == ["example_id", "question_text", "document_text", "long_answer_candidates",
                                      "question_form"]


def test_a_page_records_the_form_its_question_was_asked_in():
    """The maker's page says it too, and a training page (held_out False) is always "seen"."""
    rng = random.Random(2)
    held = [make_nq_shaped_example(rng, t, 1000, 3000, held_out=True)["question_form"] for t in ["SHORT", "NO", "LONG"] * 10]
    assert set(held) == {"seen", "held_out"}
    rng = random.Random(2)
    assert {make_nq_shaped_example(rng, "SHORT", 1000, 3000)["question_form"] for _ in range(10)} == {"seen"}
