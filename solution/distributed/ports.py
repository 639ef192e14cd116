"""A free TCP port on this machine, for a process group's rendezvous.

The one helper for it: the strategy module (a DeepSpeed run started without a launcher), the tests and the
benchmark scripts that launch ranks all call `free_port`. Standard library only.
"""

from __future__ import annotations

import socket


def free_port() -> int:
    """A port the OS reports free now (bound to port 0, then released; the launch takes it moments later)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
