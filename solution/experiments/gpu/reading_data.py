"""The reading part's data (`python -m solution.experiments.gpu.reading_data`): the training files of the
curve and of the yes/no models as unions of part files, dev and test with the yes/no pages added, and the
training files' feature cache entries, each page featurised once.

    python -m solution.experiments.gpu.reading_data --dir WORK/reading --backbone MINILM --sizes 8000,16000,32000 \
        --yes-no-train 3 --replay 1600 --num-proc 16 -- STAGE2_OVERRIDES

DIR/corpus holds `solution.synth_more`'s pages (its training file has the largest size's pages), DIR/yes-no-eval
the yes/no pages added to dev and test, DIR/yes-no-trainK the yes/no training pages. Written to DIR/data:
part-K.jsonl (the training file's pages between two sizes) and part-yes-no.jsonl, train-N.jsonl for each size
N (parts 0..), train-N-yes-no.jsonl (the largest size and the yes/no part), dev.jsonl, test.jsonl and
test-gold.jsonl, and data.json (what was written, and each entry's windows and seconds). STAGE2_OVERRIDES
are the trainings' own settings (`--config FILE --name value ...`), so the entries are the ones they look for.
With --replay N, the polarity stage's entries too: the yes/no part under WHOLE_PARAGRAPH_LABELS, and
replay-N.jsonl (the training file's first N pages) under stage 2's own settings.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

CORPUS_FILES = {"dev": "simplified-nq-dev.jsonl", "test": "simplified-nq-test.jsonl",
                "test-gold": "simplified-nq-test-gold.jsonl"}
MARKER = "data.json"
# The polarity stage's first training: YES/NO labelled only on windows holding the whole paragraph, and only
# the answer windows kept (docs/answers-techniques.md, "What reading the polarity takes").
WHOLE_PARAGRAPH_LABELS = ("--long_overrun_yes_no", "false", "--negative_keep_rate", "0.0001", "--top_window_keep", "0")


def parse_args(argv):
    p = argparse.ArgumentParser(prog="python -m solution.experiments.gpu.reading_data",
                                description=__doc__.split("\n\n")[0])
    p.add_argument("--dir", required=True, help="the reading part's folder (WORK/reading)")
    p.add_argument("--backbone", required=True, help="the tokenizer's model (stage 1's backbone: the same tokenizer)")
    p.add_argument("--sizes", required=True, help="the training files' pages, comma-separated, increasing")
    p.add_argument("--yes-no-train", type=int, required=True, help="how many DIR/yes-no-trainK folders there are")
    p.add_argument("--replay", type=int, default=0,
                   help="the polarity stage's replay pages (the training file's first N); 0: no polarity stage")
    p.add_argument("--num-proc", type=int, default=1, help="featurising processes")
    p.add_argument("overrides", nargs=argparse.REMAINDER, help="-- then stage 2's settings (--config FILE ...)")
    args = p.parse_args(argv)
    args.sizes = [int(x) for x in args.sizes.split(",")]
    if not args.sizes or args.sizes != sorted(set(args.sizes)) or args.sizes[0] < 1:
        p.error(f"--sizes {args.sizes}: positive and increasing")
    if not 0 <= args.replay <= args.sizes[-1]:
        p.error(f"--replay {args.replay}: from 0 to the largest size, {args.sizes[-1]}")
    args.overrides = args.overrides[1:] if args.overrides[:1] == ["--"] else args.overrides
    if "--config" not in args.overrides[:-1]:
        p.error("give stage 2's settings after --, its --config first among them")
    return args


def read_lines(path: Path) -> list:
    # "\n" alone ends a line, as the reader and the cache's assembly split them (str.splitlines would also
    # split at \x85 or \u2028 inside a JSON string).
    return [line for line in path.read_text(encoding="utf-8").split("\n") if line.strip()]


def write_lines(path: Path, lines: list) -> Path:
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def data_folder(root: Path) -> Path:
    """DIR/data, new or one this command wrote (its data.json): a folder of other files is not written over."""
    data = root / "data"
    if data.exists() and any(data.iterdir()) and not (data / MARKER).is_file():
        raise SystemExit(f"error: {data} holds files this command did not write (no {MARKER}); give another --dir")
    data.mkdir(parents=True, exist_ok=True)
    # The marker first: a step stopped midway leaves a folder a second run may write again.
    (data / MARKER).write_text(json.dumps({"complete": False}) + "\n")
    return data


def training_files(root: Path, data: Path, sizes: list, yes_no_folders: int) -> dict:
    """{training file: [its part files]}: each size's file is the parts up to it; the yes/no file the largest
    size's parts and the yes/no part."""
    pages = read_lines(root / "corpus" / "simplified-nq-train-more.jsonl")
    if len(pages) < sizes[-1]:
        raise SystemExit(f"error: {root / 'corpus'}: {len(pages)} training pages, fewer than --sizes' {sizes[-1]}")
    bounds = [0, *sizes]
    parts = [write_lines(data / f"part-{k}.jsonl", pages[a:b]) for k, (a, b) in enumerate(zip(bounds, bounds[1:]))]
    yes_no = [line for k in range(yes_no_folders)
              for line in read_lines(root / f"yes-no-train{k}" / "simplified-nq-train.jsonl")]
    yes_no_part = write_lines(data / "part-yes-no.jsonl", yes_no)
    files = {}
    for k, n in enumerate(sizes):
        files[write_lines(data / f"train-{n}.jsonl", pages[:n])] = parts[:k + 1]
    files[write_lines(data / f"train-{sizes[-1]}-yes-no.jsonl", pages[:sizes[-1]] + yes_no)] = [*parts, yes_no_part]
    return files


def polarity_files(root: Path, data: Path, replay: int) -> dict:
    """The polarity stage's training files: {"whole": the yes/no part (trained under WHOLE_PARAGRAPH_LABELS),
    "replay": replay-N.jsonl, the training file's first `replay` pages}."""
    pages = read_lines(root / "corpus" / "simplified-nq-train-more.jsonl")[:replay]
    return {"whole": data / "part-yes-no.jsonl", "replay": write_lines(data / f"replay-{replay}.jsonl", pages)}


def eval_files(root: Path, data: Path) -> dict:
    """dev, test and test-gold with the yes/no pages added after corpus seed 0's; {name: lines}."""
    out = {}
    for name, file in CORPUS_FILES.items():
        lines = read_lines(root / "corpus" / file) + read_lines(root / "yes-no-eval" / file)
        ids = [json.loads(line)["example_id"] for line in lines]
        if len(set(map(str, ids))) != len(ids):  # 64-bit random ids: a clash would be a bug, not luck
            raise SystemExit(f"error: {root / 'yes-no-eval' / file}: an example_id is also in {root / 'corpus' / file}")
        write_lines(data / f"{name}.jsonl", lines)
        out[name] = len(lines)
    return out


def featurise(files: dict, args, extra: tuple = ()) -> dict:
    """Each training file's cache entry under stage 2's settings and `extra`, assembled from its parts' (each
    part featurised once): {file: figures}."""
    from solution.model.qa_model import load_tokenizer
    from solution.training.config import load_config
    from solution.windows.assemble import assemble_train_features

    tokenizer = load_tokenizer(args.backbone)
    k = args.overrides.index("--config")
    config, rest = args.overrides[k + 1], args.overrides[:k] + args.overrides[k + 2:]
    out = {}
    for path, parts in files.items():
        cfg = load_config(config, [*rest, *extra, "--train_file", str(path)])
        t0 = time.perf_counter()
        _, summary = assemble_train_features(
            str(path), [str(p) for p in parts], tokenizer, cfg.window, cfg.sampling, cfg.cache_dir,
            on_error=cfg.on_error, limit=cfg.max_train_examples, seed=cfg.seed, num_proc=args.num_proc)
        name = path.name + (" (whole-paragraph labels)" if extra else "")
        out[name] = {"parts": [p.name for p in parts], "documents": summary["documents"],
                     "windows_kept": summary["windows_kept"], "seconds": round(time.perf_counter() - t0, 1)}
        print(f"{name}: {summary['documents']} pages, {summary['windows_kept']} windows "
              f"({out[name]['seconds']} s)", flush=True)
    return out


def main(argv=None) -> int:
    args = parse_args(argv)
    root = Path(args.dir)
    t0 = time.perf_counter()
    data = data_folder(root)
    (root / "pred").mkdir(exist_ok=True)  # the predictions' folder: submission.predict makes no folder
    files = training_files(root, data, args.sizes, args.yes_no_train)
    entries = featurise(files, args)
    if args.replay:
        polarity = polarity_files(root, data, args.replay)
        entries |= featurise({polarity["replay"]: [polarity["replay"]]}, args)
        entries |= featurise({polarity["whole"]: [polarity["whole"]]}, args, WHOLE_PARAGRAPH_LABELS)
    record = {"complete": True, "eval": eval_files(root, data), "entries": entries}
    record["seconds"] = round(time.perf_counter() - t0, 1)
    (data / MARKER).write_text(json.dumps(record, indent=2) + "\n")
    print(json.dumps(record))
    return 0


if __name__ == "__main__":
    sys.exit(main())
