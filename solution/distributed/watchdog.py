"""The hang watchdog: a rank that makes no progress for `hang_timeout` seconds ends the run, saying where.

The training loop marks each rank's progress (`Progress.mark`: the optimizer step and the phase it
entered: data, forward, backward, optimizer, collective, save, evaluate). A thread per rank (`Watchdog`)
writes that, with a beat counter and the main thread's stack, to output_dir/heartbeat/rank-R.json every
few seconds. When its own rank has made no progress for hang_timeout seconds it reads every rank's file,
waits a few beats and reads them again: a rank whose beat did not move is not responding (stopped,
frozen or dead; such a rank cannot run its own watchdog, so the others must name it). Then it

  - prints one line (`hang: ...`) naming the step, the phase and the stalled ranks (from one rank only:
    the lowest that still responds),
  - writes its Python stacks (every thread) to output_dir/hang-stacks/rank-R-pidP.txt, and for each
    rank that no longer responds the stack its last heartbeat recorded (`...last-seen.txt`),
  - kills (SIGKILL) each rank that no longer responds and runs beside it under the same launcher (same
    host, same parent process): a stopped or frozen process never acts on the launcher's SIGTERM, and
    torchrun would wait its 30 s shutdown timeout before its own SIGKILL, a wait its
    TORCH_ELASTIC_SHUTDOWN_TIMEOUT does not shorten after a worker's failure,
  - exits with EXIT_HANG at once (os._exit: the main thread is stuck in a collective and cannot unwind),
    so that torchrun tears down the other ranks and a restart with `--resume auto` continues.

A whole job suspended and continued (SIGSTOP and SIGCONT to every rank: `scontrol suspend`, a VM pause,
Ctrl-Z) is not a hang, though the monotonic clock ran on meanwhile: each rank's thread sees that its own
wait lasted far longer than it asked (`freeze_margin`), and counts idle time from that moment on. A
declaration is withdrawn when, during its confirmation, this rank moved on or this process was frozen.

The watchdog runs from before the process group starts (`solution.train` starts it once the inputs are
checked) until every rank has shut down. Before the first step (`setup`: the process group's start-up,
featurisation, model build, engine preparation) a rank's own idle time says nothing: rank 0 may featurise
for an hour while the others wait for it in a barrier. Then the thread watches the other ranks' heartbeats
instead: a rank whose beat does not change for hang_timeout (by this rank's clock) is not responding, and
is named, killed and reported as above. A rank stopped before its first beat (while it still imported or
checked its inputs) has no pid on record; it is found by its RANK among the processes of the same
launcher. After the loop (`shutdown`: the closing barrier, the process groups destroyed) a rank's own idle
time counts again; then, done (`wait_for_peers`), a rank waits until every other rank is done too,
watching them as in set-up: past the last collective nothing else would notice a rank stopped in its
shutdown, and the launcher would wait for it forever.

A thread cannot run while the main thread holds the GIL forever (a C call that never returns without
releasing it); faulthandler's C-level timer, re-armed at each beat, is the backstop there: it prints
every thread's stack to stderr and exits 1 once the beats stop for longer than the collective timeout.
It knows nothing of freezes: a job suspended for longer than that ends as it is continued.

Standard library only; nothing here knows about Accelerate or the model.
"""

from __future__ import annotations

import faulthandler
import json
import os
import signal
import socket
import sys
import threading
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Optional

from solution.common.jsonio import read_json_object

EXIT_HANG = 4
HEARTBEAT_DIR = "heartbeat"
STACKS_DIR = "hang-stacks"
# Phases where a rank waits for the others (a collective, or DDP's all-reduce inside backward, or the
# others' exit): a rank found here is more likely a victim than the cause.
WAITING_PHASES = ("collective", "backward", "optimizer", "done")
# Phases where a rank's own idle time says nothing and the watchdog watches the other ranks' heartbeats:
# before the first step, and once this rank is done and waits for the others to exit.
WATCHING_OTHERS = ("setup", "done")


def beat_interval(hang_timeout: float) -> float:
    """Seconds between heartbeats: a twelfth of the timeout, between 1 and 10 s (a rank's file is rewritten
    that often: 360 small writes an hour per rank at the default timeout). The cap keeps the confirmation
    (`confirm_wait`, three beats) at half a minute, so a hang is named within a minute of `hang_timeout`
    whatever the timeout (with 30 s beats it took 91 s more at the default 600 s)."""
    return max(1.0, min(10.0, hang_timeout / 12))


def confirm_wait(hang_timeout: float) -> float:
    """How long the watchdog waits between its two reads of the heartbeats: three beats and a second,
    so a rank whose thread is only slow (a loaded machine) still beats in between."""
    return 3 * beat_interval(hang_timeout) + 1.0


def freeze_margin(hang_timeout: float) -> float:
    """How much longer than asked the watchdog's own wait may last before it counts as a freeze of this
    process (stopped, then continued): a beat, or a quarter of the timeout where that is longer. A busy
    machine delays a thread's wake-up by far less; a true hang never makes the watchdog's wait longer."""
    return max(beat_interval(hang_timeout), hang_timeout / 4)


def collective_timeout(hang_timeout: float) -> float:
    """The collectives' own timeout (gloo, NCCL), set from hang_timeout: past the watchdog's detection
    (timeout + confirmation) by a minute, so the watchdog's line comes first and the library's timeout
    is the backstop for a watchdog that could not run."""
    return hang_timeout + confirm_wait(hang_timeout) + 60.0


class Progress:
    """Where this rank's main thread is: the optimizer step, the phase, and when it entered it.

    `mark` is a few attribute writes (atomic under the GIL), cheap enough for every micro-batch."""

    def __init__(self):
        self.step, self.phase, self.since = 0, "setup", time.monotonic()

    def mark(self, phase: str, step: Optional[int] = None) -> None:
        if step is not None:
            self.step = step
        self.phase, self.since = phase, time.monotonic()


@dataclass
class Beat:
    """One rank's heartbeat file, as read by another rank."""

    rank: int
    beat: int = -1  # -1: no file
    step: Optional[int] = None
    phase: str = "?"
    idle_s: float = 0.0
    pid: Optional[int] = None
    host: str = "?"
    stack: list = field(default_factory=list)

    @classmethod
    def read(cls, path: Path, rank: int) -> "Beat":
        try:
            record = read_json_object(path)  # torn, or nested too deep: no beat, as a missing file
            return cls(rank, int(record["beat"]), record.get("step"), str(record.get("phase")),
                       float(record.get("idle_s", 0.0)), record.get("pid"), str(record.get("host")),
                       list(record.get("stack") or []))
        except (OSError, ValueError, KeyError, TypeError):
            return cls(rank)


def format_ranks(ranks: list) -> str:
    """[0, 1, 2, 5] -> '0-2,5'."""
    parts, run = [], []
    for r in sorted(ranks):
        if run and r != run[-1] + 1:
            parts.append(_span(run))
            run = []
        run.append(r)
    if run:
        parts.append(_span(run))
    return ",".join(parts)


def _span(run: list) -> str:
    return str(run[0]) if len(run) == 1 else f"{run[0]}-{run[-1]}"


def diagnose(first: dict, second: dict, responding: tuple = ()) -> tuple[list, list]:
    """(stalled ranks, the ones among them that no longer respond) from two reads of every rank's
    heartbeat (`rank -> Beat`, the second `confirm_wait` after the first); `responding`: ranks known to
    respond whatever their files say (the reader's own: its thread runs, though its file may be missing).

    A rank whose beat did not move between the reads is not responding: stalled. Without such a rank,
    the ranks that are not waiting for the others (not in a WAITING_PHASES phase) are the stalled ones:
    a rank stuck in its forward pass, its data loader or a save leaves the others waiting in the next
    collective. When every rank waits (a collective that never completes), all are named."""
    silent = sorted(r for r in second if r not in responding
                    and (second[r].beat < 0 or second[r].beat == first.get(r, Beat(r)).beat))
    if silent:
        return silent, silent
    working = sorted(r for r, b in second.items() if b.phase not in WAITING_PHASES)
    return (working or sorted(second)), []


def hang_reason(me: int, progress: Progress, idle: float) -> str:
    """What the watchdog saw: this rank idle at its step and phase, or (before the first step, or once this
    rank is done) another rank's heartbeat silent for `idle` seconds."""
    if progress.phase == "done":
        return f"no heartbeat for {idle:.0f} s after this rank finished (rank {me}, done)"
    if progress.phase in WATCHING_OTHERS:
        return f"no heartbeat for {idle:.0f} s before the first step (rank {me}, in {progress.phase})"
    return f"no progress for {idle:.0f} s at step {progress.step}, phase {progress.phase} (rank {me})"


def hang_line(me: int, progress: Progress, idle: float, stalled: list, silent: list, beats: dict,
              stacks: Path, killed: list = ()) -> str:
    """One line: the hang, this rank's step and phase, each stalled rank with its last step and phase."""
    described = []
    for r in stalled:
        b = beats.get(r, Beat(r))
        where = f"last seen at step {b.step}, {b.phase}" if b.beat >= 0 else "no heartbeat yet: in its start-up"
        why = "not responding: stopped, frozen or dead" if r in silent else f"no progress for {b.idle_s:.0f} s"
        host = ", on " + b.host if b.host != "?" else ""
        described.append(f"rank {r} ({where}; {why}{host}{'; killed' if r in killed else ''})")
    return (f"hang: {hang_reason(me, progress, idle)}; stalled: {'; '.join(described)}; stacks in {stacks}; "
            f"exiting {EXIT_HANG} so the launcher can restart with --resume auto")


def parent_pid(pid: int) -> Optional[int]:
    """The parent of process `pid` (Linux's /proc), or None where it cannot be read (gone, another OS)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        return int(stat[stat.rindex(")") + 2:].split()[1])  # after "pid (comm) state": the ppid
    except (OSError, ValueError, IndexError):
        return None


def is_sibling(pid: Optional[int]) -> bool:
    """Whether process `pid` is another child of this process's parent (its launcher)."""
    return pid is not None and pid != os.getpid() and parent_pid(pid) == os.getppid()


def sibling_of_rank(rank: int) -> Optional[int]:
    """The pid of global rank `rank` if it runs beside this process under the same launcher (the same
    parent, RANK=`rank` in the environment it started with), else None. For a rank stopped before its first
    heartbeat, which left no pid on record. Only under a launcher (LOCAL_RANK set), on Linux's /proc."""
    if "LOCAL_RANK" not in os.environ:
        return None
    wanted, found = f"RANK={rank}".encode(), []
    try:
        entries = [int(e.name) for e in Path("/proc").iterdir() if e.name.isdigit()]
    except OSError:
        return None
    for pid in entries:
        if not is_sibling(pid):
            continue
        try:
            if wanted in Path(f"/proc/{pid}/environ").read_bytes().split(b"\0"):
                found.append(pid)
        except OSError:  # gone, or not ours to read
            pass
    return found[0] if len(found) == 1 else None


def kill_sibling(beat: Beat) -> bool:
    """SIGKILL the rank of `beat` if it runs on this host under this process's launcher (the same parent:
    a recycled pid or a rank another agent started is never touched): the pid its heartbeat recorded, or
    without one from this run, the sibling started as that rank. True if it was killed."""
    pid = beat.pid if beat.host == socket.gethostname() and is_sibling(beat.pid) else sibling_of_rank(beat.rank)
    if pid is None:
        return False
    try:
        os.kill(pid, signal.SIGKILL)
    except OSError:
        return False
    return True


class Watchdog:
    """A daemon thread per rank, running for the `with` block. `on_hang(record)` is called (by the rank
    that reports) before the exit, with the `hang` record for metrics.jsonl."""

    def __init__(self, progress: Progress, output_dir: Path, rank: int, world_size: int, hang_timeout: float,
                 on_hang: Callable[[dict], None] = lambda record: None, exit: Callable[[int], None] = os._exit):
        self.progress, self.out, self.rank, self.world = progress, Path(output_dir), rank, world_size
        self.timeout, self.interval = hang_timeout, beat_interval(hang_timeout)
        self.on_hang, self._exit = on_hang, exit
        self.beat, self._stop = 0, threading.Event()
        self._writing = threading.Lock()  # the thread beats, and so does the main thread once it is done
        self._main = threading.main_thread().ident
        self._thread: Optional[threading.Thread] = None
        self._warned = False
        # This watcher's clock: idle time and other ranks' silence count from here at most. Set at the
        # start, and again when this process wakes from a freeze (no rank moved while the job stood still).
        self._awake_since = time.monotonic()
        self._heard: dict = {}  # rank -> ((pid, beat) last read, when this watcher first read it)

    def heartbeat_path(self, rank: int) -> Path:
        return self.out / HEARTBEAT_DIR / f"rank-{rank}.json"

    def __enter__(self) -> "Watchdog":
        if self.timeout > 0:
            if self.rank == 0:  # the others wait for it (see `_write_beat`)
                self.heartbeat_path(self.rank).parent.mkdir(parents=True, exist_ok=True)
            self._awake_since = time.monotonic()
            self._write_beat()
            self._thread = threading.Thread(target=self._run, name="hang-watchdog", daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
            faulthandler.cancel_dump_traceback_later()

    def wait_for_peers(self, interrupted: Callable[[], bool] = lambda: False, poll_s: float = 0.2) -> None:
        """This rank is done (its process groups destroyed): say so at once, and wait until every other rank
        is done too, or its process on this host is gone, or `interrupted()` (a signal: the launcher ends the
        job). Meanwhile the thread watches the others as before the first step: one stopped or frozen in its
        shutdown is named and killed, and this rank exits 4. Without a watchdog (hang_timeout 0, or one
        rank) there is nothing to wait for safely: returns."""
        self.progress.mark("done")
        if self._thread is None or self.world == 1:
            return
        self._write_beat()
        pending = [r for r in range(self.world) if r != self.rank]
        while self._thread.is_alive() and not interrupted():
            pending = [r for r in pending if not self._finished(Beat.read(self.heartbeat_path(r), r))]
            if not pending:
                return
            time.sleep(poll_s)  # only the ranks not yet done are read again: the ranks end within moments

    def _finished(self, beat: Beat) -> bool:
        """Whether the rank of `beat`, read once this rank is done, is done too: it said so, or its process on
        this host is gone (its launcher has its exit code)."""
        if self.progress.phase != "done":  # a file an earlier run left says "done" too: only the present counts
            return False
        gone = beat.pid is not None and beat.host == socket.gethostname() and parent_pid(beat.pid) is None
        return beat.phase == "done" or gone

    # -- the thread -----------------------------------------------------------------------------
    def _run(self) -> None:
        last = time.monotonic()
        while not self._stop.wait(self.interval):
            self._write_beat()
            faulthandler.dump_traceback_later(collective_timeout(self.timeout), exit=True)
            # One reading for every judgement below: a stop that lands after it is seen at the next wake-up
            # as a freeze, and nothing read after the stop is judged against the time it lasted.
            now = time.monotonic()
            self._notice_freeze(now - last, now)
            if self._hang_seen(now):
                return
            last = time.monotonic()

    def _notice_freeze(self, took: float, now: float) -> bool:
        """Whether one turn of this thread (asked to last a beat) lasted far longer: the process was stopped
        and continued (the whole job suspended, a VM paused), and the monotonic clock ran on meanwhile.
        Idle time and other ranks' silence then count from `now`."""
        if took <= self.interval + freeze_margin(self.timeout):
            return False
        self._awake_since = now
        return True

    def _idle(self, now: float) -> float:
        return now - max(self.progress.since, self._awake_since)

    def _hang_seen(self, now: float) -> bool:
        """Declare a hang if there is one; True once declared (the process has exited, unless `exit` was
        replaced). Before the first step and once done only silent ranks count, else this rank's idle time."""
        if self.progress.phase in WATCHING_OTHERS:
            quiet = self._quiet_ranks(now)
            return bool(quiet) and self._declare(max(quiet.values()))
        idle = self._idle(now)
        return idle > self.timeout and self._declare(idle)

    def _quiet_ranks(self, now: float) -> dict:
        """The other ranks whose heartbeat has not changed for hang_timeout by this watcher's clock (rank ->
        seconds). A file that is missing, or left by an earlier run in output_dir and never rewritten, has
        not changed since this watcher started; a rank that starts later than this one, but within the
        timeout, is heard from in time."""
        quiet = {}
        for r in range(self.world):
            if r == self.rank:
                continue
            b = Beat.read(self.heartbeat_path(r), r)
            if self._finished(b):
                continue
            seen, since = self._heard.get(r, ((b.pid, b.beat), self._awake_since))
            if (b.pid, b.beat) != seen:
                seen, since = (b.pid, b.beat), now
            self._heard[r] = (seen, since)
            silent = now - max(since, self._awake_since)
            if silent > self.timeout:
                quiet[r] = silent
        return quiet

    def _main_stack(self) -> list:
        frame = sys._current_frames().get(self._main)
        return traceback.format_stack(frame)[-12:] if frame is not None else []

    def _write_beat(self) -> None:
        with self._writing:
            self._write_beat_locked()

    def _write_beat_locked(self) -> None:
        path = self.heartbeat_path(self.rank)
        # Only the main process (RANK 0) makes the folder, once it holds output_dir (`solution.train` starts
        # the watchdog before any process group): a rank started beside a run that turns out to be refused
        # writes nothing there. Until then this rank watches without beating.
        if self.rank != 0 and not path.parent.is_dir():
            return
        self.beat += 1
        record = {"rank": self.rank, "beat": self.beat, "step": self.progress.step, "phase": self.progress.phase,
                  "idle_s": round(self._idle(time.monotonic()), 1), "pid": os.getpid(), "host": socket.gethostname(),
                  "time": time.time(), "stack": self._main_stack()}
        tmp = path.with_name(f"{path.name}.tmp-{os.getpid()}")
        try:
            tmp.write_text(json.dumps(record), encoding="utf-8")
            os.replace(tmp, path)
        except OSError as e:  # a heartbeat that cannot be written must not stop training
            if not self._warned:
                self._warned = True
                print(f"warning: rank {self.rank}: cannot write {path} ({e.strerror}); other ranks cannot "
                      "name this one if it hangs", file=sys.stderr, flush=True)

    def read_all(self) -> dict:
        return {r: Beat.read(self.heartbeat_path(r), r) for r in range(self.world)}

    def _confirmed(self) -> bool:
        """Wait `confirm_wait`, beating (other ranks are confirming too). False if this process was frozen
        meanwhile: what was read before the freeze says nothing about after it."""
        last = time.monotonic()
        deadline = last + confirm_wait(self.timeout)
        while (now := time.monotonic()) < deadline:
            time.sleep(min(self.interval, deadline - now))
            self._write_beat()
            now = time.monotonic()
            if self._notice_freeze(now - last, now):
                return False
            last = now
        return True

    def _declare(self, idle: float) -> bool:
        """Confirm, name the stalled ranks, dump stacks, report (one rank), exit; True once done. False, and
        the thread goes back to watching, when the confirmation shows none: this rank moved on meanwhile,
        this process was frozen, or before the first step every other rank beats again."""
        since, phase = self.progress.since, self.progress.phase
        first = self.read_all()
        if not self._confirmed() or self.progress.since != since:
            return False
        second = self.read_all()
        second[self.rank] = Beat.read(self.heartbeat_path(self.rank), self.rank)
        if phase in WATCHING_OTHERS:  # only the silent ranks count, less those done meanwhile
            finished = [r for r in second if r != self.rank and self._finished(second[r])]
            second = {r: b for r, b in second.items() if r not in finished}
        stalled, silent = diagnose(first, second, responding=(self.rank,))
        if phase in WATCHING_OTHERS and not silent:  # a slow heartbeat, not a silent rank
            return False
        faulthandler.cancel_dump_traceback_later()
        stacks = self.out / STACKS_DIR
        self._dump_own_stacks(stacks, idle)
        reporter = min(r for r in range(self.world) if r not in silent)  # never empty: this rank responds
        if self.rank == reporter:
            for r in silent:
                self._dump_last_seen(stacks, second[r])
            killed = [r for r in silent if kill_sibling(second[r])]
            line = hang_line(self.rank, self.progress, idle, stalled, silent, second, stacks, killed)
            print(line, file=sys.stderr, flush=True)
            record = {"event": "hang", "step": self.progress.step, "phase": self.progress.phase, "rank": self.rank,
                      "idle_s": round(idle, 1), "stalled_ranks": stalled, "not_responding": silent,
                      "killed": killed, "stacks": str(stacks)}
            try:
                self.on_hang(record)
            except Exception as e:  # the exit must happen whatever the record's writer does
                print(f"warning: rank {self.rank}: hang record not written ({e})", file=sys.stderr, flush=True)
        sys.stdout.flush()
        self._exit(EXIT_HANG)
        return True

    def _dump_own_stacks(self, stacks: Path, idle: float) -> None:
        try:
            stacks.mkdir(parents=True, exist_ok=True)
            with open(stacks / f"rank-{self.rank}-pid{os.getpid()}.txt", "w", encoding="utf-8") as f:
                f.write(f"rank {self.rank} pid {os.getpid()} on {socket.gethostname()}: "
                        f"{hang_reason(self.rank, self.progress, idle)}; every thread:\n")
                f.flush()
                faulthandler.dump_traceback(file=f, all_threads=True)
        except OSError as e:
            print(f"warning: rank {self.rank}: cannot write stacks to {stacks} ({e.strerror})", file=sys.stderr,
                  flush=True)

    def _dump_last_seen(self, stacks: Path, beat: Beat) -> None:
        """A rank that no longer responds cannot dump its stack: the one its last heartbeat recorded."""
        text = (f"rank {beat.rank} pid {beat.pid} on {beat.host}: not responding; its main thread's stack at its "
                f"last heartbeat (step {beat.step}, phase {beat.phase}):\n" + "".join(beat.stack))
        try:
            (stacks / f"rank-{beat.rank}-pid{beat.pid}.last-seen.txt").write_text(text, encoding="utf-8")
        except OSError:
            pass
