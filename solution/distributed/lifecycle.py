"""A rank's life outside the engine: the launcher's rank, process groups destroyed in order, a rank
that dies with its launcher, a lost peer told apart, and DeepSpeed's shared-memory buffers on CPU.
"""

from __future__ import annotations

import gc
import os
import signal
import sys
import time
from pathlib import Path
from typing import Optional

from solution.common.processes import die_with_parent

GLOO_SETTLE_S = 0.2
"""How long shutdown releases the GIL before destroying the process groups (see `destroy_process_groups`)."""


def die_with_launcher(sig: int = signal.SIGTERM) -> None:
    """Under a launcher (torchrun, accelerate launch, deepspeed): Linux sends this rank `sig` when the
    process that started it dies (prctl PR_SET_PDEATHSIG).

    torch's launcher starts each rank in a session of its own, so a SIGKILL to the launcher's process group
    (a job killed by hand, an out-of-memory kill) leaves its ranks training, orphaned, while a new run may
    start on the same output_dir. SIGTERM, not SIGKILL: the ranks, all told at once, stop as on preemption,
    with a checkpoint at the step they agree on. Elsewhere (no launcher, not Linux) nothing is done."""
    if "LOCAL_RANK" in os.environ:
        die_with_parent(sig)


PEER_LOST = ("Connection closed by peer", "Connection reset by peer")  # gloo's words for a rank that is gone


def lost_peer(error: BaseException) -> bool:
    """Whether a collective failed because another rank's process is gone (killed, its node lost): under
    an elastic launcher the usual way a survivor learns of it."""
    return isinstance(error, RuntimeError) and any(words in str(error) for words in PEER_LOST)


def launcher_rank() -> int:
    """This process's global rank as the launcher set it (0 without a launcher), readable before any
    process group exists."""
    return int(os.environ.get("RANK", "0"))


def closing_barrier(timeout_s: float) -> None:
    """Every rank reaches this point, or a timeout: a rank that died must not leave the others waiting."""
    from datetime import timedelta

    import torch.distributed as dist

    try:
        if dist.get_backend() == "gloo":  # gloo only: a barrier that names the ranks that did not arrive
            dist.monitored_barrier(timeout=timedelta(seconds=timeout_s))
        else:
            dist.barrier()
    except RuntimeError as e:  # a rank is gone: shut down this one all the same
        print(f"warning: rank {launcher_rank()}: closing barrier failed ({str(e).splitlines()[0][:200]}); "
              "shutting down without it", file=sys.stderr, flush=True)


def destroy_process_groups() -> None:
    """Destroy every process group through DeepSpeed's comm layer (which also drops the references it keeps
    in deepspeed.utils.groups) or torch; then collect, so that the gloo groups' C++ objects are destroyed
    here, joining their worker threads, and not during interpreter exit."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        # A gloo worker thread that has just finished a collective still takes the GIL once, to drop that
        # work's Python state. Destroying the group joins that thread from here, with the GIL held: a
        # deadlock (gdb: ~ProcessGroupGloo in thread::join, pt_gloo_runloop in ~ThreadLocalState waiting
        # for the GIL; 4 runs in 35 of a 2-process DDP loop). Sleeping releases the GIL so the threads go idle.
        time.sleep(GLOO_SETTLE_S)
    ds_comm = sys.modules.get("deepspeed.comm.comm")
    if ds_comm is not None and ds_comm.cdb is not None:
        if dist.is_available() and dist.is_initialized():
            ds_comm.destroy_process_group()
        ds_comm.cdb = None  # its backend object: nothing left to talk to
    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()
    gc.collect()


# -- DeepSpeed's shared memory on CPU ---------------------------------------------------------------------

SHM_DIR = Path("/dev/shm")
SHM_PREFIX = "deepspeed_allreduce_buffer"
"""DeepSpeed's CPU all-reduce (ops/csrc/cpu/comm/shm.cpp) maps one 66 MB file per rank, named
deepspeed_allreduce_buffer_<uid>_<MASTER_ADDR>_<MASTER_PORT>_<rank>, when every rank runs on this host
(the `deepspeed` launcher sets LOCAL_SIZE; torchrun and accelerate launch do not), and never unlinks it."""


def shm_buffers(port, rank: Optional[int] = None) -> list[Path]:
    """This user's DeepSpeed shared-memory files of the run that rendezvoused at `port` (one rank's, or all)."""
    found = []
    for path in SHM_DIR.glob(f"{SHM_PREFIX}_{os.getuid()}_*_{port}_*"):
        *_, got_port, got_rank = path.name.rsplit("_", 2)  # the address may hold anything but the port cannot
        if got_port == str(port) and got_rank.isdigit() and (rank is None or int(got_rank) == rank):
            found.append(path)
    return sorted(found)


def remove_shm_buffers(port, older_than: Optional[float] = None, rank: Optional[int] = None) -> list[Path]:
    """Remove the files of `shm_buffers(port, rank)` (only those last written before `older_than`, a
    time.time() value, when given); returns what it removed. For launchers and tests that kill a run."""
    removed = []
    for path in shm_buffers(port, rank):
        try:
            if older_than is None or path.stat().st_mtime < older_than:
                path.unlink()
                removed.append(path)
        except FileNotFoundError:  # another rank of the same run removed it first
            pass
    return removed


def drop_stale_shm_buffers() -> None:
    """Before DeepSpeed creates this run's buffers: remove those a killed run on the same port left.

    shm_open(O_CREAT) would reuse a stale file, and a peer can map it before its owner rewrites it. Every
    rank removes every rank's file of this port that is older than its own process: a file of the live run
    cannot be (the ranks start together and create their files seconds later, after their imports)."""
    import psutil

    remove_shm_buffers(os.environ.get("MASTER_PORT", ""), older_than=psutil.Process().create_time())


def unlink_own_shm_buffer() -> str:
    """Once every rank has mapped every other rank's buffer (DeepSpeed does it while building its comm
    backend, inside Accelerator()), unlink this rank's file: the mappings stay valid until the process ends,
    and a run killed from here on leaves nothing in /dev/shm. Returns the port, for close() to check again."""
    import torch.distributed as dist

    if dist.is_initialized() and dist.get_world_size() > 1:
        dist.barrier()  # every rank is past DeepSpeed's shm_initialize, which opened the others' files
    port = os.environ.get("MASTER_PORT", "")
    remove_shm_buffers(port, rank=launcher_rank())
    return port
