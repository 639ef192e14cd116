"""Whether a path can be read as a command's input: one check, one wording, for every command.

Standard library only, so the offline kernel and every stage can use it.
"""

from __future__ import annotations

import difflib
import os
import stat
from pathlib import Path
from typing import Optional, Union

PathLike = Union[str, "os.PathLike[str]"]


def input_problem(path: PathLike, folder: bool = False) -> Optional[str]:
    """What stops `path` being read as an input file (a folder with `folder`), said for a one-line error
    after the path: "no such file (did you mean ...?)", "a pipe (FIFO), not a regular file; ...", or None
    where it can be read. The commands read their inputs by name, some of them more than once, and a pipe
    gives its lines only once (and blocks a reader while nothing writes to it)."""
    want = "folder" if folder else "file"
    if str(path) == "-":
        return "reading standard input is not supported; save the input to a file and give its path"
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        return f"no such {want}{_close_name(Path(path))}"
    except OSError as e:
        return f"cannot be read ({e.strerror})"
    if stat.S_ISDIR(mode) and not folder:
        return "a folder, not a file; give the file's path"
    if stat.S_ISFIFO(mode) or (not folder and not stat.S_ISREG(mode)):
        kind = "a pipe (FIFO)" if stat.S_ISFIFO(mode) else "a device or a socket"
        return f"{kind}, not a regular {want}; save the input to a file and give its path"
    if folder and not stat.S_ISDIR(mode):
        return "a file, not a folder; give the folder's path"
    if not os.access(path, os.R_OK | (os.X_OK if folder else 0)):
        return "not readable (permission denied)"
    return None


def _close_name(path: Path) -> str:
    """' (did you mean ...?)' naming a neighbour of a missing path's name, or ''."""
    try:
        names = [p.name for p in path.parent.iterdir()] if path.parent.is_dir() else []
    except OSError:
        names = []
    close = difflib.get_close_matches(path.name, names, n=1)
    return f" (did you mean {path.parent / close[0]}?)" if close else ""
