"""A test-side entry point: `python tests/faulty_train.py FAULT [solution.train arguments ...]`.

Patches a fault into a library that `solution.train` calls, then runs its `main`, so that nothing in
`solution/` carries test-only branches. FAULT is one of:
  enospc-checkpoint-N  the N-th `Accelerator.save_state` writes its files, then raises ENOSPC
                       (a disk that fills up halfway through checkpoint-N.tmp)
  enospc-model         the final model's safetensors file is written in part, then raises ENOSPC
"""

from __future__ import annotations

import errno
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def no_space(path) -> OSError:
    return OSError(errno.ENOSPC, "No space left on device", str(path))


def fill_disk_in_checkpoint(n: int) -> None:
    import accelerate

    original = accelerate.Accelerator.save_state
    calls = {"n": 0}

    def save_state(self, output_dir=None, *args, **kwargs):
        calls["n"] += 1
        result = original(self, output_dir, *args, **kwargs)
        if calls["n"] == n:
            raise no_space(Path(output_dir) / "optimizer.bin")
        return result

    accelerate.Accelerator.save_state = save_state


def fill_disk_in_model_save() -> None:
    import safetensors.torch

    def save_file(tensors, filename, metadata=None):
        Path(filename).write_bytes(b"\0" * 1024)  # part of the file made it to disk
        raise no_space(filename)

    safetensors.torch.save_file = save_file


def main(argv: list) -> int:
    fault, rest = argv[0], argv[1:]
    if fault.startswith("enospc-checkpoint-"):
        fill_disk_in_checkpoint(int(fault.rsplit("-", 1)[1]))
    elif fault == "enospc-model":
        fill_disk_in_model_save()
    else:
        raise SystemExit(f"faulty_train: unknown fault {fault!r}")
    from solution.train import main as train_main

    return train_main(rest)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
