"""Trained models loaded for prediction, alone or as an ensemble, and the one path that predicts a file with them.

    model = load_model("runs/demo/model", "cpu", "auto")               # one model directory
    ensemble = load_ensemble(["runs/a/model", "runs/b/model"], [0.5, 0.5], "cpu", "auto")
    for prediction in predict_input(ensemble, "dev.jsonl", ensemble.post):
        ...

`submission.predict` (the Kaggle path), `solution.hard_negatives` and the answers benchmark all load
and predict through here, so they score alike. Only torch, transformers, numpy and the project's
reading, windowing and post-processing: no accelerate, no deepspeed. Nothing here turns the network
off: a model directory is read from disk, and the commands that must never reach a hub say so
themselves (`submission.predict`, the Kaggle kernel's run.py).
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass, field, replace
from functools import cached_property
from pathlib import Path
from typing import Callable, Iterator, Optional, Sequence, Union

import torch

from solution.answers.ensemble import ModelGroup, parse_weights, predict_ensemble, weighted_runner
from solution.answers.inference import LogitCache, model_runner
from solution.answers.polarity import reads_polarity, with_polarity
from solution.answers.postprocess import DocumentPrediction, PostprocessConfig
from solution.common.fsutil import file_digest
from solution.common.precision import resolve_precision
from solution.common.settings import apply_overrides
from solution.data.nq import ReadStats, read_examples
from solution.model.qa_model import WEIGHTS_FILE, load_model_dir
from solution.model.sentences import first_pass_embed
from solution.windows.featurizer import Featurizer, WindowConfig


@dataclass
class LoadedModel:
    """One model directory, loaded: its model (in the precision asked), tokenizer, qa_config.json and runner."""

    path: str
    model: torch.nn.Module
    tokenizer: object
    meta: dict  # qa_config.json: window and post-processing settings, tuned thresholds
    run: Callable  # batch -> (start, end, type) float32 numpy logits
    precision: str  # fp32 or bf16, resolved
    windows_key: tuple = ()  # models with equal keys cut the same windows (`load_ensemble` groups them)
    device: str = "cpu"  # where it predicts: the first pass's sentence encoder runs there too

    @property
    def window(self) -> WindowConfig:
        return WindowConfig(**self.meta["window"])

    @property
    def postprocess(self) -> PostprocessConfig:
        return PostprocessConfig(**self.meta["postprocess"])

    @property
    def tuned(self) -> Optional[dict]:
        """qa_config.json's `tuned_thresholds` record (what they were tuned for), or None."""
        return self.meta.get("tuned_thresholds")

    @cached_property
    def digest(self) -> str:
        """sha256 of the weights file: which model this is, whatever its directory is called."""
        return file_digest(os.path.join(self.path, WEIGHTS_FILE))


def load_model(model_dir, device: str = "cpu", precision: str = "fp32", autocast: bool = False,
               cache_logits: bool = False) -> LoadedModel:
    """A model directory loaded for prediction (`load_model_dir` checks it first).

    precision: fp32, bf16 or auto (bf16 where the device computes it natively). bf16 casts the whole
    model, as `submission.predict` runs it; `autocast=True` keeps the float32 weights and runs under
    bfloat16 autocast instead (the path the hard-negative pass was measured with). `cache_logits`: the
    runner keeps every window's logits (`LogitCache`), for variants that run the same windows again."""
    precision = resolve_precision(precision, device)
    model, tokenizer, meta = load_model_dir(model_dir, device)
    if precision == "bf16" and not autocast:
        # The whole model in bfloat16 rather than autocast: autocast keeps layer norms, softmax and the
        # residual stream in float32 and converts at every op (measured 54 vs 65 windows/s, MiniLM, 2 cores).
        model = model.to(torch.bfloat16)
    run = model_runner(model, device, torch.bfloat16 if precision == "bf16" and autocast else None)
    # Taken now: tokenizing sets the tokenizer's truncation and padding state, which its text then shows,
    # so a model that has already predicted would no longer group with a fresh copy of itself.
    windows_key = (tokenizer.backend_tokenizer.to_str(), json.dumps(meta["window"], sort_keys=True))
    return LoadedModel(str(model_dir), model, tokenizer, meta, LogitCache(run) if cache_logits else run,
                       precision, windows_key, str(device))


def model_files(model_dirs: Sequence) -> list:
    """("the model file", PATH) for every file of the model directories: inputs an output must not replace."""
    return [("the model file", p) for d in model_dirs if Path(d).is_dir() for p in sorted(Path(d).iterdir())
            if p.is_file()]


@dataclass
class Ensemble:
    """Models ready to predict together: `groups` for `predict_ensemble`, and the first weighted model's
    post-processing settings and tuned-thresholds record (the ensemble's)."""

    groups: list  # of ModelGroup, each with its own windows
    post: PostprocessConfig
    tuned: Optional[dict]
    precision: str
    timings: list = field(default_factory=list)  # per member: {"model", "weight", "windows", "seconds"}
    device: str = "cpu"  # the first weighted model's: where the first pass's sentence vectors are computed


def load_ensemble(models: Sequence[Union[str, os.PathLike, LoadedModel]], weights: Optional[Sequence[float]] = None,
                  device: str = "cpu", precision: str = "fp32") -> Ensemble:
    """One model or several, weighted (`weights` sum to 1, as `parse_weights` gives them; None: equal).

    `models` are directories (loaded here) or `LoadedModel`s (re-used: a `LogitCache` keeps its logits).
    Models are grouped by tokenizer and window settings (a group shares its windows). A directory
    listed twice, or two directories with byte-identical weights and settings, is run once with the
    weights summed: its logits are then exactly that model's. A model weighted 0 is loaded (so checked)
    and never run."""
    weights = parse_weights(None, len(models)) if weights is None else list(weights)
    precision = resolve_precision(precision, device)
    members: dict = {}  # key -> [weight, LoadedModel]
    first = None
    for item, weight in zip(models, weights):
        loaded = item if isinstance(item, LoadedModel) else load_model(item, device, precision)
        if weight == 0:  # not run, and not "first": weights 0,1 are exactly the second model
            continue
        if first is None:
            first = loaded
        key = (loaded.windows_key, loaded.model.config.to_json_string(), loaded.digest)
        if key in members:
            members[key][0] += weight
        else:
            members[key] = [weight, loaded]
    ensemble = Ensemble([], first.postprocess, first.tuned, first.precision, device=first.device)
    for group_key in dict.fromkeys(k[0] for k in members):
        chosen = [m for k, m in members.items() if k[0] == group_key]
        group_weight = sum(weight for weight, _ in chosen)
        runs = []
        for weight, loaded in chosen:
            record = {"model": loaded.path, "weight": weight, "windows": 0, "seconds": 0.0}
            ensemble.timings.append(record)
            runs.append(timed(loaded.run, record))
        run = weighted_runner(runs, [weight / group_weight for weight, _ in chosen])
        featurizer = Featurizer(chosen[0][1].tokenizer, chosen[0][1].window)
        ensemble.groups.append(ModelGroup(featurizer, run, group_weight, len(chosen)))
    return ensemble


def timed(run: Callable, record: dict) -> Callable:
    """`run`, counting the windows it scores and its seconds into `record` (the kernel's per-model projection)."""
    def timed_run(batch):
        t = time.perf_counter()
        out = run(batch)
        record["seconds"] += time.perf_counter() - t
        record["windows"] += int(batch["input_ids"].shape[0])
        return out

    return timed_run


def with_window_sets(groups: Sequence[ModelGroup], window_sets=(), device: str = "cpu",
                     sentence_match: bool = False) -> list:
    """The groups with each --set KEY=VALUE of the window settings (`inference.WINDOW_OVERRIDES`: which
    windows run) over each group's own, and the sentence vectors their first pass ranks by, if it does, or
    post-processing's sentence match needs (`sentence_match`), computed on `device`."""
    out = []
    for group in groups:
        window = apply_overrides(group.featurizer.config, window_sets)
        embed = first_pass_embed(window, device, sentence_match)
        featurizer = Featurizer(group.featurizer.tokenizer, window, embed=embed)
        out.append(replace(group, featurizer=featurizer))
    return out


def predict_input(ensemble: Ensemble, input_path, post: Optional[PostprocessConfig] = None, window_sets=(),
                  batch_size: int = 32, on_error: str = "raise", stats: Optional[ReadStats] = None,
                  progress: Optional[Callable[[int, int], None]] = None,
                  polarity: Optional[Ensemble] = None) -> Iterator[DocumentPrediction]:
    """One prediction per document of a simplified-NQ file, in input order: the path every prediction of
    a file takes (submission.predict's CSV, the answers benchmark's variants).

    `post`: the post-processing settings (default: the ensemble's); `window_sets`: --set items of the
    window settings; `on_error`, `stats`: as `read_examples`; `progress(documents, windows)` after each
    chunk; `polarity`: a polarity model whose YES or NO replaces the answer's where the answer is one
    (`solution.answers.polarity`), run on those documents alone with its own settings. The windows'
    settings and the input are set up here, the documents read as the result is."""
    post = post or ensemble.post
    groups = with_window_sets(ensemble.groups, window_sets, ensemble.device, post.sentence_weight > 0)
    examples = read_examples(input_path, on_error=on_error, stats=stats)
    if polarity is None:
        return predict_ensemble(groups, examples, post, batch_size, progress=progress)
    held: dict = {}  # the documents read and not yet answered (at most a chunk's)
    answers = predict_ensemble(groups, holding(examples, held), post, batch_size, progress=progress)
    return polarity_read(answers, held, polarity, post, batch_size)


def holding(examples, held: dict):
    """`examples`, each kept in `held` by its id until its answer takes it back."""
    for example in examples:
        held[example.example_id] = example
        yield example


def polarity_read(answers, held: dict, polarity: Ensemble, post: PostprocessConfig,
                  batch_size: int) -> Iterator[DocumentPrediction]:
    """The answers, each yes/no one with the polarity model's YES or NO (`with_polarity`), that model run on
    that document alone."""
    groups = with_window_sets(polarity.groups, (), polarity.device, polarity.post.sentence_weight > 0)
    for answer in answers:
        example = held.pop(answer.example_id, None)
        if example is not None and reads_polarity(answer):
            (read,) = predict_ensemble(groups, [example], polarity.post, batch_size)
            answer = with_polarity(answer, read, post)
        yield answer
