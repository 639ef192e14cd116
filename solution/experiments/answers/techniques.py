"""The answers benchmark's plan as data: each technique's training and post-processing overrides, the rows
that are no technique, and the two plans (the full recipe and `--quick`)."""

REAL_NOTE = "10 real dev documents: far too few to decide anything"

# The training file with the yes/no pages added (`yes_no_train_corpus`), every page of it.
YES_NO_PAGES = ["--train_file", "{yes_no_train}", "--max_train_examples", "{yes_no_train_pages}"]
YES_NO_WHOLE = [*YES_NO_PAGES, "--long_overrun_yes_no", "false"]
# The meaning first pass, each page's first two windows kept: the recipe's reader trained to be read with it.
MEANING_FIRST_PASS = ["--first_pass", "meaning", "--first_pass_keep_first", "2"]
# technique -> (training overrides, prediction --set overrides). Names as docs/answers-method.md's tables give them.
TECHNIQUES = {
    "top_level": (["--nested_to_top_level", "true"], ["top_level_only=true"]),
    "no_answer_score": ([], ["subtract_type_null=true", "score_space=probs"]),
    "thresholds": ([], ["separate_thresholds=true"]),
    "n_best": ([], ["n_best_aggregation=true"]),
    "max_context": ([], ["max_context=true"]),
    "structure_tokens": (["--structure_tokens", "true"], []),
    # The first pass's cost and benefit: every window of a page (0), half of the recipe's 8, and twice them
    # (on the nq profile 16 windows hold the gold long answer on ~80% of pages, 8 on ~70%).
    "max_windows": ([], ["max_windows_per_document=0"]),
    "max_windows_4": ([], ["max_windows_per_document=4"]),
    "max_windows_16": ([], ["max_windows_per_document=16"]),
    # The recipe's model read with the first pass by meaning (the backbone's sentence vectors, each page's first
    # two windows kept): the 8 windows hold the gold long answer on ~97% of test pages, the words' on ~89%.
    "first_pass_meaning": ([], ["first_pass=meaning", "first_pass_keep_first=2"]),
    # The recipe trained with the stems ranking (its negatives, `top_window_keep`, ranked by it) and read with it:
    # whether a reader read with another ranking than its training's loses by the change of ranking alone.
    "first_pass_stems": (["--first_pass", "stems"], []),
    # The recipe trained with the meaning first pass and read with it: its negatives ranked by the word part
    # (stems; sentence vectors for every training page are past a CPU), the first 2 windows kept; the benchmark
    # reads dev and test with the sentence vectors (its trainings run no dev pass).
    "first_pass_meaning_trained": (MEANING_FIRST_PASS, []),
    # The same with the negatives ranked by meaning itself (`solution.rank_windows` over every training page,
    # `rankings_corpus`): the reader learns to turn down the windows it will be read with. ~2-5 CPU seconds a
    # training page for the ranking.
    "first_pass_meaning_negatives": ([*MEANING_FIRST_PASS, "--top_window_ranking_file", "{rankings}"], []),
    # The reader's long-answer scores fused with the backbone's sentence match (`sentence_weight`: a candidate's
    # score plus the weight times its best sentence's cosine with the question, a short span its candidate's;
    # the reader's best 8 of each matched), at three weights a factor 4 apart, the thresholds tuned with it on:
    # the weight is chosen on dev, and test confirms the one chosen. A cosine spans ~0.1-0.5 between a page's
    # candidates; the reader's logit scores, a few units.
    "sentence_weight_2": ([], ["sentence_weight=2"]),
    "sentence_weight_8": ([], ["sentence_weight=8"]),
    "sentence_weight_32": ([], ["sentence_weight=32"]),
    # Yes/no windows trained on 8 times (sampling.yes_no_repeat): scored also on the yes/no supplement.
    "yes_no_repeat": (["--yes_no_repeat", "8"], []),
    # The training pages and YES_NO_TRAIN_PAGES yes/no pages more (`yes_no_train_corpus`): as many yes/no
    # answers as real NQ's training set holds for every 300 pages or so, not a repeat of the same 60.
    "yes_no_pages": (YES_NO_PAGES, []),
    # `yes_no_pages` with YES and NO labelled only on windows that hold the whole paragraph (LONG's cut
    # labels as they are): the window holding a long paragraph's start need not hold its statement.
    "yes_no_whole": (YES_NO_WHOLE, []),
    # `yes_no_whole` with each NO window twice: the pages' two YES to a NO become one to one.
    "yes_no_balanced": ([*YES_NO_WHOLE, "--no_repeat", "2"], []),
    # Four times the batch at twice the learning rate (square-root scaling), a quarter of the steps: on one
    # H100 the recipe's batch-8 step is launch overhead (24 ms at 8 windows, 21 ms at 32), so a batch of 32
    # trains ~4.6x the windows a second there, if it learns as well from the same pages.
    "batch_32": (["--per_device_train_batch_size", "32", "--learning_rate", "2.0e-4"], []),
    # Two passes over the same pages: whether a curve that bends as pages double (8,000 pages gained less than
    # 4,000 did) is short of pages or of steps over them.
    "epochs_2": (["--num_train_epochs", "2"], []),
    # An answer model trained as `yes_no_pages` (it types the yes/no pages) and a polarity model trained from it
    # (POLARITY_WHOLE, then POLARITY_REPLAY), read together (`submission.predict --polarity-model`) at the cut
    # tuned on dev: docs/answers-techniques.md, "A polarity model beside the answer model". Its rows are
    # `polarity_rows`'s, not a training override and --set items alone.
    "polarity": (YES_NO_PAGES, []),
}
# Retraining techniques whose on row is scored again on dev and test with the yes/no supplement added,
# beside the baseline's model there (rows named TECHNIQUE_yes_no).
YES_NO_TRAINED = ("yes_no_repeat", "yes_no_pages", "yes_no_whole", "yes_no_balanced")
# The polarity stage: from the answer model, six passes over POLARITY_PAGES yes/no pages of each answer (YES-only
# pages of corpus seed + 3, NO-only of seed + 4: as many NO as YES, so no prior is learnt from the pages) with
# YES and NO labelled only where a window holds the whole paragraph, then one pass over the first
# POLARITY_REPLAY training pages, which wins the main figure back and keeps the polarity in the type scores.
POLARITY = "polarity"
POLARITY_PAGES = 800
POLARITY_WHOLE = ["--train_file", "{polarity_train}", "--max_train_examples", "{polarity_train_pages}",
                  "--long_overrun_yes_no", "false", "--negative_keep_rate", "0.0001", "--top_window_keep", "0",
                  "--num_train_epochs", "6"]
POLARITY_REPLAY = ["--max_train_examples", "800"]
# Real NQ's training set holds ~4,400 yes/no answers (1.4% of 307,373 pages); 4,000 pages of the profile at
# that share hold ~60. `yes_no_pages` adds this many yes/no pages (two YES to a NO) of another corpus seed.
YES_NO_TRAIN_PAGES = 800
# The no-training rows, in the record's order (`reference_rows`).
REFERENCES = ("lexical", "bm25", "first_paragraph", "sentences")
# The first pass's recall (`--first-pass`): rows of no model, like the references, one per ranking and pages.
FIRST_PASS = "first_pass"
# Rows that are not a TECHNIQUES pair.
NO_TECHNIQUE = ("baseline", *REFERENCES, FIRST_PASS, "ensemble", "learning_curve")
# `thresholds` again, on dev and test with yes/no questions added (`yes_no` of them, `solution.synth
# --answer-types YES,NO`): at NQ's 1.5% the 400 dev pages hold 6, too few for the YES and NO thresholds to
# be measured; the rows are named apart, since their documents are not the other rows'.
YES_NO_TECHNIQUE = ("thresholds_yes_no", ["separate_thresholds=true"])

# The recipe as it is (no overrides): stage 1 is the demo's training on easy pages (`warm_start`: its
# config, and the `solution.synth` options of its corpus), stage 2 the nq-profile config from its model.
# ~62 windows of 192 pieces a page, of which the first pass runs 8: 800 dev and test pages are ~6,400
# windows a model; max_windows=0 runs the other ~43,000 once per seed.
FULL = {"config": "configs/train/nq-profile.yaml", "seeds": [0, 1], "train_sizes": [500, 1000, 2000, 4000],
        "num_dev": 400, "num_test": 400, "yes_no": 80, "max_words": None, "train": [],
        "warm_start": {"config": "configs/train/demo.yaml", "synth": []}}
# The tiny random model on a dozen short pages; the recipe's first pass (8 windows) so that both
# max_windows rows change something, and its negatives among the first-ranked windows (which the first_pass_*
# rows rank anew, and `first_pass_meaning_negatives` needs), its overrun labels (which `yes_no_whole` needs),
# and a tiny stage 1 so that the warm start runs.
QUICK = {"config": "configs/train/tiny.yaml", "seeds": [0], "train_sizes": [6, 12], "num_dev": 6, "num_test": 6,
         "yes_no": 3, "max_words": 3000, "train": ["--max_train_examples", "null", "--max_dev_examples", "null",
                                      "--max_windows_per_document", "8", "--top_window_keep", "3",
                                      "--long_overrun_labels", "true",
                                      "--long_overrun", "true"],
         "warm_start": {"config": "configs/train/tiny.yaml",
                        "synth": ["--num-train", "12", "--num-dev", "4", "--num-test", "4"]}}
# The real lines: longer windows and more epochs, every dev line.
REAL_TRAIN = ["--max_seq_length", "384", "--doc_stride", "128", "--max_question_length", "64",
              "--num_train_epochs", "6", "--max_dev_examples", "null"]
NUM_ENSEMBLE_MEMBERS = 3  # ensembles of the first 2 and the first 3 of these seeds
