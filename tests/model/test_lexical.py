"""The word-matching reference answerer on hand-built pages with a neighbour's fact in the same words."""

import json

from conftest import nq_line, write_jsonl

from solution.data.nq import parse_example, read_examples
from solution.model.references import answer

PAGE = ("Drakia - wikipedia <H1> Drakia </H1> <P> Drakia is a small country . </P> "
        "<P> The capital of Vemoria is Ostel . Vemoria lies to the north . </P> "
        "<P> Farms cover the plains . The capital of Drakia is Zoran Bay . </P>")


def record(question: str) -> dict:
    return answer(parse_example(json.dumps(nq_line(question=question, document=PAGE))))


def span_text(span: str) -> str:
    start, end = map(int, span.split(":"))
    return " ".join(PAGE.split(" ")[start:end])


def test_the_sentence_about_the_page_s_subject_wins_over_the_neighbour_s_copy():
    r = record("what is the capital of drakia")
    assert span_text(r["raw_long"]).startswith("<P> Farms cover")
    assert r["answer_type"] == "SHORT" and span_text(r["raw_short"]) == "Zoran Bay"
    assert r["score"] == r["short_score"] == 1.0


def test_yes_no_questions_and_a_fact_the_page_does_not_state():
    assert record("is zoran bay the capital of drakia")["raw_short"] == "YES"
    assert record("is ostel the capital of drakia")["raw_short"] == "NO"
    missing = record("what is the national anthem of drakia")
    assert missing["score"] < 1.0 and missing["answer_type"] != "SHORT"


TABLE_PAGE = ("Drakia - wikipedia <H1> Drakia </H1> <Table> <Tr> <Th> Name </Th> <Th> Area </Th> </Tr> "
              "<Tr> <Td> Ostel </Td> <Td> 1,200 </Td> </Tr> </Table> "
              "<Table> <Tr> <Th> Total area </Th> <Td> 215,842 square kilometres </Td> </Tr> </Table> "
              "<P> The largest lake in Vemoria is Lake Sorel . The largest lake in Drakia is Lake Grukva . </P>")


def table_record(question: str) -> tuple:
    r = answer(parse_example(json.dumps(nq_line(question=question, document=TABLE_PAGE))))
    start, end = map(int, r["raw_short"].split(":"))
    return r, " ".join(TABLE_PAGE.split(" ")[start:end])


def test_a_table_row_answers_with_its_value_cell_and_a_header_row_with_nothing():
    # The row names no subject (the table is the page's own), its first cell names what it states;
    # the column header "Area" shares the question's word but states no value.
    r, short = table_record("what is the total area of drakia")
    assert short == "215,842 square kilometres"
    assert TABLE_PAGE.split(" ")[int(r["raw_long"].split(":")[0])] == "<Table>"
    assert r["raw_long"] != f"{TABLE_PAGE.split(' ').index('<Table>')}:{TABLE_PAGE.split(' ').index('</Table>') + 1}"


def test_a_value_keeps_its_capitalised_question_word():
    assert table_record("what is the largest lake in drakia")[1] == "Lake Grukva"


def test_bm25_picks_the_candidate_closest_to_the_question_and_gives_no_short_answer(tmp_path):
    """The retrieval reference: candidates ranked by BM25 on words stemmed to 6 letters, the page title's
    words aside; the best is the long answer, never a short one."""
    from solution.model.references import bm25_answer

    doc = ("Vemoria <H1> Vemoria </H1> <P> The rivers of Vemoria are long and wide . </P> "
           "<P> Vemoria was established by the founders in 1850 . </P> <P> The weather is mild . </P>")
    path = write_jsonl(tmp_path / "d.jsonl", [nq_line(example_id="5", question="who founded vemoria", document=doc)])
    ex = next(read_examples(str(path)))
    record = bm25_answer(ex)
    second = [c for c in ex.candidates if c.top_level][1]
    assert record["raw_long"] == f"{second.start_token}:{second.end_token}"  # "founders" ~ "founded"
    assert record["raw_short"] == "" and record["score"] > 0
    stop_only = write_jsonl(tmp_path / "t.jsonl", [nq_line(example_id="6", question="who is it", document=doc)])
    assert bm25_answer(next(read_examples(str(stop_only))))["raw_long"] == ""  # no content word asked: blank


def test_the_command_refuses_its_input_as_output_reports_skips_and_checks_the_folder_first(tmp_path, capsys):
    from conftest import write_jsonl

    from solution import lexical

    data = write_jsonl(tmp_path / "dev.jsonl", [nq_line(example_id=str(i), document=PAGE) for i in range(3)])
    before = data.read_text()
    assert lexical.main(["--input", str(data), "--scores-out", str(data)]) == 2
    err = capsys.readouterr().err
    assert err == f"error: --scores-out {data} is the same file as --input {data}; write it elsewhere\n"
    assert data.read_text() == before
    missing = tmp_path / "no" / "scores.jsonl"
    assert lexical.main(["--input", str(data), "--scores-out", str(missing)]) == 2
    assert capsys.readouterr().err == f"error: --scores-out {missing}: folder {missing.parent} does not exist\n"
    with open(data, "a") as f:
        f.write("{not json\n")
    out = tmp_path / "scores.jsonl"
    assert lexical.main(["--input", str(data), "--scores-out", str(out), "--on-error", "skip"]) == 1
    err = capsys.readouterr().err
    assert "WARNING: " in err and "3 examples, SKIPPED 1 bad lines" in err
    assert len(out.read_text().splitlines()) == 3
