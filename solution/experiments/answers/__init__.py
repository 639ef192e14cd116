"""The answers benchmark (`scripts/benchmark_answers.py`): what each answer technique of the winning Kaggle
solutions is worth, dev and test micro-F1 on a corpus shaped like real NQ.

Its parts: `techniques` (the plan as data), `corpus` (the pages), `runs` (the trainings it launches),
`predicting` (each window once per model), `variant` and `figures` (scoring a variant, paired differences),
`references` and `rows` (the rows), `benchmark` (their order), `report` and `charts` (what it writes),
`record` (reading and merging records), `command` (the command's work once its arguments are parsed).

Trains the nq-profile recipe in its two stages, with the seeds of `--seeds` (0 and 1), one model after
the other (never two at once: they would share the cores): stage 1 is the demo's training
(configs/train/demo.yaml) on easy pages (`solution.synth`, seed 0), once per seed; stage 2 is
configs/train/nq-profile.yaml (MiniLM, 192-piece windows, a first pass of the 8 windows sharing most
of the question's words, trained on 3 of them) from stage 1's model, on `solution.synth --profile nq`
(`--profile`; seed `--corpus-seed`, 0 by default: the largest of `--train-sizes` training pages, 400 dev,
400 test; the corpus stays under `--out`, data/). `--profile nq-lexical` is the earlier profile whose
questions share their words with the statements. Each technique is one row
of TECHNIQUES: the training overrides it needs (a stage 2 of its own per seed) and the
`submission.predict --set KEY=VALUE` post-processing overrides it needs (the baseline model, no
retraining). A model's `train_seconds` counts both stages. Every variant is scored the same way, through the same functions
`submission.predict` and `solution.evaluate --tune` use, in this process:

1. predict dev and score it: dev micro-F1 untuned;
2. tune the thresholds on dev (`solution.scoring.tuning.tune`, the search behind `evaluate --tune`), under
   the variant's settings: dev micro-F1 tuned (`dev_f1_tuned`);
3. predict test with those thresholds, score it against the test gold: test micro-F1 with
   dev-tuned thresholds (`test_f1`), split long / short / YES / NO.

Every F1 carries its 95% bootstrap interval over documents (`solution.scoring.intervals.f1_interval`;
`dev_f1_ci` is that of the dev-tuned predictions), the number of documents, MLE-bench's score
of the same predictions (`solution.scoring.mlebench`: `dev_mlebench`, `test_mlebench`), and the NQ paper's units:
the official long and short F1 of the same answers (`solution.scoring.nq_official`, the natural-questions
package's F1 of the answers as written; five-way gold: an answer where 2 of 5 annotators gave one),
each with its bootstrap interval (`dev_nq_long_f1`, `dev_nq_long_f1_ci`, `test_nq_short_f1`, ...). A technique's
enabled row carries its paired difference against the same seed's baseline on the same documents
(`intervals.paired_difference`: `test_f1_delta`, `dev_f1_delta` and their `_ci`).

Beside the techniques:

* `lexical`: `solution.lexical` (no training), its two thresholds tuned on dev, applied to test;
  each baseline row carries `lexical_delta` (baseline minus lexical on the same test documents).
* `bm25`: `solution.lexical --method bm25` (no training): Okapi BM25 over each page's top-level
  candidates, long answers only, its threshold tuned on dev; `bm25_delta` on each baseline row.
* `sentences`: `solution.lexical --method sentences` (no training on our pages): the backbone's own
  sentence vectors (all-MiniLM-L6-v2, trained on question-passage pairs including NQ's), the candidate
  holding the sentence nearest the question, title masked, long answers only, its threshold tuned on dev;
  `sentences_delta` on each baseline row. ~3 CPU seconds a page: the row embeds every dev and test page.
* On each baseline row, `best_reference` / `best_reference_delta` (and `_ci`): the no-training row with
  the best test micro-F1, and the baseline minus it, paired; `best_long_reference` /
  `best_long_reference_delta` (and `_ci`): the same on the long rows alone (every row's `test_long_f1`,
  `dev_long_f1` and their `_ci`; each reference's `NAME_long_delta`), since a reference that answers
  long only is judged fairly there.
* `first_paragraph`: the NQ paper's reference (Kwiatkowski et al. 2019: 27.8 long F1 on NQ dev): the
  first top-level paragraph candidate (`<P>`) as the long answer, never a short answer; no model, no
  thresholds.
* `ensemble`: the baselines of the first two seeds averaged, and of three (a third seed trained for
  it alone), each against its best member on dev (`best_member`; the deltas are ensemble minus it).
* `learning_curve`: the first seed's baseline trained on the first N pages of the same file
  (`--max_train_examples N`) for every N of `--train-sizes`; the largest is the baseline itself.
* `yes_no_repeat_yes_no`, `yes_no_pages_yes_no`, `yes_no_whole_yes_no`, `yes_no_balanced_yes_no`: the
  baseline's model (off) and the technique's (on) on dev and test with the yes/no pages added, as below.
  `yes_no_pages` trains on the corpus's pages and YES_NO_TRAIN_PAGES yes/no pages of another seed
  (`solution.synth --answer-types YES,NO`, corpus seed + 2); `yes_no_whole` the same pages with
  `--long_overrun_yes_no false`; `yes_no_balanced` those and each NO window twice (`--no_repeat 2`).
* `polarity`, `polarity_yes_no`: off, the baseline; on, an answer model trained as `yes_no_pages` (the same
  model, trained once for both rows) with a polarity model beside it (`submission.predict --polarity-model`):
  six passes from the answer model over POLARITY_PAGES YES-only and as many NO-only pages (corpus seeds + 3
  and + 4) with whole-paragraph labels, then one over the first 800 training pages. The polarity model's
  YES-minus-NO margin decides a yes/no answer's polarity at the cut tuned on dev (`polarity.tuned_cut`, as
  `evaluate --tune` sets `polarity_offset`; the row's `polarity_cut`), before the thresholds; `polarity` on
  the corpus's pages, `polarity_yes_no` with the yes/no supplement added. `train_seconds` counts the answer
  model and both polarity trainings.
* `--references-only`: the four no-training rows alone on the corpus, nothing trained; `--references NAMES`:
  the no-training rows scored (`""`: none, for a run in pieces merged after a record that has them).
* `first_pass` (`--first-pass NAMES`, `--first-pass-keep-first N`; `first_pass.py`): the recall of the
  window holding the gold long answer among the 4, 8 and 16 windows each named ranking keeps (`recall_at_8`
  and its `_ci`, bootstrap over pages), on the corpus's test pages and, with `--real-lines`, on the real
  lines' two samples pooled, as `solution.corpus_stats --first-pass` measures them; a row per ranking and
  pages (`ranking`, `keep_first`, `split`), no model, no seed, no bar in the charts.
* `--no-ensembles`: the techniques of `--seeds` alone; `--merge A.json B.json ...`: the records of a run
  made in pieces (one seed, then another) written as one, a later record's row replacing the same row.
  Each row keeps the corpus its record says (never this command's `--corpus-seed`); records of two
  corpora, or two that do not say their corpus seed (the nq-lexical record's rows say only "nq"), cannot
  be told apart and are refused, naming both files.
* `thresholds_yes_no`: the `thresholds` technique (separate YES and NO thresholds) again, on dev and test
  with 80 yes/no questions added to each (nq-profile pages of another seed, `solution.synth --answer-types
  YES,NO`): at NQ's 1.5% the 400 dev pages hold only 6.

Post-processing never changes the windows or the model, so a window runs once per model: its logits
are kept (`solution.model.loading.load_model(..., cache_logits=True)`, the library's LogitCache) and every
variant and ensemble re-uses them; only the windows a variant adds (`max_windows_per_document=0` runs every
window of a page) are new work. A variant whose step fails (a flag this checkout does not have yet) is kept
as a row with its `error`, and the script exits 1 after writing everything else.

`--corpus real` trains on the 49 real training lines and scores the 10 real dev lines of the real NQ
sample, in the folder `--real-lines DIR` names (or the environment variable NQ_REAL_LINES; the project's CI
checkout has it in ../shared/data/nq-real): no test gold there, test_f1 is null. Far too few documents to
decide anything; the rows say so.

"""
