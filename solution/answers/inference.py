"""Run a QA model over documents and post-process them, as a stream.

Used by `submission.predict` (the Kaggle path) and by dev evaluation during
training, so both score the same way. Only torch, numpy and the tokenizer:
no accelerate, no deepspeed, no network.

Memory stays flat in the size of the input: documents are read, cut into
windows, scored and answered `docs_per_chunk` at a time.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
from contextlib import nullcontext
from typing import Callable, Iterable, Iterator, Optional

import numpy as np
import torch

from solution.answers.postprocess import (
    DocumentPrediction,
    DocumentScores,
    PostprocessConfig,
    blank_prediction,
    decide,
    score_document,
    sentence_matched,
)
from solution.common.settings import apply_overrides
from solution.data.nq import Example, candidate_array
from solution.windows.featurizer import Featurizer, WindowConfig, top_windows, windows_with_candidates
from solution.windows.first_pass import candidate_cosines


def collate(windows: list, pad_token_id: int = 0, pad_to: Optional[int] = None) -> dict:
    """Pad a list of windows (dicts or `Window`s) into a batch of tensors."""
    rows = [w if isinstance(w, dict) else w.as_dict() for w in windows]
    length = pad_to or max(len(r["input_ids"]) for r in rows)
    n = len(rows)
    input_ids = np.full((n, length), pad_token_id, dtype=np.int64)
    token_type_ids = np.zeros((n, length), dtype=np.int64)
    attention_mask = np.zeros((n, length), dtype=np.int64)
    for i, r in enumerate(rows):
        k = len(r["input_ids"])
        input_ids[i, :k] = r["input_ids"]
        token_type_ids[i, :k] = r["token_type_ids"]
        attention_mask[i, :k] = 1
    # `padded`, a host bool: whether any position is padding, known here for free; the model needs it to
    # leave the mask out of a batch with none, which it could otherwise only learn by reading the device.
    batch = {"input_ids": torch.from_numpy(input_ids), "token_type_ids": torch.from_numpy(token_type_ids),
             "attention_mask": torch.from_numpy(attention_mask), "padded": bool((attention_mask == 0).any())}
    if rows[0].get("start_positions") is not None:
        for key in ("start_positions", "end_positions", "answer_type"):
            batch[key] = torch.tensor([int(r[key]) for r in rows], dtype=torch.long)
    return batch


def model_runner(model: torch.nn.Module, device="cpu", autocast_dtype: Optional[torch.dtype] = None,
                 inference_mode: bool = True) -> Callable:
    """A function batch -> (start, end, type) float32 numpy logits, under inference mode.

    `inference_mode=False` uses no_grad instead: a model whose parameters are sharded for training
    (ZeRO-3, FSDP) gathers them into buffers that training reuses, which inference tensors cannot be.
    """
    device = torch.device(device)
    grad_off = torch.inference_mode if inference_mode else torch.no_grad

    def run(batch: dict):
        inputs = {k: batch[k].to(device) for k in ("input_ids", "attention_mask", "token_type_ids")}
        inputs["padded"] = batch.get("padded")
        ctx = torch.autocast(device.type, dtype=autocast_dtype) if autocast_dtype else nullcontext()
        with grad_off(), ctx:
            out = model(**inputs)
        return tuple(out[k].float().cpu().numpy() for k in ("start_logits", "end_logits", "type_logits"))

    return run


class LogitCache:
    """A runner (batch -> start, end, type logits) that keeps each window's logits and runs only the windows
    it has not seen: post-processing variants over the same model re-use them (the answers benchmark).

    A window is known by its token ids (padding aside). A batch whose windows all ran before is a cache
    hit; one with new windows runs those alone, at the batch's width. A first pass runs its batches whole,
    as the plain runner does (the same logits); a later mixed batch takes each old window's logits from
    the batch it first ran in (the same up to rounding)."""

    def __init__(self, run: Callable):
        self.run = run
        self.logits: dict = {}  # sha1 of a window's token ids -> (start [n], end [n], type [5])

    def __call__(self, batch: dict) -> tuple:
        ids, lengths = batch["input_ids"].numpy(), batch["attention_mask"].numpy().sum(axis=1)
        keys = [hashlib.sha1(row[:n].tobytes()).hexdigest() for row, n in zip(ids, lengths)]
        new = [i for i, k in enumerate(keys) if k not in self.logits]
        if new:
            sub = batch if len(new) == len(keys) else \
                {k: batch[k][new] for k in ("input_ids", "attention_mask", "token_type_ids")}
            s, e, t = self.run(sub)
            for j, i in enumerate(new):
                self.logits[keys[i]] = (s[j, :lengths[i]].copy(), e[j, :lengths[i]].copy(), t[j].copy())
        start = np.full(ids.shape, -1e4, dtype=np.float32)  # past a window's length: padding, never read
        end = start.copy()
        for i, k in enumerate(keys):
            start[i, :lengths[i]], end[i, :lengths[i]] = self.logits[k][0], self.logits[k][1]
        return start, end, np.stack([self.logits[k][2] for k in keys])


def score_windows(run: Callable, windows: list, pad_id: int, batch_size: int) -> list:
    """(start, end, type) logits of each window, unpadded, in the order given.

    Windows are batched longest first, so a batch pads little (the windows of
    many documents share a batch).
    """
    order = sorted(range(len(windows)), key=lambda i: -len(windows[i].input_ids))
    logits = [None] * len(windows)
    for b in range(0, len(order), batch_size):
        idx = order[b:b + batch_size]
        s, e, t = run(collate([windows[i] for i in idx], pad_id))
        for row, i in enumerate(idx):
            n = len(windows[i].input_ids)
            logits[i] = (s[row, :n], e[row, :n], t[row])
    return logits


def predict_documents(run: Callable, featurizer: Featurizer, examples: Iterable[Example],
                      cfg: PostprocessConfig, batch_size: int = 32, docs_per_chunk: int = 64,
                      progress: Optional[Callable[[int, int], None]] = None,
                      answer: Optional[Callable] = None) -> Iterator[DocumentPrediction]:
    """Yield one prediction per example, in input order. When reading the input fails (a truncated .gz),
    the documents read before it are answered, then the error is raised.

    `run` maps a collated batch to logits (see `model_runner`); `progress`, if
    given, is called with (documents done, windows done) after each chunk.
    `answer(example, windows, logits, cfg)` replaces post-processing (an ensemble of models
    with different windows takes each document's scores instead); a failed document still
    yields a blank prediction.
    """
    answer = answer or functools.partial(_answer, embed=featurizer.embed)
    check_first_pass(featurizer)
    check_sentence_match(featurizer, cfg)
    pad_id = featurizer.tokenizer.pad_token_id or 0
    docs_done = windows_done = 0
    chunk: list = []  # (example, windows) or (example, the exception that stopped it)

    def flush():
        nonlocal docs_done, windows_done
        failed = {id(ex): ws for ex, ws in chunk if isinstance(ws, Exception)}
        windows = [w for _, ws in chunk if not isinstance(ws, Exception) for w in ws]
        logits = score_windows(run, windows, pad_id, batch_size)
        pos = 0
        for ex, ws in chunk:
            if id(ex) in failed:
                yield _blank(ex, failed[id(ex)])
                continue
            try:
                yield answer(ex, ws, logits[pos:pos + len(ws)], cfg)
            except Exception as e:  # one document's post-processing must not cost the others their rows
                yield _blank(ex, e)
            pos += len(ws)
        docs_done += len(chunk)
        windows_done += len(windows)
        if progress:
            progress(docs_done, windows_done)
        chunk.clear()

    stream = featurizer.featurize(examples, with_labels=False, isolate_errors=True)
    while True:
        try:
            ex, ws = next(stream)
        except StopIteration:
            break
        except Exception:  # the input stopped (a truncated .gz): the documents read before it keep their answers
            if chunk:
                yield from flush()
            raise
        if not isinstance(ws, Exception):
            ws = select_windows(ex, ws, cfg, featurizer.config, featurizer.embed)
        chunk.append((ex, ws))
        if len(chunk) >= docs_per_chunk:
            yield from flush()
    if chunk:
        yield from flush()


WINDOW_OVERRIDES = ("max_windows_per_document", "first_pass", "first_pass_model", "first_pass_keep_first")
"""Window settings a prediction may change with --set: which windows run, never how they are cut (the
model was trained on that)."""


def split_overrides(overrides) -> tuple:
    """(window settings, post-processing settings) among --set KEY=VALUE items: `WINDOW_OVERRIDES` keys go
    to the window settings, every other key to post-processing's."""
    mine = [o for o in overrides if str(o).partition("=")[0].strip() in WINDOW_OVERRIDES]
    return mine, [o for o in overrides if o not in mine]


def with_overrides(window: WindowConfig, post: PostprocessConfig, overrides) -> tuple:
    """(window, post) with each --set KEY=VALUE applied where `split_overrides` sends it
    (`common.settings.apply_overrides`, which names an unknown key)."""
    window_sets, post_sets = split_overrides(overrides)
    return apply_overrides(window, window_sets), apply_overrides(post, post_sets)


def select_windows(example: Example, windows: list, cfg: PostprocessConfig, window: WindowConfig,
                   embed: Optional[Callable] = None) -> list:
    """The windows of a document that the model runs on, in document order: those holding a candidate
    (`skip_windows_without_candidates`), then at most the window settings' `max_windows_per_document`,
    ranked by their `first_pass` (`embed`: the sentence vectors of the `meaning` and `fused` ones), the
    first `first_pass_keep_first` kept whatever their rank."""
    if cfg.skip_windows_without_candidates:
        windows = windows_with_candidates(example, windows)
    cap = window.max_windows_per_document
    if cap and len(windows) > cap:
        windows = top_windows(example, windows, cap, window.first_pass, embed, window.first_pass_keep_first)
    return windows


def check_first_pass(featurizer: Featurizer) -> None:
    """A first pass by sentence vectors needs the featurizer's `embed`: said before any document is read."""
    window = featurizer.config
    if window.ranks_by_sentences and featurizer.embed is None:
        raise ValueError(f"window setting first_pass is {window.first_pass!r}, which ranks windows by sentence "
                         "vectors, and the Featurizer has no embed callable: build it with "
                         "embed=solution.model.sentences.first_pass_embed(window)")


def check_sentence_match(featurizer: Featurizer, cfg: PostprocessConfig) -> None:
    """Post-processing's sentence match needs the featurizer's `embed`: said before any document is read."""
    if cfg.sentence_weight and featurizer.embed is None:
        raise ValueError("post-processing setting sentence_weight is set, which adds the sentence match's cosines "
                         "to the reader's scores, and the Featurizer has no embed callable: build it with "
                         "embed=solution.model.sentences.first_pass_embed(window, sentence_match=True)")


def match_sentences(example: Example, scores: DocumentScores, cfg: PostprocessConfig,
                    embed: Optional[Callable]) -> DocumentScores:
    """`scores` with the sentence match's cosines of its `sentence_matched` candidates, where `sentence_weight`
    asks for them (`embed`: the backbone's sentence vectors); as they are otherwise."""
    if not cfg.sentence_weight or scores.empty:
        return scores
    matched = sentence_matched(scores, cfg)
    return dataclasses.replace(scores, candidate_cosines=candidate_cosines(example, matched.tolist(), embed))


def _blank(example: Example, error: Exception) -> DocumentPrediction:
    return blank_prediction(example.example_id, error=f"{type(error).__name__}: {error}")


def _answer(example: Example, windows: list, logits: list, cfg: PostprocessConfig,
            embed: Optional[Callable] = None) -> DocumentPrediction:
    if not windows:  # nothing that could hold an answer
        return blank_prediction(example.example_id)
    start, end, types, nq_idx, doc_starts = window_arrays(windows, logits)
    scores = score_document(example.example_id, candidate_array(example), start, end, types, nq_idx, cfg,
                            doc_starts)
    return decide(match_sentences(example, scores, cfg, embed), cfg)


class NonFiniteLogits(ValueError):
    """The model overflowed on a document (weights grown too large, or a precision too narrow for them)."""


def window_arrays(windows: list, logits: list) -> tuple:
    """One document's windows as padded arrays: start, end float32 [num_windows, seq] (padding -1e4),
    type float32 [num_windows, 5], nq_token_index int [num_windows, seq] (-1 where no NQ token),
    doc_starts int [num_windows] (each window's first document piece, for the max-context rule)."""
    seq = max(len(w.input_ids) for w in windows)
    n = len(windows)
    start = np.full((n, seq), -1e4, dtype=np.float32)
    end = np.full((n, seq), -1e4, dtype=np.float32)
    nq_idx = np.full((n, seq), -1, dtype=np.int64)
    types = np.zeros((n, logits[0][2].shape[-1]), dtype=np.float32)
    for i, (w, (s, e, t)) in enumerate(zip(windows, logits)):
        k = len(w.input_ids)
        start[i, :k], end[i, :k], nq_idx[i, :k], types[i] = s, e, w.nq_token_index, t
    doc_starts = np.array([w.doc_start for w in windows], dtype=np.int64)  # for max_context
    bad = int((~(np.isfinite(start).all(1) & np.isfinite(end).all(1) & np.isfinite(types).all(1))).sum())
    if bad:  # else NaN and infinities read as "no answer": a blank that says nothing of why
        raise NonFiniteLogits(f"the model's logits are not finite (NaN or infinite) in {bad} of the document's "
                              f"{n} windows")
    return start, end, types, nq_idx, doc_starts


def submission_rows(predictions: Iterable[DocumentPrediction]) -> Iterator[tuple]:
    """(row id, prediction string): `<id>_long` then `<id>_short` for each document."""
    for p in predictions:
        yield f"{p.example_id}_long", p.long
        yield f"{p.example_id}_short", p.short
