"""Build the offline Kaggle kernel folder: `python scripts/make_kaggle_kernel.py --model DIR --out kernel/`.

The folder is what a Kaggle dataset holds and a code-competition notebook
runs with internet off and no custom packages:

    kernel/
      run.py          python run.py  (Kaggle paths)  |  python run.py --input TEST.jsonl --output CSV
      model/          the model directory (safetensors, config, tokenizer, qa_config.json)
      code/solution/  the reading, windowing, model, post-processing and inference modules
      code/submission/predict.py
      MANIFEST.json   what was copied, from where, with sizes

Only modules that import torch, transformers, numpy and the standard library
are copied: never accelerate, deepspeed or datasets (the kernel has none of
them). In a notebook cell: `!python /kaggle/input/<dataset>/run.py`.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# The inference path and nothing else (each of these imports only torch, transformers, numpy, stdlib).
CODE = ["solution/__init__.py", "solution/nq.py", "solution/windows.py", "solution/postprocess.py",
        "solution/inference.py", "solution/model.py", "submission/__init__.py", "submission/predict.py"]
FORBIDDEN = ("accelerate", "deepspeed", "datasets")

RUN_PY = '''"""Kaggle TF2 QA submission, offline: python run.py [--input TEST.jsonl] [--output submission.csv] [--precision auto|fp32|bf16]

Defaults are the competition's paths. The model is the folder beside this file.
Prints documents/s, windows/s and the projected time per 1,000 real-length
documents (about 40 windows each) against the notebook limits.
"""
import argparse
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


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\\n\\n")[0])
    p.add_argument("--input", default=KAGGLE_INPUT)
    p.add_argument("--output", default=KAGGLE_OUTPUT)
    p.add_argument("--precision", choices=("auto", "fp32", "bf16"), default="auto",
                   help="auto: bfloat16 where the CPU/GPU computes it natively, else float32")
    p.add_argument("--batch-size", type=int, default=32)
    args = p.parse_args()
    import torch
    from submission.predict import predict_file

    device = "cuda" if torch.cuda.is_available() else "cpu"
    t0 = time.perf_counter()
    r = predict_file(str(HERE / "model"), args.input, args.output, args.batch_size, device, args.precision)
    dt = time.perf_counter() - t0
    wps = r["windows"] / dt if dt else 0.0
    print(f"wrote {args.output}: {r['rows']} rows, {r['documents']} documents, {r['windows']} windows run "
          f"in {dt:.1f}s on {device} ({r['precision']}): {r['documents'] / dt:.2f} documents/s, {wps:.1f} windows/s")
    if wps:
        hours = 1000 * WINDOWS_PER_REAL_DOCUMENT / wps / 3600
        limit = LIMITS_H["GPU notebook" if device == "cuda" else "CPU notebook"]
        print(f"projected: {hours:.2f} h per 1,000 real-length documents at these windows "
              f"({'within' if hours <= limit else 'OVER'} the {limit:.0f} h {'GPU' if device == 'cuda' else 'CPU'} "
              f"notebook limit per 1,000 documents)")
    failed = len(r["failed"]) + len(r["lines_without_id"]) + (1 if r["fatal"] else 0)
    for item in r["failed"][:20]:
        print(f"FAILED {item['example_id']}: {item['error']} -> written blank", file=sys.stderr)
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
'''


def build(model_dir: Path, out: Path) -> dict:
    if not (model_dir / "qa_config.json").is_file() or not (model_dir / "model.safetensors").is_file():
        raise ValueError(f"{model_dir}: not a model directory (needs qa_config.json and model.safetensors)")
    if out.exists():
        shutil.rmtree(out)
    (out / "code").mkdir(parents=True)
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
    shutil.copytree(model_dir, out / "model")
    (out / "run.py").write_text(RUN_PY)
    size = sum(p.stat().st_size for p in (out / "model").rglob("*") if p.is_file())
    manifest = {"model_from": str(model_dir.resolve()), "model_bytes": size, "code": copied,
                "entry": "run.py", "needs": ["torch", "transformers", "numpy", "safetensors"]}
    (out / "MANIFEST.json").write_text(json.dumps(manifest, indent=2) + "\n")
    return manifest


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", required=True, help="model directory (output_dir/model, or from solution.consolidate)")
    p.add_argument("--out", default="kernel", help="folder to write (replaced)")
    args = p.parse_args(argv)
    try:
        m = build(Path(args.model), Path(args.out))
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(f"kernel folder {args.out}: run.py, model ({m['model_bytes'] / 2**20:.1f} MiB), {len(m['code'])} code files")
    print(f"dry run: python {args.out}/run.py --input data/synth/simplified-nq-test.jsonl --output /tmp/submission.csv")
    return 0


if __name__ == "__main__":
    sys.exit(main())
