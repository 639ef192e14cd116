"""The versions here against the range the project supports (`scripts/gpu_check.py --check-versions`, which
`scripts/gpu_run.sh` runs before anything else on the GPU machine)."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

from solution.common.fsutil import atomic_write_text

ROOT = Path(__file__).resolve().parents[3]  # the repository, whose requirements.txt holds the ranges
# The oldest torch rehearsed (scripts/gpu_rehearse.sh, the GPU image's 2.11); requirements.txt pins torch
# exactly for CI's CPU wheel, so its range is here. transformers', accelerate's and deepspeed's are
# requirements.txt's own.
TORCH_SUPPORTED = ">=2.11,<3"
# Printed and recorded beside the checked ones.
ALSO_RECORDED = ("tokenizers", "safetensors", "numpy", "pydantic")


def supported_ranges() -> dict:
    """{distribution: specifier}: torch's from TORCH_SUPPORTED, the others from requirements.txt."""
    ranges = {"torch": TORCH_SUPPORTED}
    for line in (ROOT / "requirements.txt").read_text().splitlines():
        spec = line.split("#")[0].strip()
        m = re.match(r"(transformers|accelerate|deepspeed)\s*([<>=!~].*)", spec)
        if m:
            ranges[m.group(1)] = m.group(2).replace(" ", "")
    return ranges


def found_versions() -> dict:
    """Python's, CUDA's, the device's and each distribution's version here (None where not installed)."""
    from importlib import metadata

    import torch

    found = {"python": sys.version.split()[0], "cuda": torch.version.cuda,
             "device": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None}
    for name in ("torch", "transformers", "accelerate", "deepspeed", *ALSO_RECORDED):
        try:
            found[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            found[name] = None
    return found


def check_versions(out_dir) -> int:
    """Print the versions (and write OUT/versions.json); 3 when one is outside its supported range, else 0."""
    from packaging.specifiers import SpecifierSet
    from packaging.version import Version

    found, bad = found_versions(), []
    for name, spec in supported_ranges().items():
        version = found.get(name)
        # A local build label (2.11.0+cu130) is not part of the release compared.
        ok = version is not None and Version(version.split("+")[0]) in SpecifierSet(spec)
        print(f"  {name:13s} {version or 'not installed':22s} supported {spec:16s} {'ok' if ok else 'OUTSIDE'}")
        if not ok:
            bad.append(f"{name} {version or 'not installed'} (supported {spec})")
    for name in ("python", "cuda", "device", *ALSO_RECORDED):
        print(f"  {name:13s} {found[name]}")
    found["outside_supported"] = bad
    if out_dir:
        Path(out_dir).mkdir(parents=True, exist_ok=True)
        atomic_write_text(Path(out_dir) / "versions.json", json.dumps(found, indent=2) + "\n")
    if bad:
        print(f"error: outside the supported versions: {'; '.join(bad)}", file=sys.stderr)
        return 3
    return 0
