"""The reader: valid lines parse exactly; every bad line names file, line and field, or is a counted skip."""

import gzip
import json

import pytest
from conftest import nq_line, real_nq, write_jsonl

from solution.data.nq import NQFormatError, ReadStats, is_html_token, parse_example, read_examples


def test_parses_fields_and_keeps_ids_as_text(tmp_path):
    big = "-9223372036854775808"
    path = write_jsonl(tmp_path / "a.jsonl", [
        json.dumps(nq_line(long=0, shorts=[(12, 14)])).replace('"-123"', big),  # a JSON integer id
        nq_line(example_id="17", annotations=False, url=None),  # test-file shape
    ])
    a, b = list(read_examples(path))
    assert a.example_id == big and b.example_id == "17"
    assert a.tokens[12:14] == ["Ann", "Smith"]
    ann = a.annotations[0]
    assert ann.answer_type == "SHORT" and ann.long_answer.start_token == 6 and ann.candidate_index == 0
    assert b.annotations is None and b.document_url is None
    assert [c.top_level for c in a.candidates] == [True, True, False, False, True]


def test_reads_gzip_stream(tmp_path):
    path = tmp_path / "a.jsonl.gz"
    with gzip.open(path, "wt") as f:
        for i in range(3):
            f.write(json.dumps(nq_line(example_id=str(i))) + "\n")
    assert [e.example_id for e in read_examples(path)] == ["0", "1", "2"]


def test_html_tokens():
    assert all(map(is_html_token, ["<P>", "</Table>", '<Td_colspan="2">', "<H2>"]))
    assert not any(map(is_html_token, ["<", "a<b>", "x", "<>", "<3"]))


def _mutate(**changes):
    obj = nq_line(long=0, shorts=[(12, 14)])
    for path, value in changes.items():
        target = obj
        keys = path.split("__")
        for k in keys[:-1]:
            target = target[int(k)] if isinstance(target, list) else target[k]
        last = keys[-1]
        if value is KeyError:
            del target[last]
        elif isinstance(target, list):
            target[int(last)] = value
        else:
            target[last] = value
    return json.dumps(obj)


BAD_LINES = [
    ("{not json", "<json>", "malformed JSON"),
    ("[1, 2]", "<json>", "expected a JSON object"),
    (_mutate(example_id=KeyError), "example_id", "missing"),
    (_mutate(example_id="12a"), "example_id", "64-bit"),
    (_mutate(example_id=True), "example_id", "64-bit"),
    (_mutate(example_id=str(2 ** 64)), "example_id", "out of the 64-bit range"),
    (_mutate(question_text=5), "question_text", "expected str"),
    (_mutate(question_text="  "), "question_text", "empty question"),
    (_mutate(document_text=""), "document_text", "empty document"),
    (_mutate(document_text=KeyError), "document_text", "missing"),
    (_mutate(document_url=3), "document_url", "expected a string"),
    (_mutate(long_answer_candidates={}), "long_answer_candidates", "expected list"),
    (_mutate(long_answer_candidates__1__end_token=999), "long_answer_candidates[1]", "outside the document"),
    (_mutate(long_answer_candidates__1__start_token=30), "long_answer_candidates[1]", "start_token >= end_token"),
    (_mutate(long_answer_candidates__1__start_token="5"), "long_answer_candidates[1].start_token", "integer"),
    (_mutate(long_answer_candidates__1__top_level="yes"), "long_answer_candidates[1].top_level", "true/false"),
    (_mutate(annotations={}), "annotations", "expected a list"),
    (_mutate(annotations__0__long_answer__candidate_index=1), "annotations[0].long_answer.candidate_index",
     "candidate 1 is 18:28"),
    (_mutate(annotations__0__long_answer__candidate_index=40), "annotations[0].long_answer.candidate_index",
     "not a candidate index"),
    (_mutate(annotations__0__long_answer__candidate_index=-1), "annotations[0].long_answer", "candidate_index is -1"),
    (_mutate(annotations__0__short_answers__0={"start_token": 2, "end_token": 4}),
     "annotations[0].short_answers[0]", "outside its long answer"),
    (_mutate(annotations__0__short_answers__0={"start_token": 14, "end_token": 12}),
     "annotations[0].short_answers[0]", "start_token >= end_token"),
    (_mutate(annotations__0__short_answers__0={"start_token": 12, "end_token": 400}),
     "annotations[0].short_answers[0]", "outside the document"),
    (_mutate(annotations__0__yes_no_answer="MAYBE"), "annotations[0].yes_no_answer", "expected one of"),
]


@pytest.mark.parametrize("line,field,words", BAD_LINES)
def test_bad_line_names_file_line_and_field(tmp_path, line, field, words):
    path = write_jsonl(tmp_path / "bad.jsonl", [nq_line(example_id="1"), line])
    with pytest.raises(NQFormatError) as info:
        list(read_examples(path))
    err = info.value
    assert (err.path, err.line, err.field) == (str(path), 2, field)
    assert words in str(err) and f"{path}:2: field '{field}'" in str(err)


def test_skip_mode_counts_and_reports(tmp_path):
    lines = [nq_line(example_id="1")] + [bad for bad, _, _ in BAD_LINES] + [nq_line(example_id="2")]
    path = write_jsonl(tmp_path / "bad.jsonl", lines)
    stats = ReadStats()
    got = [e.example_id for e in read_examples(path, on_error="skip", stats=stats)]
    assert got == ["1", "2"]
    assert stats.num_skipped == len(BAD_LINES) and stats.examples == 2
    assert "SKIPPED" in stats.report() and "bad.jsonl:2" in stats.report()


def test_duplicate_ids_and_missing_annotations(tmp_path):
    path = write_jsonl(tmp_path / "dup.jsonl", [nq_line(example_id="5"), nq_line(example_id="5")])
    with pytest.raises(NQFormatError, match=r"dup.jsonl:2: field 'example_id': duplicate example_id 5"):
        list(read_examples(path))
    path = write_jsonl(tmp_path / "test.jsonl", [nq_line(annotations=False)])
    with pytest.raises(NQFormatError, match="annotations"):
        list(read_examples(path, require_annotations=True))


def test_empty_file_truncated_gzip_and_bad_bytes(tmp_path):
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    with pytest.raises(NQFormatError, match="no examples"):
        list(read_examples(empty))
    gz = tmp_path / "cut.jsonl.gz"
    gz.write_bytes(gzip.compress(("\n".join(json.dumps(nq_line(example_id=str(i))) for i in range(50))).encode())[:-30])
    with pytest.raises(NQFormatError, match="<gzip>.*damaged or truncated"):
        list(read_examples(gz))
    latin = tmp_path / "latin.jsonl"
    latin.write_bytes(json.dumps(nq_line()).encode() + b"\n" + "caf\u00e9".encode("latin-1") + b"\n")
    with pytest.raises(NQFormatError, match=r"latin.jsonl:2: field '<bytes>': not UTF-8"):
        list(read_examples(latin))
    with pytest.raises(FileNotFoundError, match="nope.jsonl"):
        list(read_examples(tmp_path / "nope.jsonl"))


def test_real_nq_lines_parse():
    for name, n in [("simplified-nq-train-sample.jsonl", 49), ("simplified-nq-dev-sample.jsonl", 10),
                    ("simplified-nq-test-sample.jsonl", 1)]:
        examples = list(read_examples(real_nq(name)))
        assert len(examples) == n
    assert all(len(e.annotations) == 5 for e in read_examples(real_nq("simplified-nq-dev-sample.jsonl")))


def test_parse_example_direct():
    ex = parse_example(json.dumps(nq_line(long=0, yes_no="YES")))
    assert ex.answer_type == "YES"


def test_tokens_are_numbered_as_nq_numbers_them():
    # NQ splits document_text on single spaces: a tab, a non-breaking space or U+2028 stays inside
    # its token, and a double space makes an empty token. Spans are validated against that count.
    doc = "T <P> a\tb c\u00a0d  e\u2028f Ann Smith </P>"
    toks = doc.split(" ")
    assert len(toks) == 9 and len(doc.split()) == 11
    cands = [{"start_token": 1, "end_token": 9, "top_level": True}]
    ex = parse_example(json.dumps(nq_line(document=doc, candidates=cands, long=0, shorts=[(6, 8)])))
    assert ex.tokens == toks and ex.tokens[6:8] == ["Ann", "Smith"]
    assert ex.tokens[2] == "a\tb" and ex.tokens[4] == ""
    with pytest.raises(NQFormatError, match=r"span 1:10 outside the document \(0:9\)"):
        parse_example(json.dumps(nq_line(document=doc, candidates=[{"start_token": 1, "end_token": 10}])))
    with pytest.raises(NQFormatError, match="empty document"):
        parse_example(json.dumps(nq_line(document=" \t ", candidates=[])))


def test_utf8_bom_at_the_start_is_accepted(tmp_path):
    lines = "".join(json.dumps(nq_line(example_id=str(i))) + "\n" for i in range(2)).encode()
    plain = tmp_path / "bom.jsonl"
    plain.write_bytes(b"\xef\xbb\xbf" + lines)
    packed = tmp_path / "bom.jsonl.gz"
    packed.write_bytes(gzip.compress(b"\xef\xbb\xbf" + lines))
    for path in (plain, packed):
        assert [e.example_id for e in read_examples(path)] == ["0", "1"]
    # Only at the very start: a BOM on a later line is not whitespace JSON accepts.
    later = tmp_path / "later.jsonl"
    later.write_bytes(lines + b"\xef\xbb\xbf" + json.dumps(nq_line(example_id="9")).encode() + b"\n")
    with pytest.raises(NQFormatError, match=r"later.jsonl:3: field '<json>'"):
        list(read_examples(later))


def test_gzip_file_named_jsonl_says_so(tmp_path, capsys):
    from solution import evaluate

    path = tmp_path / "data.jsonl"
    path.write_bytes(gzip.compress((json.dumps(nq_line()) + "\n").encode()))
    with pytest.raises(NQFormatError, match=r"data.jsonl:1: .*this file is gzip-compressed; name it data.jsonl.gz"):
        list(read_examples(path))
    csv = tmp_path / "s.csv"
    csv.write_text("example_id,PredictionString\n-123_long,\n-123_short,\n")
    assert evaluate.main(["--validate", str(csv), "--test", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "gzip-compressed" in err and "Traceback" not in err


def test_a_text_line_that_starts_with_gzips_magic_bytes_is_a_bad_line_not_a_gzip_file(tmp_path):
    """Found by the mutation test: b"\\x1f\\x8b" then JSON is no gzip stream. It fails on its own line
    (and on_error skip counts it), instead of the whole file being refused as compressed."""
    path = tmp_path / "m.jsonl"
    path.write_bytes(b"\x1f\x8b" + json.dumps(nq_line()).encode() + b"\n")
    with pytest.raises(NQFormatError) as err:
        list(read_examples(path))
    assert err.value.line == 1 and "gzip-compressed" not in str(err.value)
    stats = ReadStats()
    assert list(read_examples(path, on_error="skip", stats=stats)) == [] and stats.num_skipped == 1
