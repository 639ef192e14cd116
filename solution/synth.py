"""Synthetic Natural Questions in the exact Kaggle simplified-NQ format.

The project's embedded default corpus: the demo, the tests and CI train and
score on it with no download. Each document is a made-up Wikipedia article
about one fictional country (`Vemoria - wikipedia <H1> Vemoria </H1> ...`)
with an infobox table, sections, filler paragraphs, lists and tables, so
candidates nest (Tr in Table, Li in Ul) as in real NQ.

Learnable by design, so a small BERT fine-tuned for minutes can score well:
every stated attribute appears exactly once (`The capital of Vemoria is Tarsk
.`, an infobox row, or a list item) and its question shares the attribute's
words (`what is the capital of vemoria` -> short answer `Tarsk`); a long-only
question (`what is the climate like in vemoria`) is answered by the paragraph
opening `The climate of Vemoria ...`; a no-answer question asks for an
attribute or topic the document never states, while it states others in the
same sentence shapes. Long answers are always top-level candidates.

That is `--profile easy`, the default. `--profile nq-lexical` (`make_nq_example`,
below) writes pages shaped like real NQ: thousands of words, long plain-text
runs outside every candidate, lists and tables nested two or three deep, long
paragraphs, a few nested gold long answers, and the neighbour's facts in the
question's words. `--profile nq` (`make_nq_reading_example`) writes the same
pages with questions that need reading: facts stated and asked in several
forms, synonyms, other word orders, the subject under other names, so that a
quarter of the gold long answers share no content word with their question, as
on real NQ; dev and test also ask in forms training never shows.
`--profile nq-shaped` (`make_nq_shaped_example`, nq_shaped.py) writes the `nq`
profile's pages and questions shaped like real NQ's where it decides recipes:
the asked fact near the top of the page (a lead paragraph stating the page's
main facts, infobox rows), questions naming their subject as a search query
does, composed filler sentences instead of 46 fixed ones, and NO questions
naming a value that is on the page half the time. `python -m
solution.corpus_stats` measures any of them.

    python -m solution.synth --out data/synth [--profile easy|nq|nq-lexical|nq-shaped] [--seed 0] [--num-train 1000] ...
"""

from __future__ import annotations

import argparse
import sys
import time

from solution.common.fsutil import claim_output, mark_output
from solution.data.nq import ANNOTATION_TYPES
from solution.data.synth.corpus import CORPUS_FILES, PROFILES, answer_mix, page_lengths, write_corpus

# The mark synth and synth_more leave in their folder: the same file names as Kaggle's real files, so a
# folder without it (the real corpus) is never written over unless asked.
MADE_BY = "solution.synth"


def _parse_args(argv=None) -> argparse.Namespace:
    from solution.common import cli  # both --a-b and --a_b spellings
    parser = cli.ArgumentParser(prog="python -m solution.synth", description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", required=True, help="directory to write the four simplified-nq-*.jsonl files into")
    parser.add_argument("--overwrite", action="store_true",
                        help="write into a folder that holds files synth did not write (Kaggle's real simplified-nq "
                             "files have the same names: they would be replaced)")
    parser.add_argument("--seed", type=int, default=0,
                        help="random seed; the same arguments give byte-identical files (default: %(default)s)")
    parser.add_argument("--num-train", type=int, default=1000,
                        help="training examples (one annotation each) (default: %(default)s)")
    parser.add_argument("--num-dev", type=int, default=100, help="dev examples (five annotations each) (default: %(default)s)")
    parser.add_argument("--num-test", type=int, default=100,
                        help="test examples (test file without answers, plus its gold) (default: %(default)s)")
    parser.add_argument("--profile", choices=sorted(PROFILES), default="easy",
                        help="easy: short learnable pages (the demo's); nq: pages shaped like real NQ whose questions "
                             "need reading, some dev and test phrasings held out from training; nq-lexical: the same "
                             "pages, questions in the statements' words; nq-shaped: nq with the gold near the top of "
                             "the page as real NQ's, a lead stating the main facts, questions naming their subject, "
                             "composed filler, NO questions whose value may be on the page (default: %(default)s)")
    parser.add_argument("--min-words", type=int, default=None,
                        help="shortest document, in words (at least 200) (default: easy 300, nq 1000)")
    parser.add_argument("--max-words", type=int, default=None, help="longest document, in words (default: easy 3000, nq 40000)")
    parser.add_argument("--answer-types", default=None, metavar="TYPE,...",
                        help=f"only documents of these answer types (of {', '.join(ANNOTATION_TYPES)}), in the mix's own "
                             "shares among them: YES,NO gives the dozens of yes/no questions a 1.5%% share would need "
                             "thousands of pages for (default: the whole mix)")
    args = parser.parse_args(argv)
    if args.answer_types is not None:
        args.answer_types = [t.strip().upper() for t in args.answer_types.split(",") if t.strip()]
        try:
            answer_mix(args.answer_types)
        except ValueError as e:
            parser.error(f"--answer-types: {e}")
    for name in ("num_train", "num_dev", "num_test"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be at least 1 (an empty file is not a valid NQ file)")
    try:
        args.min_words, args.max_words = page_lengths(args.profile, args.min_words, args.max_words)
    except ValueError as e:
        parser.error(str(e))
    return args


def main(argv=None) -> int:
    args = _parse_args(argv)
    start = time.perf_counter()
    try:
        out = claim_output(args.out, "--out", folder=True, command=MADE_BY, overwrite=args.overwrite)
        summary = write_corpus(out, args.seed, args.num_train, args.num_dev, args.num_test, args.min_words,
                               args.max_words, args.profile, args.answer_types)
        mark_output(out, MADE_BY, CORPUS_FILES)
    except (ValueError, OSError) as e:  # OSError: a full disk or a file that cannot be written, named by open()
        print(f"error: {e}", file=sys.stderr)
        return 2
    for stats in summary:
        print(stats.line())
    print(f"wrote {sum(len(s.paths) for s in summary)} files to {args.out} in {time.perf_counter() - start:.1f}s "
          f"(profile {args.profile}, seed {args.seed})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
