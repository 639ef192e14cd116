"""A chaos run with a bitwise oracle: `python scripts/chaos.py --faults N --json FILE`.

Trains a tiny BERT (configs/train/tiny.yaml, dummy data, SGD, dropout 0.1) on two ranks under torchrun
(DDP, 2 per device x 2 accumulation steps, checkpoints every 3 steps), and injects N faults drawn at
random: SIGKILL, SIGTERM or SIGSTOP to one rank or to the torchrun agent, some of them while a
checkpoint is being written (`checkpoint-N.tmp` exists). After each fault it waits for the launch to end
and starts it again with `--resume auto`, as a job scheduler would. A fault is fired only once the run has
gone past the highest step it had reached, so every fault costs work that is really lost.

Then one uninterrupted run with the same command is the oracle: the final weights, and every loss the
chaos run logged, must be bit-identical to it (the world size never changes here, so nothing short of
equality is expected). The report (JSON, and a summary on stdout) counts the faults and restarts, and per
fault the steps lost (the highest step the stopped launch logged minus the step resumed from) and the wall time
lost (from the fault until the run logs a step past that highest one). Exit 0 when every fault was injected,
the last run finished and the weights are identical; 1 otherwise.

A SIGSTOP to a rank ends with the hang watchdog's exit 4 (`--hang_timeout`, 10 s here; the reporting rank
kills the stopped one); a SIGSTOP to the agent freezes only the launcher: it is resumed (SIGCONT) after a
few seconds and the run goes on.
Checkpoint saves are stretched by half a second (the entry point sleeps after Accelerate's save_state,
inside `checkpoint-N.tmp`), so that a fault aimed at a save lands in one; the numbers are not touched.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from solution.common import cli  # noqa: E402
from solution.common.fsutil import check_writable, write_record  # noqa: E402
from solution.experiments.chaos import KINDS, chaos_run, compare, reference_run, summarise  # noqa: E402

SCRIPT = "scripts/chaos.py"  # whose report it may write over


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--faults", type=int, default=20, help="faults to inject (default 20)")
    p.add_argument("--json", help="write the report here (written whole, or not at all)")
    p.add_argument("--overwrite", action="store_true", help="replace an existing --json this script did not write")
    p.add_argument("--seed", type=int, default=0, help="draws the faults, their order, targets and timing")
    p.add_argument("--kinds", default=",".join(KINDS), help=f"comma list, from {', '.join(KINDS)}")
    p.add_argument("--work-dir", help="where the runs go: a new or empty folder (default: a new temporary folder, kept)")
    p.add_argument("--hang-timeout", type=float, default=10.0, help="the runs' hang_timeout, seconds")
    p.add_argument("--nproc", type=int, default=2, help="ranks per launch")
    p.add_argument("--steps", type=int, help="optimizer steps of the run (default 6 x faults + 30); faults left "
                                             "when it ends are not injected")
    args = p.parse_args(argv)
    kinds = [k.strip() for k in args.kinds.split(",") if k.strip()]
    unknown = [k for k in kinds if k not in KINDS]
    if unknown or not kinds:
        p.error(f"--kinds: unknown {unknown}, expected some of {', '.join(KINDS)}")
    if args.faults < 1 or (args.steps is not None and args.steps < 2):
        p.error("--faults must be >= 1 and --steps >= 2")
    if args.nproc < 1:
        p.error(f"--nproc must be >= 1, got {args.nproc}")
    if not args.hang_timeout > 0:  # 0 would switch off the watchdog the hang faults need
        p.error(f"--hang-timeout must be > 0 seconds, got {args.hang_timeout}")
    return args, kinds


def main(argv=None) -> int:
    args, kinds = parse_args(argv)
    cli.claim_records(SCRIPT, args.overwrite, json=args.json)  # before the runs, not after ten minutes of them
    try:
        work = check_writable(args.work_dir or tempfile.mkdtemp(prefix="chaos-"), "--work-dir", create_dir=True)
        held = sorted(p.name for p in work.iterdir())
        if held:  # an earlier run's checkpoints would be resumed, and its faults never injected
            raise ValueError(f"--work-dir {work}: not empty (holds {', '.join(held[:3])}); a run needs a new or "
                             "empty folder: remove it yourself, or choose another")
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    # Each fault waits for 1-3 steps past the highest reached, and the run trains on (about 5 steps a
    # second) while a stopped agent is frozen: room for all of them.
    steps = args.steps or 6 * args.faults + 30
    report = chaos_run(work / "chaos", args.faults, kinds, args.seed, args.hang_timeout, args.nproc, steps)
    report["reference_wall_s"] = reference_run(work / "reference", report["num_steps"], args.hang_timeout,
                                               args.nproc)
    report = {**summarise(report), **compare(work / "chaos", work / "reference"), **report,
              "world_size": args.nproc, "seed": args.seed, "work_dir": str(work),
              "command": "python scripts/chaos.py " + " ".join(sys.argv[1:] if argv is None else argv)}
    print(json.dumps({k: v for k, v in report.items() if k != "faults"}, indent=1))
    if args.json:
        write_record(args.json, json.dumps(report, indent=1) + "\n", SCRIPT)
    ok = (report["faults_injected"] == args.faults and report["final_launch_exit"] == 0
          and report["final_weights_bit_identical"])
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
