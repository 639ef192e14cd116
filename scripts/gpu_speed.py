"""The GPU check's `speed` part (scripts/gpu_check.py --parts speed): how fast each engine trains BERT-base,
measured side by side in one call, every record written as it finishes.

    python scripts/gpu_check.py --parts speed --out DIR          # on the GPU (scripts/gpu_run.sh --parts speed)
    python scripts/gpu_check.py --parts speed --dry-run --out DIR # the same commands on the CPU, tiny sizes
    python scripts/gpu_speed.py --infer --batch 256 --seq 512 --pages FILE --json FILE   # its inference run alone

In order (the most valuable first; a run the budget cannot start is skipped, saying so):

1. `speed-b16`, `-b32`, `-b64`, `-b128`: one process (`--strategy single`, no launcher), BERT-base at 512
   pieces (configs/train/bench_base.yaml, random windows), bf16, eager; 130 optimizer steps logged every
   10. Throughput is the median of the logging windows from step 21 on (110 timed steps): the first step
   is timed apart (the trainer's `first_step` record) and steps 11-15 run under torch.profiler
   (`--profile_steps 5`, profile.json: wall time, kernels and kernel time a step, the device's busy share,
   the host's waits for the device, the top operators).
2. `speed-compiled`: the best eager batch again with `--torch_compile` (the first step, compilation, apart),
   60 steps (windows from step 21: 40 timed).
3. `speed-zero2`, `speed-fsdp`, `speed-zero3`: the engines under torchrun --nproc_per_node 1 at that batch,
   60 steps (40 timed), each beside `speed-b{B}` (one process, the same batch and
   world size, the same call): the ratio.
4. `speed-peer`: scripts/benchmark_loop.py at that batch, bf16, 512 pieces, one process: our trainer, a bare
   loop and transformers' `Trainer` (the peer ratio), 60 steps in windows of 10 each.
5. `speed-recipe-b128`, `-b512`, `-b512-compiled`: the recipe's stage 2 (configs/train/nq-profile.yaml: MiniLM
   at 192 pieces, bf16) on random windows at larger batches: windows/s, its goal 15,000.
6. `speed-infer`: inference in one process (`--infer`): the model alone (BERT-base in bf16, full 512-piece
   windows, inference mode: windows/s timed with CUDA events), and end to end through the library's one
   prediction path (`solution.answers.inference.predict_documents`: featurising the real NQ pages, the model,
   post-processing) with the same model.
7. `speed-repeat`: `speed-b{B}` once more, last: the spread between two runs of the same thing in one call.

Every training record carries its engine settings, attention implementation and compile state (the start
record), MFU on two counts (6 x all parameters per token, the project's earlier one; and the usual one, PaLM's
appendix B: 6 x the matrix parameters, embeddings left out, + 12 x layers x sequence x hidden for attention)
against the device's peak dense bf16 rate; gpu_check.json's `speed` holds the goals, each marked met or not.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from solution.experiments.gpu import speed_infer  # noqa: E402


def main(argv=None) -> int:
    from solution.common import cli

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], epilog=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--infer", action="store_true", help="run the inference measurement (item 6) and exit")
    p.add_argument("--config", default="configs/train/bench_base.yaml", help="the model's training config")
    p.add_argument("--backbone", default=None, help="its model_name_or_path (default: the config's)")
    p.add_argument("--batch", type=int, default=256, help="windows a forward, model alone")
    p.add_argument("--seq", type=int, default=512, help="pieces a window")
    p.add_argument("--pages", default=None, help="NQ JSON lines for the end-to-end figure")
    p.add_argument("--device", default="cuda")
    p.add_argument("--json", default=None, help="write the figures here")
    cli.add_overwrite(p)
    args = p.parse_args(argv)
    cli.claim_records("scripts/gpu_speed.py", args.overwrite, json=args.json)
    if not args.infer:
        p.print_help()
        return 0
    result = speed_infer.infer(args)
    print(json.dumps(result))
    if args.json:
        from solution.common.fsutil import write_record

        write_record(args.json, json.dumps(result, indent=2) + "\n", "scripts/gpu_speed.py")
    return 0


if __name__ == "__main__":
    sys.exit(main())
