"""Turn any training checkpoint into a model directory: `python -m solution.consolidate CHECKPOINT OUT`.

A checkpoint (output_dir/checkpoint-N) holds the weights in the form its strategy
saved them: DeepSpeed's ZeRO partitions (`pytorch_model/`), FSDP2's sharded
distributed checkpoint (`pytorch_model_fsdp_0/`), or plain `model.safetensors`
(single process, DDP). This reads them in one process on CPU, with no process
group and no GPU, into full float32 weights, and writes the same self-describing
model directory that training writes at its end and `submission/` loads.
"""

from __future__ import annotations

import sys
from pathlib import Path

from solution.checkpoints.layout import full_state_dict, verify_manifest
from solution.common.fsutil import DiskFullError, claim_output, removed_if_disk_full


def consolidate(checkpoint, out, overwrite: bool = False) -> Path:
    """Write the model directory `out` from the checkpoint; `out` may replace only a model directory (or,
    with `overwrite`, the model's files in another folder), never the checkpoint or a folder holding it."""
    from solution.checkpoints.state import TrainerState
    from solution.model.qa_config import read_qa_config
    from solution.model.qa_model import MODEL_DIR_FILES, read_backbone_config, read_tokenizer, save_model_dir

    ckpt = Path(checkpoint)
    meta_dir = ckpt / "model_meta"
    if not (ckpt / "trainer_state.json").is_file() or not meta_dir.is_dir():
        raise ValueError(f"{ckpt}: not a complete checkpoint (needs trainer_state.json and model_meta/); "
                         "training writes them to output_dir/checkpoint-N every save_steps")
    out = claim_output(out, "OUT", folder=True, names=MODEL_DIR_FILES, overwrite=overwrite,
                       inputs=[("the checkpoint", ckpt)])
    step = TrainerState.read(ckpt).step  # a broken trainer_state.json: one line, before minutes of loading
    verify_manifest(ckpt)  # a file changed since the save: one line naming it (none for an older checkpoint)
    state = full_state_dict(ckpt)
    config = read_backbone_config(meta_dir)
    tokenizer = read_tokenizer(meta_dir)
    # Checked, and a format-1 checkpoint's settings completed, so the directory written is current.
    qa = read_qa_config(meta_dir / "qa_config.json")
    qa = {k: v for k, v in qa.items() if k not in ("format", "answer_types", "tokenizer_size")}
    qa.setdefault("training", {})["consolidated_from"] = {"checkpoint": str(ckpt), "step": step}
    # OUT.tmp: save_model_dir's temporary name; a full disk removes it and names OUT and the space left.
    with removed_if_disk_full(Path(out).with_name(Path(out).name + ".tmp"), lambda: DiskFullError(out)):
        return save_model_dir(out, state, config, tokenizer, qa, keep=_not_model_files(out))


def _not_model_files(out: Path) -> list:
    """What an existing OUT holds besides a model directory's files: kept (it is there only with --overwrite)."""
    from solution.model.qa_model import MODEL_DIR_FILES

    return [p.name for p in out.iterdir() if p.name not in MODEL_DIR_FILES] if out.is_dir() else []


def main(argv=None) -> int:
    from solution.common import cli  # both --a-b and --a_b spellings
    parser = cli.ArgumentParser(prog="python -m solution.consolidate", description=__doc__.split("\n\n")[0])
    parser.add_argument("checkpoint", help="output_dir/checkpoint-N from any strategy")
    parser.add_argument("out", help="model directory to write (loadable by submission.predict); an existing "
                                    "folder is replaced only when it is a model directory")
    parser.add_argument("--overwrite", action="store_true",
                        help="write the model's files into an existing folder that holds other files (those are kept)")
    args = parser.parse_args(argv)
    try:
        path = consolidate(args.checkpoint, args.out, args.overwrite)
    except (ValueError, FileNotFoundError, DiskFullError) as e:  # exit 2, as the other tools' full disks
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(f"model directory: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
