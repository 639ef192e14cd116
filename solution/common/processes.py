"""Processes that die with the one that started them, and whether a process is still running.

Standard library only.
"""

from __future__ import annotations

import os
import sys
from typing import Optional

PR_SET_PDEATHSIG = 1  # prctl option: the signal the kernel sends this process when its parent dies


def die_with_parent(sig: int, parent: Optional[int] = None) -> bool:
    """Have Linux send this process `sig` when its parent dies (prctl PR_SET_PDEATHSIG), so that a parent
    killed outright (SIGKILL, the out-of-memory killer) leaves no child working on, orphaned.

    `parent`: the parent's pid, taken before the fork (default: the parent now); one already gone gets
    `sig` sent at once, since the kernel would never send it. False where it cannot be asked (not Linux,
    a sandbox without prctl): the process then runs as before."""
    if not sys.platform.startswith("linux"):
        return False
    import ctypes

    parent = os.getppid() if parent is None else parent
    if ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, int(sig), 0, 0, 0) != 0:
        return False
    if os.getppid() != parent:  # it died before the request took effect
        os.kill(os.getpid(), sig)
    return True


def process_running(pid: int) -> bool:
    """Whether process `pid` of this machine is running (a zombie, dead but not yet reaped, is not)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's: it exists
        return True
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"  # state follows the command name's ")"
    except (OSError, IndexError):  # no /proc (not Linux), or it ended just now
        return os.path.exists(f"/proc/{pid}") or not os.path.isdir("/proc")
