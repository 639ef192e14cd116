"""The GPU check's `reading` part: the recipe on `nq-shaped` pages at the GPU's scale, in one call.

What the CPU cannot do (docs/training.md, "The reading part"): stage 2 on 8,000, 16,000 and 32,000 pages for
seed 0 and on 32,000 for seed 1, and the same 32,000 with balanced yes/no pages added for both seeds; each
model scored on 400 dev and 600 test pages with 80 yes/no pages added to each, by the words first pass and
(the 32,000-page models) by meaning, beside the no-training rows. It fits one call because:

- the pages are made on every core, and corpus seed 0 contributes only its dev and test pages (its training
  split is one page: the split seeds do not depend on the counts, so dev and test are corpus seed 0's);
- every page is featurised once: the training files are unions of four part files (`reading_data`), each
  featurised once and the four training files' cache entries assembled from them
  (`solution.windows.assemble`), and both seeds draw the kept no-answer windows from one sampling seed;
- the six stage-2 trainings share the GPU at once (MiniLM's step of 32 windows leaves it mostly idle), and
  the predictions and the no-training rows run beside each other on the host's cores;
- beside the words predictions, each seed's polarity stage (six passes over the yes/no pages' whole-paragraph
  windows from its yes/no model, then one over the first REPLAY ordinary pages) and that yes/no model's
  predictions with it as `--polarity-model`, their windows featurised in the data step.

The commands run in groups (`commands.Group`), each group after the one before; `reading_figures` makes
the rows from what the predictions wrote, first with the words first pass, then again with meaning's.
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

from solution.experiments.gpu import recipe
from solution.experiments.gpu.commands import Group
from solution.experiments.gpu.reading_data import WHOLE_PARAGRAPH_LABELS
from solution.experiments.gpu.reading_figures import POLARITY_SUFFIX

PROFILE = "nq-shaped"
CONFIG = "configs/train/nq-profile.yaml"  # stage 2; stage 1 is the demo's training, as in the recipe part
SIZES = (8000, 16000, 32000)  # the curve, seed 0; the largest is every model's but the curve's
SEEDS = (0, 1)
EVAL = {"num_dev": 400, "num_test": 600}
YES_NO_EVAL = 80  # yes/no pages added to dev and to test (corpus seed 1, two YES to a NO)
# Yes/no training pages added for the yes_no models: two files of two YES to a NO and one of NO alone, so the
# added pages hold as many NO as YES answers (1,600 each), on the windows the main models train on.
YES_NO_TRAIN = (("YES,NO", 2, 1200), ("YES,NO", 3, 1200), ("NO", 4, 800))
# The polarity stage (docs/answers-techniques.md, "A polarity model beside the answer model"): on the CPU, 1,600
# yes/no pages seen six times with whole-paragraph labels, then 800 ordinary pages once; here the 3,200 yes/no
# training pages and half as many ordinary ones, the same proportion.
POLARITY_EPOCHS = 6
REPLAY = 1600
BATCH = 32  # on the H100 a step of 32 windows takes no longer than one of 8 (docs/training.md)
LEARNING_RATE = recipe.recipe_learning_rate(BATCH)  # 2e-4: the recipe's 1e-4 at 8, by the square root of the growth
SAMPLING_SEED = 0  # both seeds keep the same no-answer windows: one featurisation serves them
KEEP_FIRST = 2  # the meaning first pass keeps a page's first 2 windows (docs/answers-first-pass.md)
THREADS = "2"  # each of the processes running at once: more would only fight over the host's cores
FIGURES_RESERVE_S = 45.0  # of the budget, kept from the groups for the last figures (scoring ~20 s on the host)
# --dry-run: the same commands on a few short pages of the CPU (the sentence encoder reads every sentence of a
# page: at the profile's lengths the meaning first pass alone would take minutes there).
DRY = {"sizes": (8, 16, 32), "eval": {"num_dev": 4, "num_test": 6}, "yes_no_eval": 3, "replay": 5,
       "yes_no_train": (("YES,NO", 2, 4), ("YES,NO", 3, 4), ("NO", 4, 2)), "words": ["--min-words", "300", "--max-words", "800"]}
# What OUT/reading keeps of WORK/reading: the rows, the predictions' scores and each training's metrics.
KEPT = ("rows.json", "references.json", "pred/*-scores.jsonl", "*/metrics.jsonl", "*/model/qa_config.json",
        "data/data.json")
TRAININGS = ("stage*-*/metrics.jsonl", "polarity*-s*/metrics.jsonl")  # the trainings gpu_check.json reports


def sizes(args) -> dict:
    """The curve's sizes, dev and test pages and the yes/no pages, shrunk by --dry-run."""
    if args.dry_run:
        return dict(DRY)
    return {"sizes": SIZES, "eval": dict(EVAL), "yes_no_eval": YES_NO_EVAL, "yes_no_train": YES_NO_TRAIN,
            "replay": REPLAY, "words": []}


def reading_dir(args) -> Path:
    return Path(args.work) / "reading"


def models(args) -> dict:
    """{name: (seed, training file name)}: the curve (seed 0), the largest size for each seed, and the yes/no
    models (the largest size with the yes/no training pages) for each seed."""
    top = sizes(args)["sizes"][-1]
    out = {f"p{n}-s0": (0, f"train-{n}.jsonl") for n in sizes(args)["sizes"]}
    out |= {f"p{top}-s{s}": (s, f"train-{top}.jsonl") for s in SEEDS}
    return out | {f"yes-no-s{s}": (s, f"train-{top}-yes-no.jsonl") for s in SEEDS}


def meaning_models(args) -> list:
    """The models predicted again with the meaning first pass: the largest size's of each seed."""
    top = sizes(args)["sizes"][-1]
    return [f"p{top}-s{s}" for s in SEEDS]


def threads(cmd: list) -> list:
    return ["env", f"OMP_NUM_THREADS={THREADS}", f"MKL_NUM_THREADS={THREADS}", "TOKENIZERS_PARALLELISM=false", *cmd]


def stage2_overrides(args) -> list:
    """Stage 2's settings shared by every model and by the featurisation that fills their cache: a setting
    that changes the windows (the window and sampling sections, the limit) must be the same in both, or the
    trainings would not find the entries made for them."""
    d = reading_dir(args)
    return ["--config", CONFIG, "--max_train_examples", "null", "--sampling_seed", str(SAMPLING_SEED),
            "--cache_dir", str(d / "cache"), "--on_error", "raise"]


def corpus_group(args) -> Group:
    """The pages: corpus seed 0's dev and test with the training file on every core; the yes/no pages added to
    dev and test; the yes/no training pages; the demo's easy pages for stage 1."""
    d, sz, py = reading_dir(args), sizes(args), sys.executable
    top = sz["sizes"][-1]
    dry = ["--shard-pages", "10", *sz["words"]] if args.dry_run else []
    chains = {"reading-pages": [[py, "-m", "solution.synth_more", "--profile", PROFILE, "--out", str(d / "corpus"),
                                 "--seed", "0", "--num-train", "1", "--num-dev", str(sz["eval"]["num_dev"]),
                                 "--num-test", str(sz["eval"]["num_test"]), "--extra-train", str(top - 1),
                                 "--workers", str(max(args.num_proc - 4, 1)), *dry]],
              "reading-yes-no-eval": [yes_no_synth(d / "yes-no-eval", "YES,NO", 1, 1, sz["yes_no_eval"]) + sz["words"]],
              "reading-easy": [[py, "-m", "solution.synth", "--out", str(d / "easy"),
                                *(["--num-train", "20", "--num-dev", "4", "--num-test", "4"] if args.dry_run else [])]]}
    for k, (types, seed, n) in enumerate(sz["yes_no_train"]):
        chains[f"reading-yes-no-train{k}"] = [yes_no_synth(d / f"yes-no-train{k}", types, seed, n, 1) + sz["words"]]
    return Group(chains)


def data_group(args) -> Group:
    """The data step on the host's cores, and stage 1 of each seed on the GPU beside it (each needs a core)."""
    chains = {"reading-features": [data_command(args)]}
    return Group(chains | {f"reading-stage1-s{s}": [threads(stage1_command(args, s))] for s in SEEDS})


def yes_no_synth(out: Path, types: str, seed: int, train: int, eval_pages: int) -> list:
    return [sys.executable, "-m", "solution.synth", "--profile", PROFILE, "--answer-types", types, "--seed", str(seed),
            "--out", str(out), "--num-train", str(train), "--num-dev", str(eval_pages), "--num-test", str(eval_pages)]


def stage1_command(args, seed: int) -> list:
    d = reading_dir(args)
    tiny = ["--max_steps", "3", "--max_dev_examples", "2"] if args.dry_run else []
    return [sys.executable, "-m", "solution.train", "--config", "configs/train/demo.yaml",
            "--model_name_or_path", args.backbone, "--train_file", str(d / "easy" / "simplified-nq-train.jsonl"),
            "--dev_file", str(d / "easy" / "simplified-nq-dev.jsonl"), "--num_proc", "2",
            "--mixed_precision", "no" if args.dry_run else "bf16", "--seed", str(seed), "--eval_strategy", "no",
            "--cache_dir", str(d / "cache-easy"), "--output_dir", str(d / f"stage1-s{seed}"),
            "--overwrite_output_dir", "true", "--disable_tqdm", "true", *tiny]


def data_command(args) -> list:
    """`reading_data`: the training files and their parts, dev and test with the yes/no pages, every part
    featurised once (every core) and the training files' cache entries assembled."""
    d, sz = reading_dir(args), sizes(args)
    return [sys.executable, "-m", "solution.experiments.gpu.reading_data", "--dir", str(d), "--backbone", args.backbone,
            "--sizes", ",".join(map(str, sz["sizes"])), "--yes-no-train", str(len(sz["yes_no_train"])),
            "--replay", str(sz["replay"]), "--num-proc", str(args.num_proc), "--", *stage2_overrides(args)]


def stage2_command(args, name: str, seed: int, train_file: str) -> list:
    """Stage 2 from stage 1 of its seed into stage2-NAME."""
    d = reading_dir(args)
    return train_command(args, seed, train_file, d / f"stage1-s{seed}" / "model", d / f"stage2-{name}")


def train_command(args, seed: int, train_file: str, start: Path, out: Path, extra=()) -> list:
    """A training with stage 2's settings (and `extra`) from the model `start` into `out`."""
    d = reading_dir(args)
    tiny = ["--max_steps", "3"] if args.dry_run else []
    return [sys.executable, "-m", "solution.train", *stage2_overrides(args), *extra,
            "--model_name_or_path", str(start), "--train_file", str(d / "data" / train_file),
            "--dev_file", str(d / "data" / "dev.jsonl"), "--seed", str(seed), "--eval_strategy", "no",
            "--per_device_train_batch_size", str(BATCH), "--learning_rate", f"{LEARNING_RATE:g}",
            "--mixed_precision", "no" if args.dry_run else "bf16", "--num_proc", "2", "--disable_tqdm", "true",
            "--output_dir", str(out), "--overwrite_output_dir", "true", *tiny]


def polarity_chain(args, seed: int) -> list:
    """Seed `seed`'s polarity stage from its yes/no model (six passes over the yes/no part's whole-paragraph
    windows, then one over the replay pages), then that yes/no model's dev and test scores with it as
    `--polarity-model` (named yes-no-sN-polarity, which reading_figures pairs against yes-no-sN)."""
    d = reading_dir(args)
    answerer, whole, polarity = d / f"stage2-yes-no-s{seed}", d / f"polarity-whole-s{seed}", d / f"polarity-s{seed}"
    return [threads(train_command(args, seed, "part-yes-no.jsonl", answerer / "model", whole,
                                  [*WHOLE_PARAGRAPH_LABELS, "--num_train_epochs", str(POLARITY_EPOCHS)])),
            threads(train_command(args, seed, f"replay-{sizes(args)['replay']}.jsonl", whole / "model", polarity)),
            *(threads(predict_command(args, f"yes-no-s{seed}", "words", split, polarity / "model"))
              for split in ("dev", "test"))]


def train_group(args) -> Group:
    """Every stage 2 at once on the one GPU, and the cheap no-training rows on the host beside them."""
    chains = {f"reading-train-{name}": [threads(stage2_command(args, name, seed, file))]
              for name, (seed, file) in models(args).items()}
    chains["reading-references"] = [threads(figures_command(args, "--references", "lexical,bm25,first_paragraph"))]
    return Group(chains)


def predict_command(args, name: str, first_pass: str, split: str, polarity=None) -> list:
    """stage2-NAME's scores on dev or test; with the model folder `polarity` as its --polarity-model, written
    as NAME-polarity's."""
    d = reading_dir(args)
    pred = d / "pred" / f"{name}{POLARITY_SUFFIX if polarity else ''}-{first_pass}-{split}"
    sets = [] if first_pass == "words" else ["--set", "first_pass=meaning", "--set", f"first_pass_keep_first={KEEP_FIRST}",
                                             "--set", f"first_pass_model={args.backbone}"]
    return [sys.executable, "-m", "submission.predict", "--model", str(d / f"stage2-{name}" / "model"),
            "--input", str(d / "data" / f"{split}.jsonl"), "--output", f"{pred}.csv", "--scores-out",
            f"{pred}-scores.jsonl", "--device", args.device, "--quiet", "--overwrite", *sets,
            *(["--polarity-model", str(polarity)] if polarity else [])]


def predict_group(args, first_pass: str) -> Group:
    """Each model's dev and test scores under one first pass; with words, each seed's polarity stage and its
    scores; with meaning, the sentence-matching row too."""
    names = list(models(args)) if first_pass == "words" else meaning_models(args)
    chains = {f"reading-{first_pass}-{name}-{split}": [threads(predict_command(args, name, first_pass, split))]
              for name in names for split in ("dev", "test")}
    if first_pass == "words":
        chains |= {f"reading-polarity-s{s}": polarity_chain(args, s) for s in SEEDS}
    if first_pass == "meaning":
        chains["reading-references-sentences"] = [threads(figures_command(args, "--references", "sentences"))]
    return Group(chains)


def figures_command(args, *extra) -> list:
    """reading_figures on the reading folder; the device and the encoder only for the sentence row, the one
    that runs a model (reading_figures refuses them elsewhere)."""
    encoder = ["--device", args.device, "--sentence-model", args.backbone] if "sentences" in extra else []
    return [sys.executable, "-m", "solution.experiments.gpu.reading_figures", "--dir", str(reading_dir(args)),
            *encoder, *extra]


def reading_commands(args) -> list:
    """(name, kind, command) of the reading part, in order; each group waits for the one before."""
    return [("reading-corpus", "reading", corpus_group(args)),
            ("reading-data", "reading", data_group(args)),
            ("reading-train", "reading", train_group(args)),
            ("reading-predict-words", "reading", predict_group(args, "words")),
            ("reading-figures", "figures", figures_command(args, "--rows")),
            ("reading-predict-meaning", "reading", predict_group(args, "meaning")),
            ("reading-figures-meaning", "figures", figures_command(args, "--rows"))]


def reading_needs() -> dict:
    """What each group needs finished: the data every page; the trainings and predictions the data; the last
    figures the meaning predictions (without them the words figures are already written)."""
    return {"reading-data": ["reading-corpus"], "reading-train": ["reading-data"],
            "reading-predict-words": ["reading-data"], "reading-predict-meaning": ["reading-data"],
            "reading-figures-meaning": ["reading-predict-meaning"]}


def keep_reading_files(args) -> None:
    """Copy the small files of KEPT from WORK/reading to OUT/reading. With dev and test made again here (they do
    not depend on the machine: docs/training.md gives the commands), `reading_figures --rows` scores them again."""
    src, dst = reading_dir(args), Path(args.out) / "reading"
    for pattern in KEPT:
        for path in src.glob(pattern):
            if path.is_file():
                target = dst / path.relative_to(src)
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(path, target)


def reading_summary(args, result: dict) -> dict:
    """gpu_check.json's "reading": each group's seconds and what failed, each training's pages, windows, steps
    and windows/s (the median step: six at once on one GPU), and the latest figures."""
    runs = result["runs"]
    out = {name: {k: r.get(k) for k in ("ok", "wall_s", "failed")} for name, r in runs.items()
           if name.startswith("reading-")}
    trainings = {}
    for metrics in sorted(m for pattern in TRAININGS for m in reading_dir(args).glob(pattern)):
        records = [json.loads(line) for line in metrics.read_text().splitlines() if line.strip()]
        if records and "train_windows" in records[0]:
            trainings[metrics.parent.name] = recipe.stage_figures("train", records)
    out["trainings"] = trainings
    for name in ("reading-figures-meaning", "reading-figures"):
        if runs.get(name, {}).get("figures"):
            return out | {"figures": runs[name]["figures"]}
    return out
