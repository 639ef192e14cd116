"""Read Kaggle simplified Natural Questions JSON lines, validated, as a stream.

One example per line (`.jsonl` or `.jsonl.gz`). The files reach 17 GB, so
nothing here holds more than one line at a time, except the set of
`example_id`s seen so far (for duplicate detection).

Every problem with a line raises `NQFormatError` naming the file, the line
number (1-based) and the field; with `on_error="skip"` the line is counted
under its reason in `ReadStats` instead, and the caller reports the counts.
Nothing is dropped silently.

This module is pure Python (no torch, no accelerate) so that `submission/`
can use it in an offline Kaggle kernel.
"""

from __future__ import annotations

import gzip
import re
import zlib
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Iterator, Optional

from solution.common.inputs import input_problem
from solution.common.jsonio import JsonError, loads

YES_NO_VALUES = ("NONE", "YES", "NO")
# The answer types of an annotation (`Annotation.answer_type`), the classes that splits are stratified by and
# synthetic corpora mixed by. NONE means the annotator found no answer in the whole document; the model's
# answer-type head (windows.ANSWER_TYPES) has UNKNOWN instead, "no answer in this window".
ANNOTATION_TYPES = ("NONE", "SHORT", "LONG", "YES", "NO")

# An HTML token of the simplified format: `<P>`, `</Table>`, `<Td_colspan="2">`.
_HTML_TAG = re.compile(r"^</?[A-Za-z][A-Za-z0-9]*(_\S*)?>$")


def is_html_token(token: str) -> bool:
    return bool(_HTML_TAG.match(token))


def nq_tokens(document_text: str) -> list:
    """The document's tokens numbered as NQ numbers them: split on single spaces, nothing else.

    A tab, a non-breaking space or U+2028 inside a token stays part of it, and a double
    space makes an empty token; `str.split()` would merge or split those and shift every
    later index away from the annotations' `start_token`/`end_token`."""
    return document_text.split(" ")


def is_text_token(token: str) -> bool:
    """A token that can hold answer text: not an HTML tag, not empty or whitespace only."""
    return token != "" and not token.isspace() and not _HTML_TAG.match(token)


class NQFormatError(ValueError):
    """A line that is not valid simplified-NQ. `str()` names file, line and field."""

    def __init__(self, path: str, line: int, field: str, message: str):
        self.path, self.line, self.field, self.reason = str(path), line, field, message
        super().__init__(f"{path}:{line}: field '{field}': {message}")


@dataclass(frozen=True)
class Span:
    start_token: int  # first NQ token (document_text split on single spaces), inclusive
    end_token: int  # exclusive

    def contains(self, other: "Span") -> bool:
        return self.start_token <= other.start_token and other.end_token <= self.end_token

    def as_prediction(self) -> str:
        return f"{self.start_token}:{self.end_token}"


@dataclass(frozen=True)
class Candidate(Span):
    top_level: bool = True


@dataclass(frozen=True)
class Annotation:
    long_answer: Optional[Span]  # None when the annotator chose no long answer
    candidate_index: int  # -1 when long_answer is None
    short_answers: tuple  # tuple[Span, ...]
    yes_no_answer: str  # NONE / YES / NO

    @property
    def answer_type(self) -> str:
        """The coarse class used for stratification and reporting: one of ANNOTATION_TYPES."""
        if self.yes_no_answer != "NONE":
            return self.yes_no_answer
        if self.short_answers:
            return "SHORT"
        if self.long_answer is not None:
            return "LONG"
        return "NONE"


@dataclass
class Example:
    example_id: str  # kept as text: 64-bit, may be negative, JSON int or string
    question_text: str
    document_text: str
    document_url: Optional[str]
    candidates: list  # list[Candidate]
    annotations: Optional[list]  # list[Annotation]; None in test files
    line: int = 0  # 1-based line in the source file, for messages

    _tokens: Optional[list] = field(default=None, repr=False, compare=False)

    @property
    def tokens(self) -> list:
        if self._tokens is None:
            self._tokens = nq_tokens(self.document_text)
        return self._tokens

    @property
    def answer_type(self) -> str:
        """Answer type of the training label (see `label_annotation`)."""
        ann = label_annotation(self)
        return ann.answer_type if ann is not None else "NONE"


def label_annotation(example: Example) -> Optional[Annotation]:
    """The annotation that training labels come from.

    Training files carry one annotation; five-way dev files carry several.
    We take the first annotation that has any answer, so a dev file used for
    training is not labelled "no answer" because one annotator of five
    abstained.
    """
    if not example.annotations:
        return None
    for ann in example.annotations:
        if ann.answer_type != "NONE":
            return ann
    return example.annotations[0]


@dataclass
class ReadStats:
    """What a reader saw: lines read, examples returned, skips by reason."""

    path: str = ""
    lines: int = 0
    examples: int = 0
    skipped: Counter = field(default_factory=Counter)
    first_errors: list = field(default_factory=list)  # a few messages, for the report
    skipped_ids: list = field(default_factory=list)  # (line, example_id or None) of every skipped line

    @property
    def num_skipped(self) -> int:
        return sum(self.skipped.values())

    def record(self, err: NQFormatError, text: str = "") -> None:
        self.skipped[f"{err.field}: {_reason_kind(err.reason)}"] += 1
        self.skipped_ids.append((err.line, recover_example_id(text)))
        if len(self.first_errors) < 5:
            self.first_errors.append(str(err))

    def report(self) -> str:
        if not self.num_skipped:
            return f"{self.path}: {self.examples} examples, none skipped"
        reasons = ", ".join(f"{k} x{v}" for k, v in self.skipped.most_common())
        return (
            f"{self.path}: {self.examples} examples, SKIPPED {self.num_skipped} bad lines ({reasons}); first: "
            + " | ".join(self.first_errors)
        )

    def as_dict(self) -> dict:
        return {"path": self.path, "lines": self.lines, "examples": self.examples,
                "skipped": self.num_skipped, "skipped_by_reason": dict(self.skipped)}


# The whole value only: 1.5 or "12,34" is no id (not 1, not 12), and the line's rows cannot be written.
_ID_IN_TEXT = re.compile(r'"example_id"\s*:\s*(?:"\s*(-?[0-9]{1,20})\s*"|(-?[0-9]{1,20})(?=\s*[,}]))')


def recover_example_id(text: str) -> Optional[str]:
    """The example_id of a line that failed validation, if one can still be read from it.

    Lets the submission write blank rows for a document it could not parse (malformed JSON
    included: the id is looked for in the raw text), so no id goes missing from the CSV."""
    match = _ID_IN_TEXT.search(text or "")
    return (match.group(1) or match.group(2)) if match else None


def _reason_kind(reason: str) -> str:
    # Group messages by their wording before any number, so counts aggregate.
    return re.split(r"\s[-0-9(]|\(", reason, maxsplit=1)[0].strip()


_GZIP_MAGIC = b"\x1f\x8b"
_UTF8_BOM = b"\xef\xbb\xbf"


def open_binary(path):
    """Open `.jsonl` or `.jsonl.gz` as a stream of bytes.

    A file not named `.gz` that really is gzip (it starts with gzip's magic bytes and decompresses)
    is refused by name: read as text it would fail on line 1 with a UTF-8 or JSON error that hides
    the real problem. A text line that merely starts with those two bytes is not gzip: it fails on
    its own, as any bad line does (and `on_error: skip` counts it)."""
    path = str(path)
    if path.endswith(".gz"):
        return gzip.open(path, "rb")
    f = open(path, "rb")
    if f.peek(2)[:2] == _GZIP_MAGIC and _decompresses(path):
        f.close()
        raise NQFormatError(path, 1, "<file>", f"this file is gzip-compressed; name it {Path(path).name}.gz")
    return f


def _decompresses(path: str) -> bool:
    try:
        with gzip.open(path, "rb") as g:
            g.read(1)
        return True
    except (OSError, EOFError, zlib.error):  # gzip.BadGzipFile is an OSError
        return False


def _gzip_lines(raw) -> Iterator[bytes]:
    """The lines of a gzip stream (every member), each as soon as it is whole: where the stream is cut or
    damaged, the lines before the damage have come out and the error is raised (gzip.open's buffered reader
    loses the last block's lines with it). Decompressed 16 MiB at a time, whatever the ratio."""
    d, pending = None, b""
    while block := raw.read(1 << 20):
        while block:
            if d is None or d.eof:  # the first member, or the next one after a member's end
                d = zlib.decompressobj(16 + zlib.MAX_WBITS)
            pending += d.decompress(block, 1 << 24)
            block = d.unused_data if d.eof else d.unconsumed_tail
            if b"\n" in pending:
                *lines, pending = pending.split(b"\n")
                for line in lines:
                    yield line + b"\n"
    if d is not None and not d.eof:
        raise EOFError("Compressed file ended before the end-of-stream marker was reached")
    if pending:
        yield pending


def check_input_file(path) -> None:
    """A regular file to read (`fsutil.input_problem`): standard input (`-`, `/dev/stdin`), another pipe, a
    device or a folder is a ValueError saying so (a file is read by name, and some commands read it twice);
    a missing one FileNotFoundError."""
    problem = input_problem(path)
    if problem:
        error = FileNotFoundError if problem.startswith("no such") else ValueError
        raise error(f"{path}: {problem}")


def iter_lines(path, bad_bytes: str = "raise") -> Iterator[tuple]:
    """Yield (line_number, text) with I/O and decoding faults turned into NQFormatError.

    Lines are decoded one at a time, so a bad byte is reported on its own
    line. A truncated `.gz` stops the file: nothing after that point can be
    read, so it is never skipped. Bytes that are not UTF-8 raise, or with
    bad_bytes="mark" yield (line_number, NQFormatError, text decoded with
    replacement characters) so the caller can skip that line alone (JSON
    lines are independent: the next line is intact).
    """
    path = str(path)
    check_input_file(path)
    line_no = 0
    with open(path, "rb") if path.endswith(".gz") else open_binary(path) as f:
        source = _gzip_lines(f) if path.endswith(".gz") else iter(f.readline, b"")
        while True:
            try:
                raw = next(source)
            except StopIteration:
                break
            except (EOFError, gzip.BadGzipFile, zlib.error, OSError) as e:
                raise NQFormatError(path, line_no + 1, "<gzip>", f"compressed stream is damaged or truncated ({e})") from None
            line_no += 1
            if line_no == 1 and raw.startswith(_UTF8_BOM):
                raw = raw[len(_UTF8_BOM):]  # a UTF-8 BOM (Windows editors write one): not part of the JSON
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError as e:
                err = NQFormatError(path, line_no, "<bytes>", f"not UTF-8 ({e.reason} at byte {e.start})")
                if bad_bytes != "mark":
                    raise err from None
                yield line_no, err, raw.decode("utf-8", "replace")
                continue
            yield line_no, text


def read_examples(path, on_error: str = "raise", stats: Optional[ReadStats] = None,
                  require_annotations: bool = False, shard: tuple = (0, 1), max_lines: Optional[int] = None,
                  check_duplicates: bool = True) -> Iterator[Example]:
    """Stream validated examples from a simplified-NQ file.

    on_error: "raise" (default) stops at the first bad line with an error
    naming file, line and field; "skip" counts it in `stats` and goes on.
    require_annotations: training and gold files must carry `annotations`.
    shard=(k, n): only lines k, k+n, k+2n, ... (0-based) are parsed, so n
    processes can share a file; with max_lines every worker stops at the
    same line. Duplicate ids are then
    only visible across workers, which is the caller's to check
    (check_duplicates=False).
    """
    if on_error not in ("raise", "skip"):
        raise ValueError(f"on_error must be 'raise' or 'skip', got {on_error!r}")
    stats = stats if stats is not None else ReadStats()
    stats.path = str(path)
    k, n = shard
    seen_ids: set = set()
    for line_no, text, *replaced in iter_lines(path, bad_bytes="mark" if on_error == "skip" else "raise"):
        if max_lines is not None and line_no > max_lines:
            break
        stats.lines += 1
        if (line_no - 1) % n != k or (not replaced and not text.strip()):
            continue  # another worker's line, or a blank line (often the last one)
        try:
            if replaced:  # bytes that are not UTF-8 (only with on_error skip)
                err, text = text, replaced[0]
                raise err
            ex = parse_example(text, str(path), line_no, require_annotations)
            if check_duplicates:
                if ex.example_id in seen_ids:
                    raise NQFormatError(path, line_no, "example_id", f"duplicate example_id {ex.example_id}")
                seen_ids.add(ex.example_id)
        except NQFormatError as err:
            if on_error == "raise":
                raise
            stats.record(err, text)
            continue
        stats.examples += 1
        yield ex
    if n == 1 and stats.examples == 0 and stats.num_skipped == 0:
        raise NQFormatError(path, stats.lines, "<file>", "the file holds no examples")


def batches_until_error(examples: Iterable, size: int) -> Iterator[list]:
    """Lists of `size` examples (the last one shorter). When reading fails (a truncated .gz), the examples
    read before it come as a last list, then the error is raised: those documents keep their answers."""
    chunk: list = []
    try:
        for ex in examples:
            chunk.append(ex)
            if len(chunk) == size:
                yield chunk
                chunk = []
    except Exception:
        if chunk:
            yield chunk
        raise
    if chunk:
        yield chunk


def parse_example(text: str, path: str = "<string>", line: int = 1, require_annotations: bool = False) -> Example:
    """Parse and validate one JSON line."""
    def fail(fld: str, msg: str):
        raise NQFormatError(path, line, fld, msg)

    try:
        obj = loads(text, "<json>", bounded_ints=False)  # every integer is checked below against its document
    except JsonError as e:  # "<json>: what is wrong": the file and line are NQFormatError's to give
        fail("<json>", f"malformed JSON: {str(e).removeprefix('<json>: ')}")
    if not isinstance(obj, dict):
        fail("<json>", f"expected a JSON object, got {type(obj).__name__}")

    example_id = _example_id(obj, fail)
    question = _required(obj, "question_text", str, fail)
    if not question.strip():
        fail("question_text", "empty question")
    document = _required(obj, "document_text", str, fail)
    if not document.strip():
        fail("document_text", "empty document")
    tokens = nq_tokens(document)
    num_tokens = len(tokens)
    url = obj.get("document_url")
    if url is not None and not isinstance(url, str):
        fail("document_url", f"expected a string, got {type(url).__name__}")

    _required(obj, "long_answer_candidates", list, fail)
    candidates = []
    for where, c, span in _span_list(obj, "long_answer_candidates", "long_answer_candidates", num_tokens, fail):
        top = c.get("top_level", True)
        if not isinstance(top, bool):
            fail(f"{where}.top_level", f"expected true/false, got {top!r}")
        candidates.append(Candidate(span.start_token, span.end_token, top))

    annotations = None
    if "annotations" in obj:
        raw_anns = obj["annotations"]
        if not isinstance(raw_anns, list):
            fail("annotations", f"expected a list, got {type(raw_anns).__name__}")
        annotations = [_annotation(a, f"annotations[{i}]", candidates, num_tokens, fail)
                       for i, a in enumerate(raw_anns)]
    elif require_annotations:
        fail("annotations", "missing (training and gold files need annotations)")

    ex = Example(example_id, question, document, url, candidates, annotations, line)
    ex._tokens = tokens
    return ex


def _example_id(obj: dict, fail) -> str:
    if "example_id" not in obj:
        fail("example_id", "missing")
    raw = obj["example_id"]
    # bool is an int subclass in Python; `true` is not an id.
    if isinstance(raw, bool) or not isinstance(raw, (int, str)):
        fail("example_id", f"expected a 64-bit integer (number or string), got {type(raw).__name__}")
    text = str(raw).strip()
    if not re.fullmatch(r"-?[0-9]+", text):
        fail("example_id", f"expected a 64-bit integer, got {raw!r}")
    if not -(2 ** 63) <= int(text) < 2 ** 64:
        fail("example_id", f"out of the 64-bit range: {text}")
    return text


def _required(obj: dict, name: str, typ, fail):
    if name not in obj:
        fail(name, "missing")
    value = obj[name]
    if not isinstance(value, typ):
        fail(name, f"expected {typ.__name__}, got {type(value).__name__}")
    return value


def _int(d: dict, key: str, where: str, fail) -> int:
    if key not in d:
        fail(f"{where}.{key}", "missing")
    v = d[key]
    if isinstance(v, bool) or not isinstance(v, int):
        fail(f"{where}.{key}", f"expected an integer, got {v!r}")
    return v


def _span(d: dict, where: str, num_tokens: int, fail) -> Span:
    start, end = _int(d, "start_token", where, fail), _int(d, "end_token", where, fail)
    if start < 0 or end > num_tokens:
        fail(where, f"span {start}:{end} outside the document (0:{num_tokens})")
    if start >= end:
        fail(where, f"span {start}:{end} has start_token >= end_token")
    return Span(start, end)


def _span_list(obj: dict, key: str, where: str, num_tokens: int, fail) -> list:
    """[(field name, object, Span)] for a list of span objects; a missing list is empty."""
    items = obj.get(key, [])
    if not isinstance(items, list):
        fail(where, f"expected a list, got {type(items).__name__}")
    out = []
    for i, item in enumerate(items):
        name = f"{where}[{i}]"
        if not isinstance(item, dict):
            fail(name, f"expected an object, got {type(item).__name__}")
        out.append((name, item, _span(item, name, num_tokens, fail)))
    return out


def _annotation(a, where: str, candidates: list, num_tokens: int, fail) -> Annotation:
    if not isinstance(a, dict):
        fail(where, f"expected an object, got {type(a).__name__}")
    la = a.get("long_answer")
    if not isinstance(la, dict):
        fail(f"{where}.long_answer", "missing or not an object")
    idx = _int(la, "candidate_index", f"{where}.long_answer", fail)
    start = _int(la, "start_token", f"{where}.long_answer", fail)
    end = _int(la, "end_token", f"{where}.long_answer", fail)
    if idx == -1:
        if (start, end) != (-1, -1):
            fail(f"{where}.long_answer", f"candidate_index is -1 but the span is {start}:{end}")
        long_answer = None
    else:
        if not 0 <= idx < len(candidates):
            fail(f"{where}.long_answer.candidate_index",
                 f"{idx} is not a candidate index (the document has {len(candidates)})")
        long_answer = _span(la, f"{where}.long_answer", num_tokens, fail)
        cand = candidates[idx]
        if (cand.start_token, cand.end_token) != (start, end):
            fail(f"{where}.long_answer.candidate_index",
                 f"candidate {idx} is {cand.start_token}:{cand.end_token} but the long answer is {start}:{end}")

    shorts = []
    for sw, _, span in _span_list(a, "short_answers", f"{where}.short_answers", num_tokens, fail):
        if long_answer is None:
            fail(sw, "a short answer without a long answer")
        if not long_answer.contains(span):
            fail(sw, f"span {span.start_token}:{span.end_token} lies outside its long answer "
                     f"{long_answer.start_token}:{long_answer.end_token}")
        shorts.append(span)

    yes_no = a.get("yes_no_answer", "NONE")
    if yes_no not in YES_NO_VALUES:
        fail(f"{where}.yes_no_answer", f"expected one of {', '.join(YES_NO_VALUES)}, got {yes_no!r}")
    if yes_no != "NONE" and long_answer is None:
        fail(f"{where}.yes_no_answer", f"{yes_no} without a long answer")
    return Annotation(long_answer, idx, tuple(shorts), yes_no)


def candidate_array(example: Example):
    """int [num_candidates, 5]: start, end, top_level, first text token, last text token (-1 if none).

    A text token is neither a tag nor empty/whitespace only (those give no word pieces). Post-processing
    scores a candidate from its first to its last text token. numpy is imported here, not at the top:
    the metric's command line reads NQ files without it."""
    import numpy as np

    toks = example.tokens
    rows = []
    for c in example.candidates:
        first = next((i for i in range(c.start_token, c.end_token) if is_text_token(toks[i])), -1)
        last = -1
        if first >= 0:
            last = next(i for i in range(c.end_token - 1, first - 1, -1) if is_text_token(toks[i]))
        rows.append((c.start_token, c.end_token, int(c.top_level), first, last))
    return np.asarray(rows, dtype=np.int64).reshape(-1, 5)


def containing_candidate(candidates, start: int, end: int, top_level_only: bool = False) -> int:
    """The candidate (a row index of `candidate_array`'s array) that holds NQ span [start, end): top-level
    first, else the smallest (never a nested one with `top_level_only`); -1 if none.

    Gold long answers are nearly always top-level (50 of 52 in the real NQ sample).
    """
    import numpy as np  # here, as in candidate_array: reading lines needs no numpy

    if len(candidates) == 0:
        return -1
    holds = (candidates[:, 0] <= start) & (end <= candidates[:, 1])
    if not holds.any():
        return -1
    top = np.nonzero(holds & (candidates[:, 2] == 1))[0]
    if len(top):
        return int(top[0])
    if top_level_only:
        return -1
    idx = np.nonzero(holds)[0]
    sizes = candidates[idx, 1] - candidates[idx, 0]
    return int(idx[int(np.argmin(sizes))])
