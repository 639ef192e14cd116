"""The ranking pass: each training page's windows in the order the first pass keeps them, written once, so
that training's negatives are the windows inference will run.

    python -m solution.rank_windows --out runs/x/rankings.jsonl --device cuda \\
        --config configs/train/nq-profile.yaml --first_pass meaning --first_pass_keep_first 2
    python -m solution.train --config configs/train/nq-profile.yaml --first_pass meaning \\
        --first_pass_keep_first 2 --top_window_ranking_file runs/x/rankings.jsonl

Training keeps every no-answer window among a page's `top_window_keep` first-ranked windows, the ones a
reader limited to `max_windows_per_document` is run on. Featurisation ranks them by the first pass's word
part (stems for `meaning` and `fused`): sentence vectors of every training page cost ~2 CPU seconds a page, too
much for the featurising workers. A reader trained on stems' windows and read with meaning's is then run on
windows it was never taught to turn down (docs/answers-record.md). This pass ranks every page with the first
pass itself, on the device given (a GPU embeds a page's sentences in milliseconds), and training reads the
file (`sampling.top_window_ranking_file`).

Every option but --out, --device, --overwrite and --quiet is training's own command line (`--config FILE`
and `--name value` settings), read as `solution.train` reads it: the training file, its line limit, the
tokenizer and the window settings, the first pass among them, are the ones training will featurise with.
The file is JSON lines: a header (format, the window settings, the tokenizer's fingerprint, the training
file), then per page its example_id, its number of windows and the indices of its windows holding a
candidate, first-kept first. Training refuses a file whose header differs from its own settings, and a page
whose windows are not the ones ranked. No accelerate or deepspeed here: one process.
"""

from __future__ import annotations

import json
import os
import sys
import time

from solution.common.cli import ArgumentParser, progress
from solution.common.fsutil import atomic_output, claim_output, file_digest, starts_with
from solution.windows.sampling import RANKINGS_FORMAT, RANKINGS_VERSION

PROG = "python -m solution.rank_windows"


def header(cfg, tokenizer) -> dict:
    """The file's first line: what made the windows and the ranking (`WindowRankings.check` compares it with
    training's own), and the training file it ranks."""
    from solution.windows.dataset import rankings_made_with

    return {"format": RANKINGS_FORMAT, "version": RANKINGS_VERSION, **rankings_made_with(tokenizer, cfg.window),
            "train_file": os.path.abspath(cfg.train_file), "train_file_sha256": file_digest(cfg.train_file),
            "max_train_examples": cfg.max_train_examples}


def ranked_pages(cfg, tokenizer, embed, stats):
    """(example_id, windows, ranking) of each training page, as featurisation reads and cuts them."""
    from solution.data.nq import read_examples
    from solution.windows.featurizer import Featurizer
    from solution.windows.first_pass import candidate_window_indices, ranked_window_indices

    examples = read_examples(cfg.train_file, cfg.on_error, stats, require_annotations=True,
                             max_lines=cfg.max_train_examples, check_duplicates=False)
    for ex, windows in Featurizer(tokenizer, cfg.window).featurize(examples, with_labels=True):
        pool = candidate_window_indices(ex, windows)
        ranking = ranked_window_indices(ex, windows, cfg.window.first_pass, embed, pool, cfg.window.first_pass_keep_first)
        yield ex.example_id, len(windows), ranking


def rank_file(cfg, out: str, device: str = "cpu", quiet: bool = False) -> dict:
    """Write `out` (claimed by the caller) for training config `cfg`; returns the counts."""
    from solution.data.nq import ReadStats
    from solution.model.qa_model import load_tokenizer
    from solution.model.sentences import shared_encoder
    from solution.windows.featurizer import add_structure_tokens
    from solution.windows.first_pass import SENTENCE_METHODS

    tokenizer = load_tokenizer(cfg.model_name_or_path)
    add_structure_tokens(tokenizer, cfg.window)  # as the trainer does before it featurises
    embed = (shared_encoder(cfg.window.first_pass_model, device).embed
             if cfg.window.first_pass in SENTENCE_METHODS else None)
    stats, counts, t0 = ReadStats(path=cfg.train_file), {"pages": 0, "windows": 0, "ranked": 0}, time.perf_counter()
    with atomic_output(out, "w") as f, progress(desc="ranking", unit=" pages", disable=quiet) as bar:
        f.write(json.dumps(header(cfg, tokenizer)) + "\n")
        for example_id, num_windows, ranking in ranked_pages(cfg, tokenizer, embed, stats):
            f.write(json.dumps({"example_id": example_id, "windows": num_windows, "ranking": ranking}) + "\n")
            counts["pages"] += 1
            counts["windows"] += num_windows
            counts["ranked"] += len(ranking)
            bar.update()
    return counts | {"seconds": round(time.perf_counter() - t0, 1), "skipped": stats.num_skipped,
                     "read_report": stats.report()}


def parse(argv):
    """(this command's options, training's config) from the command line."""
    from solution.training.config import load_config, parse_command_line

    p = ArgumentParser(prog=PROG, description=__doc__.split("\n\n")[0], allow_abbrev=False,
                       epilog="Every other option is training's: --config FILE and --name value settings "
                              "(python -m solution.train --help lists them).")
    p.add_argument("--out", required=True, help="the rankings file to write (JSON lines)")
    p.add_argument("--device", default="cpu", help="where the sentence encoder runs (cpu, cuda, cuda:1; default cpu)")
    p.add_argument("--overwrite", action="store_true", help="replace an existing --out this command did not write")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    args, rest = p.parse_known_args(argv)
    try:
        cfg = load_config(*parse_command_line(rest, PROG, "training's settings"))
    except ValueError as e:
        p.error(str(e))
    if cfg.data_source != "files" or not cfg.train_file:
        p.error("training's settings name no train_file (data_source files): there is nothing to rank")
    return p, args, cfg


def check(p, args, cfg) -> None:
    """Every input and the output, before the encoder loads and the first page is ranked."""
    from solution.common.devices import check_device
    from solution.data.nq import check_input_file

    try:
        check_input_file(cfg.train_file)
    except (ValueError, FileNotFoundError) as e:
        p.error(f"train_file {e}")
    try:
        check_device(args.device)
        claim_output(args.out, "--out", owned=starts_with(json.dumps({"format": RANKINGS_FORMAT})[:-1].encode()),
                     overwrite=args.overwrite, inputs=[("train_file", cfg.train_file)])
    except (ValueError, FileNotFoundError) as e:
        p.error(str(e))


def main(argv=None) -> int:
    p, args, cfg = parse(sys.argv[1:] if argv is None else argv)
    check(p, args, cfg)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    try:
        c = rank_file(cfg, args.out, args.device, args.quiet)
    except (ValueError, OSError) as e:  # OSError: a full disk (DiskFullError names the path and free space)
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(f"wrote {args.out}: {c['pages']} pages, {c['ranked']} of their {c['windows']} windows ranked by "
          f"{cfg.window.first_pass} (the first {cfg.window.first_pass_keep_first} of a page kept first) in "
          f"{c['seconds']:.1f}s on {args.device}; train with --top_window_ranking_file {args.out} and the same "
          "settings (training file, tokenizer, window settings)")
    if c["skipped"]:
        print(f"WARNING: {c['read_report']}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
