"""`solution.corpus_stats`' page and question shape rows (SHAPE_ROWS) on hand-made lines with known figures."""

from conftest import nq_line, write_jsonl

from solution import corpus_stats
from solution.scoring import corpus_figures

DOC = ("Vemoria - wikipedia <H1> Vemoria </H1> <Table> <Tr> <Td> Capital </Td> <Td> Drel </Td> </Tr> </Table> "
       "<P> Vemoria is a small kingdom on the Kessa Sea . </P> <P> The capital of Vemoria is Drel since 1204 . </P> "
       "<P> The capital of Telenia is Tarsk , a town of 4,000 people . </P>")
# Top-level candidates in order: 0 Table (with 1 Tr inside), 2 P lead, 3 P Drel, 4 P Tarsk.


def test_sentence_shape_takes_out_what_differs_between_pages():
    words = "The capital of Vemoria is Drel Tarsk since 1204 .".split()
    assert corpus_figures.sentence_shape(words, frozenset({"vemoria"})) == "the capital of T is N since 0 ."


def test_shape_rows_on_hand_made_lines(tmp_path):
    lines = [nq_line("1", "is tarsk the capital of vemoria", DOC, long=3, yes_no="NO"),  # Tarsk is on the page
             nq_line("2", "is brel the capital of vemoria", DOC, long=3, yes_no="NO"),  # Brel is not
             nq_line("3", "would drel be the capital of vemoria", DOC, long=3, yes_no="YES"),  # "would" frames it
             nq_line("4", "what is the capital of vemoria", DOC, long=0),  # the infobox: the first candidate
             nq_line("5", "kessa sea kingdom", DOC, long=2)]  # the lead paragraph; no title word
    f = corpus_stats.corpus_figures([write_jsonl(tmp_path / "shape.jsonl", lines)])
    # ranks of 4 top-level candidates: 2, 2, 2, 0, 1 -> fractions 0.5, 0.5, 0.5, 0, 0.25
    assert f["gold_position_median"] == 0.5 and f["position_documents"] == 5
    assert f["gold_position_first_tenth_share"] == 0.2 and f["gold_first_candidate_share"] == 0.2
    assert f["first_paragraph_gold_share"] == 0.2  # line 5: the lead is the first top-level <P>
    assert f["question_names_subject_share"] == 0.8 and f["subject_documents"] == 5
    # the three sentences of 6 words or more have the same shapes on all five pages
    assert f["repeated_shape_share"] == 1.0 and f["shape_pages"] == 5
    assert (f["no_question_words_on_page_share"], f["no_documents"]) == (0.5, 2)
    assert (f["yes_question_words_on_page_share"], f["yes_documents"]) == (1.0, 1)
    table = corpus_stats.format_shape(f)
    assert "| share of questions holding a word of the page's title | 0.80 | 5 |" in table
