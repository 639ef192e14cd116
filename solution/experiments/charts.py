"""What the benchmarks that draw a chart beside their JSON record share: where the chart goes, and the chart
drawn again from an earlier run's record (`--plot-only`) with no measuring. matplotlib is imported by the
benchmark's own `chart`, never here, so that a script's --help stays light.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Callable, Optional


def chart_path(json_path, png) -> Optional[Path]:
    """The chart a run writes: `png` (--png) if given, else its JSON's path with `.png` (the JSON the run
    writes, or the one --plot-only reads); None with neither. Claim it before the work
    (`cli.claim_records(..., png=chart_path(...))`): a redraw replaces a file as a run does."""
    if png:
        return Path(png)
    return Path(json_path).with_suffix(".png") if json_path else None


def redraw(json_path, png: Path, chart: Callable[[dict, Path], None], script: str) -> int:
    """Draw `chart` again from the record `json_path` into `png`; a file that is not `script`'s record is one
    line `error: ...` and exit 2 (no traceback)."""
    try:
        chart(json.loads(Path(json_path).read_text()), png)
    except (OSError, ValueError, KeyError, TypeError, IndexError) as e:
        print(f"error: {json_path}: not a {script} JSON ({type(e).__name__}: {e})", file=sys.stderr)
        return 2
    print(f"chart: {png}")
    return 0
