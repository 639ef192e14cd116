"""Documents -> fixed-size model windows with labels and a map back to NQ tokens.

A window is `[CLS] question [SEP] document slice [SEP]`. The document is
tokenised once as a list of words (NQ's whitespace tokens with the HTML tags
left out: they carry layout, not answers, and `<Td_colspan="2">` alone costs
a dozen word pieces), and windows are numpy slices of that single encoding,
so featurising costs about one pass of the fast tokenizer.

Every window keeps `nq_token_index`: for each position, the NQ whitespace
token it came from (-1 for question, special and padding positions). That is
all prediction needs to turn a start/end position back into an NQ span.

Labels follow the BERT-joint baseline (Alberti et al., 2019): a window whose
span lies fully inside it is labelled with that span and the example's
answer type; every other window points at [CLS] with type UNKNOWN.

Imports only numpy and the tokenizer: `submission/` uses it in a Kaggle
kernel with no extra packages.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass
from typing import Iterable, Iterator, Optional

import numpy as np

from solution.nq import Example, Span, is_html_token, label_annotation

# The answer-type head's classes, in the order of its logits.
ANSWER_TYPES = ("UNKNOWN", "YES", "NO", "SHORT", "LONG")
TYPE_ID = {name: i for i, name in enumerate(ANSWER_TYPES)}


@dataclass
class WindowConfig:
    """How documents are cut into windows. Saved with the model, so inference cuts them the same way."""

    max_seq_length: int = 512
    """Tokens per window, [CLS] question [SEP] document [SEP] included."""
    doc_stride: int = 128
    """Document tokens shared by consecutive windows (the Hugging Face meaning of `stride`)."""
    max_question_length: int = 64
    """Question tokens kept; longer questions are truncated."""

    def __post_init__(self):
        if self.max_question_length < 1:
            raise ValueError(f"max_question_length must be >= 1, got {self.max_question_length}")
        capacity = self.max_seq_length - self.max_question_length - 3
        if capacity < 8:
            raise ValueError(
                f"max_seq_length {self.max_seq_length} leaves {capacity} document tokens after a "
                f"{self.max_question_length}-token question; raise max_seq_length or lower max_question_length")
        if not 0 <= self.doc_stride < capacity:
            raise ValueError(f"doc_stride must be in [0, {capacity}) for these lengths, got {self.doc_stride}")


@dataclass
class Window:
    """One model input. Arrays are unpadded (length <= max_seq_length)."""

    example_id: str
    window_index: int
    input_ids: np.ndarray  # int32 [seq]
    token_type_ids: np.ndarray  # int8 [seq]: 0 question side, 1 document side
    nq_token_index: np.ndarray  # int32 [seq]: NQ token of each position, -1 where none
    start_position: int = 0  # label: position of the first answer token, 0 ([CLS]) when none
    end_position: int = 0
    answer_type: int = 0  # index into ANSWER_TYPES
    doc_start: int = 0  # index of the window's first document piece in the document's piece sequence

    def as_dict(self) -> dict:
        return {"example_id": self.example_id, "window_index": self.window_index,
                "input_ids": self.input_ids, "token_type_ids": self.token_type_ids,
                "nq_token_index": self.nq_token_index, "start_positions": self.start_position,
                "end_positions": self.end_position, "answer_type": self.answer_type}


@dataclass
class DocumentEncoding:
    """The document tokenised once: word pieces and the NQ token each came from."""

    input_ids: np.ndarray  # int32 [num_pieces]
    nq_token_index: np.ndarray  # int32 [num_pieces]


class Featurizer:
    """Cuts examples into windows with a Hugging Face fast tokenizer."""

    def __init__(self, tokenizer, config: WindowConfig):
        if not getattr(tokenizer, "is_fast", False):
            raise ValueError(f"{type(tokenizer).__name__} is not a fast tokenizer; windows need word ids "
                             "(load it with use_fast=True)")
        if tokenizer.cls_token_id is None or tokenizer.sep_token_id is None:
            raise ValueError(f"{type(tokenizer).__name__} has no [CLS]/[SEP] tokens; a BERT-style encoder is needed")
        self.tokenizer = tokenizer
        self.config = config
        # Whole documents are tokenised on purpose (windows are cut afterwards), so
        # the tokenizer's "longer than the maximum sequence length" warning is noise.
        if hasattr(tokenizer, "deprecation_warnings"):
            tokenizer.deprecation_warnings["sequence-length-is-longer-than-the-specified-maximum"] = True

    # -- tokenising -------------------------------------------------------
    def encode_documents(self, examples: list) -> list:
        """Tokenise a batch of documents in one call (the fast tokenizer parallelises a batch)."""
        kept = []  # per example: NQ indices of the non-HTML tokens
        words = []
        for ex in examples:
            idx = [i for i, t in enumerate(ex.tokens) if not is_html_token(t)]
            kept.append(np.asarray(idx, dtype=np.int32))
            # An all-HTML document still gets one (empty) word so the batch keeps its shape.
            words.append([ex.tokens[i] for i in idx] or [""])
        enc = self.tokenizer(words, is_split_into_words=True, add_special_tokens=False,
                             return_attention_mask=False, return_token_type_ids=False)
        out = []
        for k, idx in enumerate(kept):
            word_ids = enc.encodings[k].word_ids
            ids = np.asarray(enc.encodings[k].ids, dtype=np.int32)
            if len(idx) == 0:
                out.append(DocumentEncoding(ids[:0], np.zeros(0, dtype=np.int32)))
                continue
            # word_ids is a list of ints (no None: no special tokens were added).
            out.append(DocumentEncoding(ids, idx[np.asarray(word_ids, dtype=np.int64)]))
        return out

    def encode_questions(self, examples: list) -> list:
        enc = self.tokenizer([ex.question_text for ex in examples], add_special_tokens=False,
                             truncation=True, max_length=self.config.max_question_length,
                             return_attention_mask=False, return_token_type_ids=False)
        return [np.asarray(ids, dtype=np.int32) for ids in enc["input_ids"]]

    # -- windows ------------------------------------------------------------
    def windows(self, example: Example, doc: DocumentEncoding, question_ids: np.ndarray,
                with_labels: bool) -> list:
        """All windows of one example, labelled when `with_labels`."""
        cfg = self.config
        q_len = len(question_ids)
        capacity = cfg.max_seq_length - q_len - 3
        step = capacity - cfg.doc_stride
        n = len(doc.input_ids)
        starts = [0]
        while starts[-1] + capacity < n:
            starts.append(starts[-1] + step)

        target = answer_target(example, doc) if with_labels else None
        head = np.concatenate([[self.tokenizer.cls_token_id], question_ids, [self.tokenizer.sep_token_id]])
        offset = len(head)  # position of the first document piece in every window
        out = []
        for w, s in enumerate(starts):
            e = min(s + capacity, n)
            ids = np.concatenate([head, doc.input_ids[s:e], [self.tokenizer.sep_token_id]]).astype(np.int32)
            types = np.zeros(len(ids), dtype=np.int8)
            types[offset:] = 1
            nq_idx = np.full(len(ids), -1, dtype=np.int32)
            nq_idx[offset:offset + (e - s)] = doc.nq_token_index[s:e]
            win = Window(example.example_id, w, ids, types, nq_idx, doc_start=s)
            if target is not None:
                type_id, p0, p1 = target
                if s <= p0 and p1 < e:
                    win.start_position, win.end_position = p0 - s + offset, p1 - s + offset
                    win.answer_type = type_id
            out.append(win)
        return out

    def featurize(self, examples: Iterable[Example], with_labels: bool, batch_size: int = 32,
                  isolate_errors: bool = False) -> Iterator[tuple]:
        """Yield (example, its windows), tokenising `batch_size` documents per tokenizer call.

        isolate_errors: a batch that fails is retried one document at a time, and a document that
        still fails is yielded as (example, the exception) instead of windows, so the others go on
        (the submission writes its rows blank)."""
        batch = []
        for ex in examples:
            batch.append(ex)
            if len(batch) == batch_size:
                yield from self._featurize_checked(batch, with_labels, isolate_errors)
                batch = []
        if batch:
            yield from self._featurize_checked(batch, with_labels, isolate_errors)

    def _featurize_checked(self, batch: list, with_labels: bool, isolate_errors: bool) -> Iterator[tuple]:
        if not isolate_errors:
            yield from self._featurize_batch(batch, with_labels)
            return
        try:
            done = list(self._featurize_batch(batch, with_labels))
        except Exception:
            done = []
            for ex in batch:
                try:
                    done += list(self._featurize_batch([ex], with_labels))
                except Exception as e:
                    done.append((ex, e))
        yield from done

    def _featurize_batch(self, batch: list, with_labels: bool) -> Iterator[tuple]:
        docs = self.encode_documents(batch)
        questions = self.encode_questions(batch)
        for ex, doc, q in zip(batch, docs, questions):
            yield ex, self.windows(ex, doc, q, with_labels)


def piece_span(doc: DocumentEncoding, span: Span) -> Optional[tuple]:
    """Word-piece positions (first, last; inclusive) covering an NQ span, None if it holds no text."""
    idx = doc.nq_token_index
    first = int(np.searchsorted(idx, span.start_token, side="left"))
    last = int(np.searchsorted(idx, span.end_token, side="left")) - 1
    if first > last:
        return None
    return first, last


def answer_target(example: Example, doc: DocumentEncoding) -> Optional[tuple]:
    """(answer type id, first piece, last piece) of the training label, or None for no answer.

    The span is the first short answer for SHORT (annotations with several
    short spans are rare and each span is a valid answer on its own), and
    the long answer for LONG, YES and NO, as in BERT-joint. A span whose
    tokens are all HTML cannot be pointed at and counts as no answer.
    """
    ann = label_annotation(example)
    if ann is None or ann.answer_type == "NONE":
        return None
    span = ann.short_answers[0] if ann.answer_type == "SHORT" else ann.long_answer
    pieces = piece_span(doc, span)
    if pieces is None:
        return None
    return (TYPE_ID[ann.answer_type], *pieces)


def keep_window(window: Window, rate: float, seed: int, weight: float = 1.0) -> bool:
    """Down-sample windows without an answer, deterministically.

    A window without an answer is kept with probability `rate * weight`
    (`weight` is 1 except in a hard-negative pass, see `solution.hard_negatives`).
    The draw depends only on (seed, example_id, window index), so the same
    windows are kept whatever the number of worker processes or their order.
    """
    p = rate * weight
    if window.answer_type != TYPE_ID["UNKNOWN"] or p >= 1.0:
        return True
    h = zlib.crc32(f"{seed}:{window.example_id}:{window.window_index}".encode())
    return (h / 0xFFFFFFFF) < p


def has_answer(example: Example) -> bool:
    """Whether the training label has an answer (the document is "answerable")."""
    ann = label_annotation(example)
    return ann is not None and ann.answer_type != "NONE"
