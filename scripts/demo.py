"""The demo behind `make demo`: synthetic data -> train -> tune -> predict -> score, on CPU in minutes.

Runs the same commands a user would type (see README), each as its own
process, and prints how long each took. The result lands in runs/demo/:
submission.csv, score.json (`solution.evaluate --json`) and tune.json (dev
micro-F1 before and after threshold tuning).
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PY = sys.executable
CONFIG = "configs/train/demo.yaml"
OUT = Path("runs/demo")
sys.path.insert(0, str(ROOT))

from solution.common import cli  # noqa: E402
from solution.common.precision import cpu_native_bf16  # noqa: E402


def step(title: str, args: list, stdout=None) -> float:
    print(f"\n=== {title}\n$ {' '.join(['python'] + args)}", flush=True)
    t0 = time.perf_counter()
    result = subprocess.run([PY] + args, cwd=ROOT, stdout=stdout)
    if result.returncode != 0:
        sys.exit(f"demo: '{title}' failed with exit code {result.returncode}")
    return time.perf_counter() - t0


def build_parser():
    # No options: the demo's settings live in its config and commands; --help says what it runs.
    return cli.ArgumentParser(prog="python scripts/demo.py", description=__doc__.split("\n\n")[0],
                              epilog="The same as `make demo`. " + __doc__.split("\n\n")[1].replace("\n", " "))


def main(argv=None) -> int:
    build_parser().parse_args(argv)
    times = {}
    # data/synth is the demo's own folder (`make clean` removes it): written again, whoever wrote it before.
    times["synth"] = step("1/5 make the synthetic corpus", ["-m", "solution.synth", "--out", "data/synth",
                                                            "--overwrite"])
    # runs/demo is the demo's own folder: `make demo` again starts over in it.
    train = ["-m", "solution.train", "--config", CONFIG, "--overwrite_output_dir", "true"]
    if not cpu_native_bf16():  # emulated bf16 is several times slower than float32: the demo would take an hour
        print("demo: this CPU has no native bf16 (AVX512-BF16 or AMX): training in float32")
        train += ["--mixed_precision", "no"]
    times["train"] = step("2/5 fine-tune MiniLM, scoring dev each epoch", train)
    times["tune"] = step("3/5 tune the answer thresholds on dev", [
        "-m", "submission.predict", "--model", str(OUT / "model"), "--input", "data/synth/simplified-nq-dev.jsonl",
        "--output", str(OUT / "dev-submission.csv"), "--scores-out", str(OUT / "dev-scores.jsonl")])
    with open(ROOT / OUT / "tune.json", "w") as f:
        times["tune"] += step("3/5 (cont.) search the thresholds, write them into the model directory", [
            "-m", "solution.evaluate", "--tune", "--scores", str(OUT / "dev-scores.jsonl"),
            "--gold", "data/synth/simplified-nq-dev.jsonl", "--model", str(OUT / "model"), "--json"], stdout=f)
    tuned = json.loads((ROOT / OUT / "tune.json").read_text())
    print(f"dev micro-F1: {tuned['before']['micro_f1']:.4f} untuned -> {tuned['after']['micro_f1']:.4f} tuned "
          f"(long {tuned['long_threshold']:.3f}, short {tuned['short_threshold']:.3f})")
    times["predict"] = step("4/5 write the submission", [
        "-m", "submission.predict", "--model", str(OUT / "model"), "--input", "data/synth/simplified-nq-test.jsonl",
        "--output", str(OUT / "submission.csv")])
    with open(ROOT / OUT / "score.json", "w") as f:
        times["score"] = step("5/5 score it with the competition metric", [
            "-m", "solution.evaluate", "--submission", str(OUT / "submission.csv"),
            "--gold", "data/synth/simplified-nq-test-gold.jsonl", "--json"], stdout=f)
    result = json.loads((ROOT / OUT / "score.json").read_text())
    from solution.scoring.metric import format_report

    print("\n" + format_report(result))
    total = sum(times.values())
    print("\ntimes: " + ", ".join(f"{k} {v:.0f}s" for k, v in times.items()) + f", total {total:.0f}s")
    print(f"synthetic test micro-F1: {result['micro_f1']:.4f}  ({OUT / 'submission.csv'}, {OUT / 'score.json'})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
