"""Build the offline Kaggle kernel folder, and with --dataset-id what uploading it as a Kaggle dataset needs.

    python scripts/make_kaggle_kernel.py --model DIR [--model DIR2 ... --weights 2,1] --out kernel/ \\
        [--dataset-id USER/SLUG]

The folder is what a Kaggle dataset holds and a code-competition notebook
runs with internet off and no custom packages:

    kernel/
      run.py          python run.py  (Kaggle paths)  |  python run.py --input TEST.jsonl --output CSV
      model/          the model directory's own files (safetensors, config, tokenizer, qa_config.json:
                      qa_model.MODEL_DIR_FILES); anything else in it is left out and named in a
                      warning, and a symbolic link in it is refused (its content lies elsewhere);
                      an ensemble has model-1/, model-2/, ... instead, averaged as
                      `submission.predict --model ... --weights ...` does
      code/solution/  the reading, windowing, model, post-processing and inference modules
      code/submission/predict.py
      polarity/       with --polarity-model: the model that reads YES or NO where the answer is
                      one (`submission.predict --polarity-model`), its own files as model/'s
      MANIFEST.json   what was copied, from where, with sizes; its "made_by" marks the folder as
                      this tool's: a later run replaces such a folder (holding nothing else), and
                      refuses any other existing folder, a file, the model directories and the
                      checkout's source folders (one line naming it, nothing removed)
      dataset-metadata.json, notebook.ipynb   with --dataset-id: the Kaggle dataset's metadata, and
                      a one-cell notebook running /kaggle/input/SLUG/run.py

Upload: `kaggle datasets create -p kernel/ --dir-mode zip` (without --dir-mode
the Kaggle CLI skips subfolders, so model/ and code/ would be missing). Then
add the dataset to a notebook of the competition (or import notebook.ipynb),
internet off, and run it.

What Kaggle's Python image has: torch, numpy, transformers 4.x (its
requirements ask transformers>=4.51) and datasets, but never accelerate or
deepspeed, and a code competition allows no internet to install anything.
So only modules that import torch, transformers, numpy, tqdm (a dependency
of transformers) and the standard library are copied, and run.py is tested
under transformers 4.x as well as the 5.x we pin (tests/experiments/test_kaggle_kit.py).
The copied code does not import datasets either: it is not needed, and the
kernel then runs on any image with torch and transformers.
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from solution.experiments.kit import build, check_kit, check_pages  # noqa: E402


def main(argv=None) -> int:
    from solution.common.cli import ArgumentParser  # --dataset-id and --dataset_id alike

    p = ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", required=True, action="append",
                   help="model directory (output_dir/model, or from solution.consolidate); repeat it for an "
                        "ensemble (see python -m submission.predict --help)")
    p.add_argument("--weights", default=None, metavar="W1,W2,...", help="one weight per --model (default: equal)")
    p.add_argument("--polarity-model", default=None, metavar="DIR",
                   help="a model directory packed as polarity/: where --model's answer is YES or NO, its type scores "
                        "on that page decide which (submission.predict --polarity-model)")
    p.add_argument("--out", default="kernel",
                   help="folder to write; an existing one is replaced only if this tool wrote it (its MANIFEST.json "
                        "says so and it holds nothing else), else refused")
    p.add_argument("--dataset-id", default=None, metavar="USER/SLUG",
                   help="the Kaggle dataset to upload the folder as: also writes dataset-metadata.json and "
                        "notebook.ipynb (one cell: !python /kaggle/input/SLUG/run.py), and prints the upload command")
    p.add_argument("--pages", default=None, metavar="JSONL",
                   help="simplified-NQ pages (e.g. a dev file) to measure the windows per document the packed models "
                        "run on; without it the projection assumes the real NQ sample's mean (41)")
    p.add_argument("--pages-limit", type=int, default=200, help="documents of --pages to measure (default: %(default)s)")
    p.add_argument("--num-documents", type=int, default=30_738,
                   help="test documents the GPU-time projection is for (default: %(default)s, MLE-bench's test set)")
    p.add_argument("--title", default=None, help="the dataset's title (default: from SLUG)")
    p.add_argument("--license", default="other", help="the dataset's license name in Kaggle's list (default: other)")
    args = p.parse_args(argv)
    try:  # before anything is written
        if args.pages:
            check_pages(args.pages)
        if args.num_documents < 1:
            raise ValueError(f"--num-documents must be >= 1, got {args.num_documents}")
        if args.pages_limit < 1:
            raise ValueError(f"--pages-limit must be >= 1, got {args.pages_limit}")
        model_dirs = check_kit(args.model, Path(args.out), args.weights, args.dataset_id, args.polarity_model)
        from solution.experiments.kernel_budget import format_projection, project

        # --pages is read here, before the folder is made: a page that cannot be read leaves nothing behind.
        projection = format_projection(project(args.model, args.pages, args.num_documents, args.pages_limit))
        m = build(model_dirs, Path(args.out), args.weights, args.dataset_id, args.title, args.license,
                  args.polarity_model)
    except (ValueError, OSError) as e:  # OSError: a full disk (DiskFullError names the path), an unmakeable folder
        print(f"error: {e}", file=sys.stderr)
        return 2
    if m["skipped"]:
        print(f"warning: not packed (not part of a model directory): {', '.join(m['skipped'])}", file=sys.stderr)
    print(f"kernel folder {args.out}: run.py, {', '.join(dict.fromkeys(m['models']))}"
          f"{' and ' + m['polarity_model'] + '/' if m.get('polarity_model') else ''} "
          f"({m['model_bytes'] / 2**20:.1f} MiB), {len(m['code'])} code files")
    print(projection)
    print(f"dry run: python {args.out}/run.py --input data/synth/simplified-nq-test.jsonl --output /tmp/submission.csv")
    if args.dataset_id:
        # --dir-mode zip: without it the Kaggle CLI uploads only the folder's top-level files.
        print(f"upload: kaggle datasets create -p {args.out} --dir-mode zip")
        print(f"then: a notebook of the competition with the dataset {args.dataset_id} added and internet off, "
              f"running {args.out}/notebook.ipynb's one cell: !python /kaggle/input/{args.dataset_id.split('/')[1]}/run.py")
    else:
        print("to upload it as a Kaggle dataset: add --dataset-id USER/SLUG (writes dataset-metadata.json)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
