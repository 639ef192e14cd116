"""Turn any training checkpoint into a model directory: `python -m solution.consolidate CHECKPOINT OUT`.

A checkpoint (output_dir/checkpoint-N) holds the weights in the form its strategy
saved them: DeepSpeed's ZeRO partitions (`pytorch_model/`), FSDP2's sharded
distributed checkpoint (`pytorch_model_fsdp_0/`), or plain `model.safetensors`
(single process, DDP). This reads them in one process on CPU, with no process
group and no GPU, into full float32 weights, and writes the same self-describing
model directory that training writes at its end and `submission/` loads.
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

import torch

from solution.checkpoint_layout import DS_TAG, FSDP_DIR, checkpoint_kind, verify_checkpoint_files
from solution.fsutil import DiskFullError, removed_if_disk_full


def full_state_dict(ckpt: Path, verify: bool = True) -> dict:
    """Full float32 weights of a checkpoint, whatever strategy wrote it (`verify`: check its files first;
    a resume checked them already)."""
    if verify:
        verify_checkpoint_files(ckpt, show_progress=True)
    kind = checkpoint_kind(ckpt)
    if kind == "deepspeed":
        from deepspeed.utils.zero_to_fp32 import get_fp32_state_dict_from_zero_checkpoint

        state = get_fp32_state_dict_from_zero_checkpoint(str(ckpt), tag=DS_TAG)
    elif kind == "fsdp":
        from torch.distributed.checkpoint.format_utils import dcp_to_torch_save

        with tempfile.TemporaryDirectory() as tmp:
            dcp_to_torch_save(str(ckpt / FSDP_DIR), f"{tmp}/full.pt")
            loaded = torch.load(f"{tmp}/full.pt", weights_only=True, map_location="cpu")
        state = loaded.get("model", loaded)  # Accelerate saves {"model": state_dict}
    else:
        if (ckpt / "model.safetensors").is_file():
            from solution.model import read_weights

            state = read_weights(ckpt / "model.safetensors")  # a truncated file: a ValueError naming it
        else:
            state = torch.load(ckpt / "pytorch_model.bin", weights_only=True, map_location="cpu")
    return {k: (v.float() if v.is_floating_point() else v) for k, v in state.items()}


def consolidate(checkpoint, out) -> Path:
    from solution.model import read_backbone_config, read_qa_config, read_tokenizer, save_model_dir

    ckpt = Path(checkpoint)
    meta_dir = ckpt / "model_meta"
    if not (ckpt / "trainer_state.json").is_file() or not meta_dir.is_dir():
        raise ValueError(f"{ckpt}: not a complete checkpoint (needs trainer_state.json and model_meta/); "
                         "training writes them to output_dir/checkpoint-N every save_steps")
    state = full_state_dict(ckpt)
    config = read_backbone_config(meta_dir)
    tokenizer = read_tokenizer(meta_dir)
    # Checked, and a format-1 checkpoint's settings completed, so the directory written is current.
    qa = read_qa_config(meta_dir / "qa_config.json")
    qa = {k: v for k, v in qa.items() if k not in ("format", "answer_types", "tokenizer_size")}
    trainer_state = json.loads((ckpt / "trainer_state.json").read_text())
    qa.setdefault("training", {})["consolidated_from"] = {"checkpoint": str(ckpt), "step": trainer_state.get("step")}
    # OUT.tmp: save_model_dir's temporary name; a full disk removes it and names OUT and the space left.
    with removed_if_disk_full(Path(out).with_name(Path(out).name + ".tmp"), lambda: DiskFullError(out)):
        return save_model_dir(out, state, config, tokenizer, qa)


def main(argv=None) -> int:
    from solution import cli  # both --a-b and --a_b spellings
    parser = cli.ArgumentParser(prog="python -m solution.consolidate", description=__doc__.split("\n\n")[0])
    parser.add_argument("checkpoint", help="output_dir/checkpoint-N from any strategy")
    parser.add_argument("out", help="model directory to write (loadable by submission.predict)")
    args = parser.parse_args(argv)
    try:
        path = consolidate(args.checkpoint, args.out)
    except (ValueError, FileNotFoundError, DiskFullError) as e:  # exit 2, as the other tools' full disks
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(f"model directory: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
