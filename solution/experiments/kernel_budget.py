"""The Kaggle kernel's GPU time, projected: windows per document measured, per-window costs published.

Kaggle ran this competition's kernels on a P100 (16 GB) with a GPU limit of about 3 hours (today's
GPU notebooks get a T4). `scripts/make_kaggle_kernel.py --pages FILE` prints, for the models it
packs, the windows per document they would run on FILE's pages (their own tokenizer and window
settings, after `skip_windows_without_candidates` and `max_windows_per_document`), and the GPU
time that many windows take for a number of test documents (default: MLE-bench's 30,738) on each
card. These are PROJECTIONS, not measurements:

* forward FLOPs of one window of L pieces through a BERT of N layers, width h and feed-forward
  width f: N x (2 L (4 h^2 + 2 h f) + 4 L^2 h) (the matrix products; embeddings, norms and the
  heads are small beside them);
* a card's rate is a published BERT SQuAD inference throughput at 384 pieces, batch 8, times the
  FLOPs of that reference window: NVIDIA DeepLearningExamples, TensorFlow2 BERT README, "Fine-
  tuning inference performance for SQuAD v1.1 on NVIDIA Tesla T4" (TF 21.02 container): BERT-large
  16.04 sequences/s in FP32, 62.99 in FP16; BERT-base 51.33 FP32, 192.61 FP16;
* the kernel runs FP32 on both cards: neither a T4 nor a P100 computes bfloat16 natively, and
  `submission.predict` has no FP16 mode; the FP16 figure is what an FP16 path could reach;
* the P100: no published BERT QA inference figure was found; its rate is the T4's scaled by the
  cards' datasheet peaks (FP32 9.3 vs 8.1 TFLOPS, FP16 18.7 vs 65 TFLOPS), a derived figure;
* each window is counted at the model's full max_seq_length (a document's last window is
  shorter) and tokenisation runs on the CPU beside the GPU: no time for it.
"""

from __future__ import annotations

import itertools
import json
from dataclasses import dataclass
from pathlib import Path

from solution.common.jsonio import read_json_object
from solution.model.qa_config import read_qa_config  # the checked reader of qa_config.json, torch-free

DEFAULT_DOCUMENTS = 30_738  # MLE-bench's test set: 10% of the training file's 307,373 documents
GPU_LIMIT_HOURS = 3.0  # the competition's GPU kernel limit (Kaggle code competitions, 2019)
# Without --pages: the mean of the real NQ sample at 512 pieces and an overlap of 128, every window
# (docs/cpu-distributed-facts.md); skipping windows without a candidate runs fewer.
ASSUMED_WINDOWS = 41.0
REFERENCE_SEQ = 384
# (layers, hidden, intermediate) of the published measurements' models
REFERENCE_MODELS = {"base": (12, 768, 3072), "large": (24, 1024, 4096)}
# Published sequences/s at 384 pieces, batch 8, on a T4 (DeepLearningExamples TensorFlow2 BERT README)
T4_PUBLISHED = {("large", "fp32"): 16.04, ("large", "fp16"): 62.99, ("base", "fp32"): 51.33, ("base", "fp16"): 192.61}
# Datasheet peaks in TFLOPS: what scales the T4's measurement to a P100 (a derived, unmeasured rate)
PEAK_TFLOPS = {"T4": {"fp32": 8.1, "fp16": 65.0}, "P100": {"fp32": 9.3, "fp16": 18.7}}
CARDS = ("P100", "T4")


def window_flops(layers: int, hidden: int, intermediate: int, seq: int) -> float:
    """Forward FLOPs of one window of `seq` pieces (see the module docstring)."""
    return layers * (2.0 * seq * (4 * hidden * hidden + 2 * hidden * intermediate) + 4.0 * seq * seq * hidden)


def reference_for(hidden: int) -> str:
    """The published model nearer in width: its measured rate stands for this one's."""
    return min(REFERENCE_MODELS, key=lambda k: abs(REFERENCE_MODELS[k][1] - hidden))


def flops_per_second(card: str, reference: str, precision: str) -> float:
    """The rate a card reaches on the reference model: published for the T4, scaled by peaks for the P100."""
    rate = T4_PUBLISHED[(reference, precision)] * window_flops(*REFERENCE_MODELS[reference], REFERENCE_SEQ)
    return rate * PEAK_TFLOPS[card][precision] / PEAK_TFLOPS["T4"][precision]


def seconds_per_window(layers: int, hidden: int, intermediate: int, seq: int, card: str, precision: str) -> float:
    return window_flops(layers, hidden, intermediate, seq) / flops_per_second(card, reference_for(hidden), precision)


@dataclass
class PackedModel:
    """What the projection needs of one model directory."""

    name: str
    layers: int
    hidden: int
    intermediate: int
    window: dict
    postprocess: dict
    model_dir: Path


def read_packed(model_dir) -> PackedModel:
    d = Path(model_dir)
    config = read_json_object(d / "config.json")
    meta = read_qa_config(d / "qa_config.json")
    return PackedModel(str(d), int(config["num_hidden_layers"]),
                       int(config["hidden_size"]), int(config["intermediate_size"]), meta["window"],
                       meta["postprocess"], d)


def measure_windows(models: list, pages, limit: int) -> dict:
    """{window settings key: mean windows per document run} over the first `limit` documents of `pages`,
    per group of models sharing a tokenizer and window settings; the windows are those the kernel
    runs (`inference.select_windows` under the first model's post-processing, which an ensemble uses)."""
    import torch

    from solution.answers.inference import select_windows
    from solution.answers.postprocess import PostprocessConfig
    from solution.data.nq import read_examples
    from solution.model.qa_model import read_tokenizer
    from solution.model.sentences import first_pass_embed
    from solution.windows.featurizer import Featurizer, WindowConfig

    # No model runs here, only the first pass: its sentence vectors on this machine's GPU if it has one,
    # as the kernel computes them on its own (submission.predict's --device).
    device = "cuda" if torch.cuda.is_available() else "cpu"
    post = PostprocessConfig(**models[0].postprocess)
    examples = list(itertools.islice(read_examples(pages), limit))
    if not examples:
        raise ValueError(f"--pages {pages}: no documents")
    out = {}
    for m in models:
        key = group_key(m)
        if key in out:
            continue
        window = WindowConfig(**m.window)
        featurizer = Featurizer(read_tokenizer(m.model_dir), window, embed=first_pass_embed(window, device))
        counts = [len(select_windows(ex, ws, post, window, featurizer.embed))
                  for ex, ws in featurizer.featurize(examples, with_labels=False, isolate_errors=True)
                  if not isinstance(ws, Exception)]
        out[key] = sum(counts) / max(len(counts), 1)
    return out


def group_key(m: PackedModel) -> str:
    """Models with the same tokenizer and window settings run the same windows."""
    from solution.common.fsutil import file_digest

    return json.dumps([m.window, file_digest(m.model_dir / "tokenizer.json")], sort_keys=True)


def project(model_dirs: list, pages=None, num_documents: int = DEFAULT_DOCUMENTS, pages_limit: int = 200) -> dict:
    """{"models": [...], "windows_per_document": {...}, "measured": bool, "hours": {card: {precision: h}}}."""
    if num_documents < 1:
        raise ValueError(f"--num-documents must be >= 1, got {num_documents}")
    models = [read_packed(d) for d in dict.fromkeys(str(Path(d).resolve()) for d in model_dirs)]
    windows = measure_windows(models, pages, pages_limit) if pages else {group_key(m): ASSUMED_WINDOWS for m in models}
    hours = {card: {} for card in CARDS}
    per_model = []
    for m in models:
        seq = int(m.window.get("max_seq_length", 512))
        wpd = windows[group_key(m)]
        row = {"model": str(m.model_dir), "layers": m.layers, "hidden": m.hidden, "seq": seq,
               "windows_per_document": wpd, "reference": f"BERT-{reference_for(m.hidden)}", "hours": {}}
        for card in CARDS:
            for precision in ("fp32", "fp16"):
                h = num_documents * wpd * seconds_per_window(m.layers, m.hidden, m.intermediate, seq, card,
                                                             precision) / 3600
                row["hours"][f"{card} {precision}"] = h
                hours[card][precision] = hours[card].get(precision, 0.0) + h
        per_model.append(row)
    return {"models": per_model, "measured": bool(pages), "pages": str(pages) if pages else None,
            "num_documents": num_documents, "hours": hours, "limit_hours": GPU_LIMIT_HOURS,
            "max_windows_per_document": models[0].window.get("max_windows_per_document", 0)}


def format_projection(p: dict) -> str:
    source = (f"measured on the first documents of {p['pages']}" if p["measured"]
              else f"assumed {ASSUMED_WINDOWS:g} (no --pages given: the real NQ sample's mean)")
    cap = p["max_windows_per_document"]
    lines = [f"GPU time, PROJECTED (published throughputs scaled by FLOPs, not measured here; docs/submission.md) "
             f"for {p['num_documents']:,} test documents; windows per document {source}"
             f"{f', at most {cap} a document' if cap else ''}:"]
    for r in p["models"]:
        costs = ", ".join(f"{k} {v:.2f} h" for k, v in r["hours"].items())
        lines.append(f"  {Path(r['model']).name}: {r['layers']} layers x {r['hidden']}, {r['seq']}-piece windows, "
                     f"{r['windows_per_document']:.1f} windows/document ({r['reference']}'s rate): {costs}")
    for card in CARDS:
        fp32, fp16 = p["hours"][card]["fp32"], p["hours"][card]["fp16"]
        verdict = "within" if fp32 <= p["limit_hours"] else "OVER"
        lines.append(f"  all models on a {card}: {fp32:.2f} h in FP32 as this kernel runs ({verdict} the "
                     f"{p['limit_hours']:g} h GPU limit); {fp16:.2f} h with an FP16 path")
    if any(p["hours"][c]["fp32"] > p["limit_hours"] for c in CARDS):
        lines.append("  to fit: fewer windows a document (--set max_windows_per_document=N at prediction, or "
                     "window.max_windows_per_document in the model's qa_config.json), fewer or smaller models")
    return "\n".join(lines)
