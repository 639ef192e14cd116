"""The Kaggle kit: dataset-metadata.json and a notebook from make_kaggle_kernel.py, and run.py under transformers 4.x.

Kaggle's image ships transformers 4.x; the project pins 5.x. The 4.x run installs transformers 4.57.1
(and the tokenizers and huggingface_hub it needs, --no-deps) once into a side folder under ~/.cache,
as scripts/benchmark_inference.py does for the QA pipeline, and puts it first on PYTHONPATH.
"""

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ROOT, small_test_file
from helpers import load_script, write_model_dir

KAGGLE_TRANSFORMERS = "4.57.1"
# --no-deps: the venv's torch, numpy, safetensors, tqdm, pyyaml, regex serve; these are what 4.57.1 needs
# in versions the venv (transformers 5) does not have.
SIDE_PACKAGES = [f"transformers=={KAGGLE_TRANSFORMERS}", "tokenizers>=0.22,<0.23", "huggingface_hub>=0.34,<1.0",
                 "requests", "urllib3", "idna", "certifi", "charset-normalizer"]
SIDE_DIR = Path.home() / ".cache" / "nq-qa" / f"transformers-{KAGGLE_TRANSFORMERS}"


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    """A tiny random model whose thresholds answer every document: every row of the CSV holds a span."""
    return write_model_dir(tmp_path_factory.mktemp("m") / "model", postprocess={"long_threshold": -1e9})


@pytest.fixture(scope="module")
def test_file(tmp_path_factory):
    return small_test_file(tmp_path_factory.mktemp("synth"), num_test=4)


def make_kernel(model_dir, out, *extra):
    return subprocess.run([sys.executable, "scripts/make_kaggle_kernel.py", "--model", str(model_dir), "--out",
                           str(out), *extra], cwd=ROOT, capture_output=True, text=True, timeout=300)


@pytest.mark.slow  # the packaging script in a process of its own
def test_dataset_id_writes_metadata_notebook_and_the_upload_command(model_dir, tmp_path):
    kernel = tmp_path / "kernel"
    proc = make_kernel(model_dir, kernel, "--dataset-id", "u/nq")
    assert proc.returncode == 0, proc.stderr
    meta = json.loads((kernel / "dataset-metadata.json").read_text())
    assert meta["id"] == "u/nq" and 6 <= len(meta["title"]) <= 50
    assert [set(lic) for lic in meta["licenses"]] == [{"name"}]
    notebook = json.loads((kernel / "notebook.ipynb").read_text())
    assert notebook["nbformat"] == 4 and len(notebook["cells"]) == 1
    cell = notebook["cells"][0]
    assert cell["cell_type"] == "code" and cell["outputs"] == [] and cell["execution_count"] is None
    assert "".join(cell["source"]).strip() == "!python /kaggle/input/nq/run.py"
    assert notebook["metadata"]["kernelspec"]["name"] == "python3"
    assert f"kaggle datasets create -p {kernel} --dir-mode zip" in proc.stdout
    assert json.loads((kernel / "MANIFEST.json").read_text())["dataset_id"] == "u/nq"
    assert (kernel / "run.py").is_file() and (kernel / "code" / "solution" / "common" / "cli.py").is_file()


@pytest.mark.slow  # the packaging script in two processes
def test_no_dataset_id_writes_no_kaggle_files_and_a_bad_one_is_refused(model_dir, tmp_path):
    proc = make_kernel(model_dir, tmp_path / "k")
    assert proc.returncode == 0, proc.stderr
    assert not (tmp_path / "k" / "dataset-metadata.json").exists() and "--dataset-id" in proc.stdout
    proc = make_kernel(model_dir, tmp_path / "bad", "--dataset_id", "no-slash")
    assert proc.returncode == 2 and "error: --dataset-id 'no-slash': expected USER/SLUG" in proc.stderr
    assert not (tmp_path / "bad").exists()


def kit_main(*argv) -> int:
    """make_kaggle_kernel.main in this process (a script, not a module: loaded from its path)."""
    return load_script("make_kaggle_kernel.py").main([str(a) for a in argv])


def one_error_line(capsys, *words, start="error: --out ") -> str:
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(start) and "Traceback" not in err, err
    assert all(str(w) in lines[0] for w in words), err
    return lines[0]


def test_out_never_replaces_the_run_holding_the_model_nor_a_folder_inside_it(model_dir, tmp_path, capsys):
    run = tmp_path / "run"
    shutil.copytree(model_dir, run / "model")
    (run / "metrics.jsonl").write_text('{"step": 1}\n')
    before = sorted(p.relative_to(run) for p in run.rglob("*"))
    for out in (run, run / "model", run / "model" / "kernel"):
        assert kit_main("--model", run / "model", "--out", out) == 2
        one_error_line(capsys, out, f"--model {run / 'model'}")
    assert sorted(p.relative_to(run) for p in run.rglob("*")) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run"]  # no temporary folder left beside it


def test_out_refuses_a_folder_it_did_not_write_and_a_file(model_dir, tmp_path, capsys):
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("mine\n")
    assert kit_main("--model", model_dir, "--out", mine) == 2
    one_error_line(capsys, mine, "MANIFEST.json", "not replaced")
    assert (mine / "notes.txt").read_text() == "mine\n"
    afile = tmp_path / "kernel.zip"
    afile.write_bytes(b"PK")
    assert kit_main("--model", model_dir, "--out", afile) == 2
    one_error_line(capsys, afile, "is a file, expected a folder")
    assert afile.read_bytes() == b"PK"


def test_out_replaces_its_own_kernel_folder_but_not_what_was_added_to_it(model_dir, tmp_path, capsys):
    kernel = tmp_path / "kernel"
    assert kit_main("--model", model_dir, "--out", kernel) == 0
    (kernel / "run.py").write_text("stale\n")  # a kit folder's own file: replaced
    assert kit_main("--model", model_dir, "--out", kernel, "--dataset-id", "u/nq") == 0
    assert "stale" not in (kernel / "run.py").read_text() and (kernel / "dataset-metadata.json").is_file()
    (kernel / "submission.csv").write_text("a result\n")  # the user's, beside the kit's files: kept
    capsys.readouterr()
    assert kit_main("--model", model_dir, "--out", kernel) == 2
    one_error_line(capsys, kernel, "holds submission.csv")
    assert (kernel / "submission.csv").read_text() == "a result\n" and (kernel / "dataset-metadata.json").is_file()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["kernel"]


@pytest.mark.parametrize("missing", ["tokenizer.json", "config.json"])
def test_a_model_directory_that_cannot_load_is_refused_naming_the_missing_file(missing, model_dir, tmp_path, capsys):
    broken = tmp_path / "model"
    shutil.copytree(model_dir, broken)
    (broken / missing).unlink()
    assert kit_main("--model", model_dir, "--model", broken, "--out", tmp_path / "kernel") == 2
    one_error_line(capsys, broken / missing, "missing", start="error: ")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model"]  # no kernel folder, no temporary one


@pytest.mark.slow  # the packaging script in processes of its own
def test_out_refuses_the_checkout_and_the_source_folders_it_packs(model_dir, tmp_path):
    """Run from a copy of the checkout, so that the old behaviour (replace --out) deletes only the copy."""
    checkout = tmp_path / "checkout"
    skip = shutil.ignore_patterns("__pycache__")
    for folder in ("solution", "submission"):
        shutil.copytree(ROOT / folder, checkout / folder, ignore=skip)
    (checkout / "scripts").mkdir()
    shutil.copy(ROOT / "scripts" / "make_kaggle_kernel.py", checkout / "scripts")
    before = sorted(p.relative_to(checkout) for p in checkout.rglob("*"))
    for out in (checkout, checkout / "solution", checkout / "submission" / "kernel", tmp_path):
        proc = subprocess.run([sys.executable, str(checkout / "scripts" / "make_kaggle_kernel.py"), "--model",
                               str(model_dir), "--out", str(out)], cwd=tmp_path, capture_output=True, text=True,
                              timeout=300)
        lines = proc.stderr.strip().splitlines()
        assert proc.returncode == 2 and len(lines) == 1 and lines[0].startswith(f"error: --out {out}: "), proc.stderr
        assert sorted(p.relative_to(checkout) for p in checkout.rglob("*")) == before
    # The default, kernel/ inside the checkout, is still allowed.
    proc = subprocess.run([sys.executable, "scripts/make_kaggle_kernel.py", "--model", str(model_dir)],
                          cwd=checkout, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0 and (checkout / "kernel" / "run.py").is_file(), proc.stderr


def side_transformers() -> Path:
    """transformers 4.x in a side folder (installed once); skips, saying why, where pip cannot install it."""
    if not (SIDE_DIR / f"transformers-{KAGGLE_TRANSFORMERS}.dist-info").is_dir():
        proc = subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--target",
                               str(SIDE_DIR), *SIDE_PACKAGES], capture_output=True, text=True, timeout=600)
        if proc.returncode != 0:
            pytest.skip(f"cannot install transformers {KAGGLE_TRANSFORMERS} into {SIDE_DIR} (no package index "
                        f"reachable?): {proc.stderr.strip()[-500:]}")
    return SIDE_DIR


def run_kernel(kernel: Path, test_file: Path, out: Path, pythonpath: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": pythonpath}
    return subprocess.run([sys.executable, str(kernel / "run.py"), "--input", str(test_file), "--output", str(out),
                           "--precision", "fp32"], cwd=out.parent, env=env, capture_output=True, text=True,
                          timeout=600)


@pytest.mark.slow  # a pip install the first time, then two kernel runs
def test_run_py_writes_the_same_csv_under_transformers_4(model_dir, test_file, tmp_path):
    side = side_transformers()
    kernel = tmp_path / "kernel"
    assert make_kernel(model_dir, kernel, "--dataset-id", "u/nq").returncode == 0
    v5 = run_kernel(kernel, test_file, tmp_path / "v5.csv", "")
    assert v5.returncode == 0, v5.stderr[-3000:]
    v4 = run_kernel(kernel, test_file, tmp_path / "v4.csv", str(side))  # transformers 4.x before the venv's 5.x
    assert v4.returncode == 0, v4.stderr[-3000:]
    assert f"transformers {KAGGLE_TRANSFORMERS})" in v4.stdout and "transformers 5." in v5.stdout
    rows = (tmp_path / "v5.csv").read_text().splitlines()
    longs = [r.split(",") for r in rows[1:] if r.split(",")[0].endswith("_long")]
    assert len(rows) == 1 + 2 * 4 and all(span for _, span in longs)  # a span in every long row: a real check
    assert (tmp_path / "v4.csv").read_text() == (tmp_path / "v5.csv").read_text()


def test_predict_shows_a_progress_bar_over_documents_and_quiet_hides_it(model_dir, test_file, tmp_path, capsys,
                                                                        monkeypatch):
    """The bar run.py and submission.predict show (replacing a hand-made carriage-return line)."""
    from solution.common import cli
    from submission.predict import predict_file

    monkeypatch.setattr(cli, "LOG_SECONDS", 0.0)  # a line per update, so 4 documents show
    predict_file(str(model_dir), str(test_file), str(tmp_path / "a.csv"), precision="fp32")
    err = capsys.readouterr().err
    assert re.search(r"^predict: 4 documents \[.*documents/s, \d+ windows\]$", err, re.M), err
    assert "\r" not in err
    predict_file(str(model_dir), str(test_file), str(tmp_path / "b.csv"), precision="fp32", quiet=True)
    assert capsys.readouterr().err == ""


# ---------------------------------------------------------------------------
# The GPU-time projection


def test_per_window_costs_reproduce_the_published_throughputs():
    from solution.experiments.kernel_budget import PEAK_TFLOPS, seconds_per_window, window_flops

    # The calibration: BERT-large and -base at 384 pieces on a T4 run at the published rates.
    assert 1 / seconds_per_window(24, 1024, 4096, 384, "T4", "fp32") == pytest.approx(16.04)
    assert 1 / seconds_per_window(12, 768, 3072, 384, "T4", "fp16") == pytest.approx(192.61)
    # The P100 is the T4 scaled by datasheet peaks; a 512-piece window costs its FLOPs' share more.
    p100 = 1 / seconds_per_window(24, 1024, 4096, 384, "P100", "fp32")
    assert p100 == pytest.approx(16.04 * PEAK_TFLOPS["P100"]["fp32"] / PEAK_TFLOPS["T4"]["fp32"])
    ratio = seconds_per_window(24, 1024, 4096, 512, "T4", "fp32") / seconds_per_window(24, 1024, 4096, 384, "T4", "fp32")
    assert ratio == pytest.approx(window_flops(24, 1024, 4096, 512) / window_flops(24, 1024, 4096, 384))
    assert 1.3 < ratio < 1.45
    # BERT-base's matrix products: 12 x 7.08M weights, 2 FLOPs a weight a piece.
    assert window_flops(12, 768, 3072, 1) == pytest.approx(2 * 12 * 7_077_888 + 4 * 12 * 768)


@pytest.mark.slow  # the packaging script in two processes
def test_kernel_prints_the_projection_with_windows_measured_on_the_pages(model_dir, test_file, tmp_path):
    proc = make_kernel(model_dir, tmp_path / "k", "--pages", str(test_file), "--num-documents", "1000")
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert "PROJECTED" in out and f"measured on the first documents of {test_file}" in out
    assert re.search(r"all models on a P100: [0-9.]+ h in FP32", out) and "all models on a T4" in out
    assert re.search(r"[0-9.]+ windows/document", out)
    proc = make_kernel(model_dir, tmp_path / "k2", "--pages", str(tmp_path / "nope.jsonl"))
    assert proc.returncode == 2 and "--pages" in proc.stderr and not (tmp_path / "k2").exists()


def test_max_windows_per_document_caps_the_projected_windows(model_dir, test_file, tmp_path):
    from solution.experiments.kernel_budget import project

    capped = tmp_path / "capped"
    shutil.copytree(model_dir, capped)
    qa = json.loads((capped / "qa_config.json").read_text())
    qa["window"]["max_windows_per_document"] = 1
    (capped / "qa_config.json").write_text(json.dumps(qa))
    full = project([model_dir], test_file, 1000)
    one = project([capped], test_file, 1000)
    assert full["models"][0]["windows_per_document"] > 1 >= one["models"][0]["windows_per_document"]
    assert one["hours"]["T4"]["fp32"] < full["hours"]["T4"]["fp32"]
    two = project([model_dir, model_dir], test_file, 1000)  # one directory twice: run once
    assert two["hours"] == full["hours"]


def test_only_the_model_s_own_files_are_packed_a_link_refused_extras_named(model_dir, tmp_path, capsys):
    """A link to a credentials file outside the model folder never reaches the upload folder; a pickled
    training_args.bin is no file of a model directory, so it is left behind, and the warning names it."""
    model = tmp_path / "model"
    shutil.copytree(model_dir, model)
    secret = tmp_path / "credentials.json"
    secret.write_text('{"key": "secret"}\n')
    (model / "kaggle.json").symlink_to(secret)
    kernel = tmp_path / "kernel"
    assert kit_main("--model", model, "--out", kernel) == 2
    one_error_line(capsys, model / "kaggle.json", "symbolic link", start="error: ")
    assert not kernel.exists()
    (model / "kaggle.json").unlink()
    (model / "training_args.bin").write_bytes(b"\x80\x04pickle")
    assert kit_main("--model", model, "--out", kernel) == 0
    err = capsys.readouterr().err
    assert f"warning: not packed (not part of a model directory): {model / 'training_args.bin'}" in err, err
    assert sorted(p.name for p in (kernel / "model").iterdir()) == sorted(p.name for p in model_dir.iterdir())
    assert json.loads((kernel / "MANIFEST.json").read_text())["skipped"] == [str(model / "training_args.bin")]


def test_num_documents_0_is_refused_before_anything_is_written(model_dir, tmp_path, capsys):
    kernel = tmp_path / "kernel"
    assert kit_main("--model", model_dir, "--out", kernel, "--num-documents", "0") == 2
    one_error_line(capsys, "--num-documents must be >= 1, got 0", start="error: ")
    assert not kernel.exists()


def test_a_model_whose_windows_exceed_its_positions_is_not_packed(model_dir, tmp_path, capsys):
    model = tmp_path / "model"
    shutil.copytree(model_dir, model)
    qa = json.loads((model / "qa_config.json").read_text())
    qa["window"]["max_seq_length"] = 100_000
    (model / "qa_config.json").write_text(json.dumps(qa))
    assert kit_main("--model", model, "--out", tmp_path / "kernel") == 2
    one_error_line(capsys, model / "qa_config.json", "window.max_seq_length 100000 is more than", start="error: ")
    assert not (tmp_path / "kernel").exists()


def test_a_broken_pages_file_leaves_no_kernel_folder_and_keeps_the_old_one(model_dir, test_file, tmp_path, capsys):
    """The kit wrote its folder, then read --pages and failed there: the folder stayed behind (an older
    kit in its place was gone)."""
    broken = tmp_path / "pages.jsonl"
    broken.write_text(test_file.read_text().splitlines()[0] + "\n{not json\n")
    assert kit_main("--model", model_dir, "--out", tmp_path / "fresh", "--pages", broken) == 2
    one_error_line(capsys, broken, start="error: ")
    assert not (tmp_path / "fresh").exists() and not list(tmp_path.glob(".fresh*"))
    old = tmp_path / "old"
    assert kit_main("--model", model_dir, "--out", old) == 0
    capsys.readouterr()
    before = {p.name: p.stat().st_mtime_ns for p in old.iterdir()}
    assert kit_main("--model", model_dir, "--out", old, "--pages", broken) == 2
    assert {p.name: p.stat().st_mtime_ns for p in old.iterdir()} == before


def test_pages_that_is_a_pipe_is_called_one(model_dir, tmp_path, capsys):
    """A FIFO as --pages was "no such file"."""
    fifo = tmp_path / "pages.jsonl"
    os.mkfifo(fifo)
    assert kit_main("--model", model_dir, "--out", tmp_path / "kernel", "--pages", fifo) == 2
    line = one_error_line(capsys, f"--pages {fifo}: a pipe", start="error: ")
    assert "no such file" not in line and not (tmp_path / "kernel").exists()


# ---------------------------------------------------------------------------
# The code the kernel carries


def imported_files(module: str) -> set:
    """The files of solution/ and submission/ that `module` imports, at any depth (imports inside functions
    too: the kernel runs them), its packages' __init__.py included."""
    import ast

    def path(name: str):
        for candidate in (ROOT / (name.replace(".", "/") + ".py"), ROOT / name.replace(".", "/") / "__init__.py"):
            if candidate.is_file():
                return candidate
        return None

    seen, todo = set(), [module]
    while todo:
        name = todo.pop()
        file = path(name)
        if file is None or file in seen:
            continue
        seen.add(file)
        parts = name.split(".")
        todo += [".".join(parts[:i]) for i in range(1, len(parts))]
        for node in ast.walk(ast.parse(file.read_text())):
            if isinstance(node, ast.Import):
                todo += [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                todo += [node.module, *(f"{node.module}.{a.name}" for a in node.names)]
    return {str(f.relative_to(ROOT)) for f in seen}


def test_the_kernel_carries_every_module_submission_predict_imports_and_no_other():
    """Three modules the inference path had come to import (settings, qa_config, loading) were missing from the
    kernel, whose run.py then failed at import; the experiments stage is never packed."""
    from solution.experiments.kit import CODE

    assert sorted(CODE) == sorted(imported_files("submission.predict"))
    assert not [f for f in CODE if f.startswith("solution/experiments/")]


@pytest.mark.slow  # the kernel's run.py in a process of its own
def test_a_packed_polarity_model_reads_yes_or_no_in_the_kernel_and_a_missing_one_is_refused(test_file, tmp_path,
                                                                                            capsys):
    from helpers import ANSWER_ALL

    says_yes = write_model_dir(tmp_path / "says-yes", seed=1, postprocess=ANSWER_ALL, type_bias={"YES": 50.0})
    reads_no = write_model_dir(tmp_path / "reads-no", seed=1, postprocess=ANSWER_ALL,
                               type_bias={"NO": 60.0, "YES": 50.0})
    kernel = tmp_path / "kernel"
    assert kit_main("--model", says_yes, "--out", kernel, "--polarity-model", tmp_path / "nowhere") == 2
    one_error_line(capsys, tmp_path / "nowhere", start="error: ")
    assert not kernel.exists()
    assert kit_main("--model", says_yes, "--out", reads_no / "kernel", "--polarity-model", reads_no) == 2
    one_error_line(capsys, f"--polarity-model {reads_no}")  # a kernel inside it is refused, naming the flag
    assert kit_main("--model", says_yes, "--out", kernel, "--polarity-model", reads_no) == 0
    manifest = json.loads((kernel / "MANIFEST.json").read_text())
    assert (manifest["models"], manifest["polarity_model"]) == (["model"], "polarity")
    assert sorted(p.name for p in (kernel / "polarity").iterdir()) == sorted(p.name for p in reads_no.iterdir())
    proc = run_kernel(kernel, test_file, tmp_path / "kernel.csv", "")
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = [r.split(",") for r in (tmp_path / "kernel.csv").read_text().splitlines()[1:]]
    shorts = [span for key, span in rows if key.endswith("_short")]
    assert shorts == ["NO"] * 4  # the answer model says YES on every page; the packed polarity model reads NO


@pytest.mark.parametrize("section, values, said", [
    ("window", {"first_pass": "meaning", "max_windows_per_document": 8}, "window.first_pass meaning (set first_pass=words)"),
    ("postprocess", {"sentence_weight": 8.0}, "postprocess.sentence_weight 8 (set sentence_weight=0)")])
def test_a_model_read_with_sentence_vectors_is_not_packed(section, values, said, model_dir, tmp_path, capsys):
    """The kernel packs no sentence encoder: such a model would stop at Kaggle's first page, so it is refused here."""
    model = tmp_path / "model"
    shutil.copytree(model_dir, model)
    qa = json.loads((model / "qa_config.json").read_text())
    qa[section].update(values)
    (model / "qa_config.json").write_text(json.dumps(qa))
    assert kit_main("--model", model, "--out", tmp_path / "kernel") == 2
    one_error_line(capsys, model / "qa_config.json", said, "does not pack the sentence encoder", start="error: ")
    assert not (tmp_path / "kernel").exists()
