"""Featurisation under load: peak memory flat in the size of the file, progress reported.

    python scripts/benchmark_load.py [--documents 50000] [--json FILE]

Generates two synthetic training files, N/10 and N documents (short
documents, 200-300 words, so the run takes minutes), featurises each with
`python -m solution.prepare` in a fresh process, and reports each run's peak
RSS (the process and its workers), time, documents/s and the progress lines
it printed, then the ratio of the two peaks. Goal: the large file's peak at
most 1.2x the small one's (memory that does not grow with the input).
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# Runs prepare in this child and prints the peak RSS of it and of its worker processes (KiB on Linux).
MEASURE = ("import resource, runpy, sys\n"
           "sys.argv = ['prepare'] + sys.argv[1:]\n"
           "try:\n    runpy.run_module('solution.prepare', run_name='__main__')\n"
           "except SystemExit as e:\n    code = e.code\n"
           "self = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss\n"
           "kids = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss\n"
           "print('PEAK_RSS_KIB', max(self, kids), file=sys.stderr)\n")


def featurise(path: Path, out: Path, num_proc: int) -> dict:
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-c", MEASURE, "--input", str(path), "--output", str(out),
                           "--max-seq-length", "128", "--doc-stride", "32", "--max-question-length", "32",
                           "--num-proc", str(num_proc), "--json"],
                          cwd=ROOT, capture_output=True, text=True, env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin"})
    seconds = time.perf_counter() - t0
    if proc.returncode != 0:
        raise RuntimeError(proc.stderr[-3000:])
    peak = int(next(line.split()[1] for line in proc.stderr.splitlines() if line.startswith("PEAK_RSS_KIB"))) * 1024
    summary = json.loads(proc.stdout.strip().splitlines()[-1])
    progress = [line for line in proc.stderr.splitlines() if "documents/s" in line]
    return {"documents": summary["documents"], "windows": summary["windows"], "seconds": seconds,
            "documents_per_s": summary["documents"] / seconds, "peak_rss_bytes": peak,
            "progress_lines": len(progress), "last_progress": progress[-1] if progress else None}


def main(argv=None) -> int:
    sys.path.insert(0, str(ROOT))
    from solution.common import cli  # both --a-b and --a_b spellings
    p = cli.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--documents", type=int, default=50000)
    p.add_argument("--num-proc", type=int, default=2)
    p.add_argument("--out", default="runs/load")
    p.add_argument("--json", default=None)
    cli.add_overwrite(p)
    args = p.parse_args(argv)
    cli.claim_records("scripts/benchmark_load.py", args.overwrite, json=args.json)
    out = (ROOT / args.out).resolve()
    results = []
    for n in (args.documents // 10, args.documents):
        data = out / f"synth-{n}"
        if not (data / "simplified-nq-train.jsonl").is_file():
            subprocess.run([sys.executable, "-m", "solution.synth", "--out", str(data), "--num-train", str(n),
                            "--num-dev", "1", "--num-test", "1", "--min-words", "200", "--max-words", "300"],
                           cwd=ROOT, check=True, capture_output=True)
        cache = out / f"cache-{n}"
        subprocess.run(["rm", "-rf", str(cache)], check=True)
        print(f"featurising {n} documents ...", flush=True)
        r = featurise(data / "simplified-nq-train.jsonl", cache, args.num_proc)
        r["file_bytes"] = (data / "simplified-nq-train.jsonl").stat().st_size
        results.append(r)
        print(f"  {r['documents']} documents, {r['windows']} windows in {r['seconds']:.0f} s "
              f"({r['documents_per_s']:.0f} documents/s), peak RSS {r['peak_rss_bytes'] / 2**20:.0f} MiB, "
              f"{r['progress_lines']} progress lines (last: {r['last_progress']})", flush=True)
    ratio = results[1]["peak_rss_bytes"] / results[0]["peak_rss_bytes"]
    print(f"\npeak RSS, {results[1]['documents']} vs {results[0]['documents']} documents "
          f"({results[1]['file_bytes'] / results[0]['file_bytes']:.1f}x the bytes): {ratio:.2f}x (goal at most 1.2x)")
    if args.json:
        from solution.common.fsutil import write_record

        write_record(args.json, json.dumps({"runs": results, "peak_rss_ratio": ratio}, indent=2) + "\n",
                     "scripts/benchmark_load.py")
    return 0


if __name__ == "__main__":
    sys.exit(main())
