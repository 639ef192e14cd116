"""The commands the answers benchmark launches: `solution.train` for each model (stage 2 from the seed's
stage 1), each kept under a name digesting its command, config and training file, so that a second run of
the same plan re-uses it."""

from __future__ import annotations

import functools
import hashlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]  # the repository: commands run there, configs are named from there
PY = sys.executable


class StepFailed(RuntimeError):
    pass


def run(args: list, stdout=None) -> float:
    """Run `python ARGS` in the project root; StepFailed names the command when it exits non-zero."""
    print(f"$ python {' '.join(args)}", flush=True)
    t0 = time.perf_counter()
    r = subprocess.run([PY] + args, cwd=ROOT, stdout=stdout, stderr=subprocess.PIPE, text=True)
    if r.returncode != 0:
        tail = r.stderr.strip().splitlines()[-1:] or [""]
        raise StepFailed(f"`python {' '.join(args[:2])} ...` exited {r.returncode}: {tail[0]}")
    return time.perf_counter() - t0


@functools.lru_cache(maxsize=None)
def file_digest(path: str) -> str:
    """A file's sha256, once per file a run (the training file is hashed for every model trained on it)."""
    from solution.common.fsutil import file_digest as digest

    return digest(path)


def precision_args() -> list:
    """float32 where the CPU has no native bf16: emulated bf16 trains ~14x slower (as `make demo` does)."""
    from solution.common.precision import cpu_native_bf16
    return [] if cpu_native_bf16() else ["--mixed_precision", "no"]


def train_run(name: str, args: list, config: str, train_file: str, out: Path) -> tuple:
    """`solution.train ARGS`, or the model trained from the same command on the same bytes; (model dir, seconds).

    The directory is named by a digest of the command, the config file and the training file, so a
    model of an earlier plan (other sizes, another corpus) is never taken for this one, nor overwritten."""
    from solution.common.fsutil import atomic_write_text

    key = hashlib.sha1(json.dumps([key_args(args), file_digest(str(ROOT / config)),
                                   file_digest(train_file)]).encode()).hexdigest()[:10]
    d = out / "models" / f"{name}-{key}"
    done = d / "benchmark_train.json"
    secs = trained_seconds(done) if (d / "model" / "qa_config.json").is_file() else None
    if secs is not None:
        return d / "model", secs
    # The plan's own folder: a training stopped midway there is started again, not continued.
    secs = run(["-m", "solution.train", *args, "--output_dir", str(d), "--overwrite_output_dir", "true"])
    atomic_write_text(done, json.dumps({"command": args, "train_seconds": round(secs, 1)}) + "\n")
    return d / "model", round(secs, 1)


def key_args(args: list) -> list:
    """The command as a model's name digests it: a path inside the repository spelt from the repository, as
    the commands run there, however --out was given (`runs/x` and `/checkout/runs/x` are one training and
    must find one model, not train it twice). Relative spellings, the usual ones, are kept as they are."""
    return [os.path.relpath(a, ROOT) if os.path.isabs(a) and Path(os.path.abspath(a)).is_relative_to(ROOT) else a
            for a in args]


def trained_seconds(done: Path) -> float | None:
    """The seconds a finished training recorded in its marker; None where there is none or it cannot be
    read (a marker cut short): that model is trained again."""
    from solution.common.jsonio import JsonError, read_json_object

    try:
        secs = read_json_object(done).get("train_seconds") if done.exists() else None
    except JsonError:
        return None
    return secs if isinstance(secs, (int, float)) and not isinstance(secs, bool) else None


def warm_start(seed: int, corpus: dict, plan: dict, out: Path) -> tuple:
    """Stage 1 of the recipe for this seed (trained once, shared by every stage 2 of the seed): the
    arguments that start stage 2 from its model, and its training seconds. ([], 0) without one."""
    ws = plan.get("warm_start")
    if not ws:
        return [], 0.0
    args = ["--config", ws["config"], "--seed", str(seed), "--train_file", corpus["warm_train"], "--dev_file",
            corpus["warm_dev"], "--eval_strategy", "no", "--disable_tqdm", "true", *precision_args()]
    model, secs = train_run(f"warm-seed{seed}", args, ws["config"], corpus["warm_train"], out)
    return ["--model_name_or_path", str(model), "--pretrained", "true"], secs


def train(name: str, seed: int, extra: list, corpus: dict, plan: dict, out: Path, pages: int | None = None,
          start: Path | None = None) -> tuple:
    """Train one model (stage 2 from the seed's stage 1, if the plan has one; from the model directory `start`
    where given) on the first `pages` training pages, every page of the corpus by default: the config's own
    max_train_examples would otherwise cap a larger corpus while the row said it had trained on all of it.
    `extra`'s {KEY} items are the corpus's (a technique's own training file). (model dir, seconds of both
    stages; of this training alone from `start`)."""
    warm, warm_secs = (["--model_name_or_path", str(start)], 0.0) if start else warm_start(seed, corpus, plan, out)
    extra = [corpus[a[1:-1]] if a.startswith("{") and a.endswith("}") else a for a in extra]
    args = ["--config", plan["config"], "--seed", str(seed), "--train_file", corpus["train"], "--dev_file",
            corpus["dev"], "--eval_strategy", "no", "--disable_tqdm", "true", *precision_args(),
            *corpus["train_overrides"], *warm, "--max_train_examples", str(pages or corpus["num_train_documents"]),
            *extra]
    train_file = args[len(args) - 1 - args[::-1].index("--train_file") + 1]  # the last one given is the one used
    model, secs = train_run(f"{name}-seed{seed}", args, plan["config"], train_file, out)
    return model, round(secs + warm_secs, 1)
