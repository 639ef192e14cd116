"""The backbone's sentence matching as a no-training reference (`solution.lexical --method sentences`)."""

import json

import numpy as np
from conftest import nq_line, write_jsonl

from solution.data.nq import parse_example
from solution.lexical import main
from solution.model.references import answer, lexical_records, sentence_answer, sentence_embed

# The question's own word ("population") sits in a sentence about a museum; the answer says it in other words.
PAGE = ("Drakia - wikipedia <H1> Drakia </H1> <P> Drakia is a small country in the north . </P> "
        "<P> The Drakia Population Museum was opened in 1950 and shows old farming tools . </P> "
        "<P> About four million people live in Drakia , most of them near the coast . </P> "
        "<P> Drakia has a mild climate with wet winters . </P>")
QUESTION = "what is the population of drakia"


def example(question=QUESTION, document=PAGE):
    return parse_example(json.dumps(nq_line(question=question, document=document)))


def long_text(record: dict) -> str:
    start, end = map(int, record["raw_long"].split(":"))
    return " ".join(PAGE.split(" ")[start:end])


def test_the_sentence_method_finds_the_answer_in_other_words_where_word_matching_takes_the_distractor():
    ex = example()
    assert long_text(answer(ex)).startswith("<P> The Drakia Population Museum")  # shares the question's word
    r = sentence_answer(ex, sentence_embed())
    assert long_text(r).startswith("<P> About four million people")
    assert 0.0 < r["score"] <= 1.0


class Recorder:
    """An embed callable that keeps what it was given and answers with fixed vectors: the segment naming
    `near` points along the question, every other text across it."""

    def __init__(self, near: str):
        self.near, self.calls = near, []

    def __call__(self, texts):
        self.calls.append(list(texts))
        out = np.zeros((len(texts), 2), dtype=np.float32)
        out[0] = [1.0, 0.0]  # the question
        for i, t in enumerate(texts[1:], 1):
            out[i] = [0.6, 0.8] if self.near in t else [0.0, 1.0]
        return out


def test_every_text_is_embedded_with_the_subject_masked_in_one_call_a_page():
    embed = Recorder(near="coast")
    r = sentence_answer(example(), embed)
    assert len(embed.calls) == 1  # a page's segments in one batch
    texts = embed.calls[0]
    assert texts[0] == "what is the population of the subject"
    assert not [t for t in texts if "drakia" in t.lower()]  # every segment names the subject: all masked
    assert "About four million people live in the subject , most of them near the coast" in texts
    assert long_text(r).startswith("<P> About four million")


def test_records_have_the_score_record_shape_long_answers_only():
    r = sentence_answer(example(), Recorder(near="coast"))
    assert r.keys() == answer(example()).keys()
    assert (r["answer_type"], r["raw_short"], r["short_score"], r["yes_score"], r["no_score"]) == ("LONG", "", 0, 0, 0)
    assert r["score"] == np.float32(0.6)  # the best segment's cosine with the question
    assert sentence_answer(example("is drakia a country"), Recorder(near="small"))["raw_short"] == ""  # no YES/NO
    empty = sentence_answer(example(document="Drakia - wikipedia <H1> Drakia </H1>"), Recorder(near="x"))
    assert empty["raw_long"] == "" and empty["score"] == 0.0


def test_the_command_writes_sentence_records(tmp_path):
    src = write_jsonl(tmp_path / "dev.jsonl", [nq_line("7", question=QUESTION, document=PAGE)])
    out = tmp_path / "scores.jsonl"
    assert main(["--input", str(src), "--scores-out", str(out), "--method", "sentences", "--threads", "1"]) == 0
    (record,) = [json.loads(line) for line in out.read_text().splitlines()]
    assert record == lexical_records(src, method="sentences")[0] and record["example_id"] == "7"
    assert long_text(record).startswith("<P> About four million")
