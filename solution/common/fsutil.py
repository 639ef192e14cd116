"""Write-to-temp-then-rename, the one way this project writes an output file or directory.

A reader never sees half a file under the real name: content goes to
`NAME.tmp-<pid>` beside it (same directory, so the rename is atomic on one
filesystem) and is renamed when complete. Any failure removes the temporary
file, and a full disk becomes one sentence naming the path and the free space
(`DiskFullError`) instead of an `OSError` traceback.

A character device or a FIFO (`/dev/null`, a terminal, a named pipe), or an open descriptor's name
(`/dev/stdout`, `/dev/fd/N`, whatever it points at) is written straight through instead: renaming over
it would replace the device node (or the link) with a regular file, and a FIFO's reader would get
nothing. Any other special file (a block device, a socket) is refused.

`exclusive_lock` is the run's lock on its output folder (one training per
output_dir at a time).

Standard library only: `submission/` imports it.
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import shutil
import socket
import stat
import sys
import tempfile
import traceback
from pathlib import Path
from typing import IO, Callable, Iterator, Optional, Union

PathLike = Union[str, "os.PathLike[str]"]


class DiskFullError(OSError):
    """No space left while writing an output; its text names the path and the free space."""

    def __init__(self, path: PathLike):
        super().__init__(errno.ENOSPC, disk_full_message(path))

    def __str__(self) -> str:
        return self.strerror


def _human(num_bytes: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if num_bytes < 1024 or unit == "TiB":
            return f"{num_bytes:.0f} {unit}" if unit == "B" else f"{num_bytes:.1f} {unit}"
        num_bytes /= 1024
    return f"{num_bytes} B"  # unreachable; keeps type checkers quiet


def _existing_folder(path: PathLike) -> Path:
    """The folder `path` is (to be) written in, or its nearest existing ancestor: where its filesystem is asked."""
    folder = Path(path).resolve().parent
    while not folder.exists() and folder != folder.parent:
        folder = folder.parent
    return folder


def disk_full_message(path: PathLike) -> str:
    """'PATH: no space left on device (N free in DIR)'; the free space from the nearest existing folder."""
    folder = _existing_folder(path)
    try:
        free = f"{_human(shutil.disk_usage(folder).free)} free in {folder}"
    except OSError:
        free = f"free space in {folder} unknown"
    return f"{path}: no space left on device ({free})"


FULL_BELOW = 1 << 20  # bytes: a filesystem with less free than this after a failed write was full


def out_of_space(error: BaseException, path: PathLike) -> bool:
    """Whether `error`, raised by a write to `path`, was the disk filling up.

    An OSError says so by its errno. Other writers lose the errno: safetensors' SafetensorError quotes
    the system's words ('No space left on device (os error 28)'); torch.save's zip writer (so
    DeepSpeed's and Accelerate's checkpoints) raises a RuntimeError without them ('unexpected pos
    ...', 'PytorchStreamWriter failed writing file'), so for a RuntimeError the filesystem itself is
    asked, before the partial output is removed: under FULL_BELOW bytes free. Nothing else is a full disk."""
    if isinstance(error, OSError):
        return error.errno == errno.ENOSPC
    if os.strerror(errno.ENOSPC) in str(error):
        return True
    if not isinstance(error, RuntimeError):
        return False
    try:
        return shutil.disk_usage(_existing_folder(path)).free < FULL_BELOW
    except OSError:
        return False


@contextlib.contextmanager
def removed_if_disk_full(tmp: PathLike, error: Callable[[], BaseException]) -> Iterator[None]:
    """Run a write into `tmp` (a temporary file or folder). If the disk fills up (`out_of_space`), `tmp`
    is removed and `error()` raised, made once it is gone (a message then counts the space freed).
    Any other failure passes unchanged, `tmp` left for the writer's next attempt to clear."""
    try:
        yield
    except Exception as e:
        if not out_of_space(e, tmp):
            raise
        # torch's failed zip writer keeps its file open from the frames the error holds (and the error
        # before it): cleared, the file closes and its space is free once removed.
        failed: Optional[BaseException] = e
        while failed is not None:
            traceback.clear_frames(failed.__traceback__)
            failed = failed.__context__
        _remove(Path(tmp))
        raise error() from None


def temp_name(path: PathLike) -> Path:
    """The temporary sibling `path` is written under: `NAME.tmp-<pid>`."""
    p = Path(path)
    return p.with_name(f"{p.name}.tmp-{os.getpid()}")


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        with contextlib.suppress(FileNotFoundError):
            path.unlink()


class _Output:
    """The temporary file as the caller sees it: a full disk while writing is named after the final path.

    Raised here, at its source, because with two outputs open (a CSV and a scores file) the error
    passes through both context managers, and only the file that failed may name itself."""

    def __init__(self, f: IO, path: PathLike):
        self._f, self._path = f, path

    def _guard(self, method: str, *args):
        try:
            return getattr(self._f, method)(*args)
        except OSError as e:
            if e.errno == errno.ENOSPC and not isinstance(e, DiskFullError):
                raise DiskFullError(self._path) from e
            raise

    def write(self, data):
        return self._guard("write", data)

    def writelines(self, lines):
        return self._guard("writelines", lines)

    def flush(self):
        return self._guard("flush")

    def __getattr__(self, name):
        return getattr(self._f, name)


_DESCRIPTOR = re.compile(r"/dev/(stdout|stderr|fd/[0-9]+)|/proc/(self|[0-9]+)/fd/[0-9]+")


def _link_chain(path: PathLike, limit: int = 40) -> list:
    """`path` and every name its symbolic links pass through, absolute, in order: a link to `/proc/self/fd/1`
    is a descriptor's name however many links stand before it."""
    hops, current = [], os.path.abspath(path)
    for _ in range(limit):
        hops.append(current)
        if not os.path.islink(current):
            break
        current = os.path.normpath(os.path.join(os.path.dirname(current), os.readlink(current)))
    return hops


def write_target(path: PathLike) -> Path:
    """Where writing `path` lands: `path` itself, or through its links the file they name (a training file
    linked to the real one on another disk is written there; the link stays a link)."""
    p = Path(path)
    return Path(os.path.realpath(p)) if p.is_symlink() else p


def stream_target(path: PathLike) -> bool:
    """Whether `path` is, through any links, a character device or a FIFO, or names an open descriptor
    (`/dev/stdout`, `/dev/fd/1`: a shell's `> file` makes it a regular file): written straight through,
    never replaced. Another special file (a block device, a socket) is a ValueError naming it; a regular
    file, a folder or nothing there is False."""
    if any(_DESCRIPTOR.fullmatch(hop) for hop in _link_chain(path)):
        return True
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return False
    if stat.S_ISCHR(mode) or stat.S_ISFIFO(mode):
        return True
    if stat.S_ISREG(mode) or stat.S_ISDIR(mode):
        return False
    raise ValueError(f"{path}: a special file (not a regular file, character device or pipe); write elsewhere")


def _own_descriptor(path: PathLike) -> Optional[int]:
    """The number of this process's descriptor that `path` (through its links) names, or None: `/dev/stdout`
    is 1, `/dev/fd/3` and `/proc/self/fd/3` are 3."""
    for hop in _link_chain(path):
        found = _DESCRIPTOR.fullmatch(hop)
        if not found:
            continue
        if hop in ("/dev/stdout", "/dev/stderr"):
            return 1 if hop == "/dev/stdout" else 2
        parts = hop.split("/")
        if hop.startswith("/dev/fd/") or parts[2] in ("self", str(os.getpid())):
            return int(parts[-1])
    return None


@contextlib.contextmanager
def _straight_through(path: PathLike, mode: str, **open_kwargs) -> Iterator[IO]:
    """Write into a device, a pipe or a descriptor's name. A descriptor of this process is written through a
    copy of it, at its current place: opened again by name, a redirected standard output (`> log`) would
    start at byte 0 and be truncated, and what the process prints next would overwrite the file's start."""
    number = _own_descriptor(path)
    if number is None:
        f = open(path, mode.replace("x", "w"), **open_kwargs)
    else:
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):
                stream.flush()
        f = os.fdopen(os.dup(number), mode.replace("x", "w"), **open_kwargs)
    with f:
        out = _Output(f, path)
        yield out
        out.flush()


@contextlib.contextmanager
def atomic_output(path: PathLike, mode: str = "w", **open_kwargs) -> Iterator[IO]:
    """Open `path`'s temporary sibling for writing; rename it to `path` when the block ends without error.

    On any exception the temporary file is removed and `path` keeps what it held before;
    running out of space in this file raises `DiskFullError` naming `path` (not the temporary name).
    A character device or FIFO is written straight through (`stream_target`), never replaced.
    """
    if not any(c in mode for c in "wx"):
        raise ValueError(f"atomic_output needs a write mode ('w', 'wb'), got {mode!r}")
    if "b" not in mode:
        open_kwargs.setdefault("encoding", "utf-8")
    if stream_target(path):
        with _straight_through(path, mode, **open_kwargs) as out:
            yield out
        return
    target = write_target(path)  # through a link, never over it
    tmp = temp_name(target)
    f = None
    try:
        f = open(tmp, mode, **open_kwargs)
        out = _Output(f, path)
        yield out
        out.flush()  # a full disk often shows only here, when the last buffer is written
        out._guard("close")
        os.replace(tmp, target)
    except BaseException:
        if f is not None:
            with contextlib.suppress(OSError):
                f.close()
        _remove(tmp)
        raise


def atomic_write_text(path: PathLike, text: str) -> Path:
    """Write `text` (UTF-8) to `path` atomically; returns the path."""
    with atomic_output(path, "w") as f:
        f.write(text)
    return Path(path)


def publish_dir(tmp: PathLike, final: PathLike) -> bool:
    """Rename a completed directory `tmp` to `final`, atomically against a second builder.

    True: ours is published. False: `final` already existed (another process finished first);
    ours is removed and theirs is kept, since both were built from the same inputs. No
    existence check before the rename: the rename itself decides, so there is no window
    between a check and a rename for another builder to fall into.
    """
    tmp, final = Path(tmp), Path(final)
    try:
        os.rename(tmp, final)  # fails with ENOTEMPTY/EEXIST when a non-empty directory is there already
        return True
    except OSError as e:
        if e.errno not in (errno.ENOTEMPTY, errno.EEXIST):
            _remove(tmp)
            if e.errno == errno.ENOSPC:
                raise DiskFullError(final) from e
            raise
    shutil.rmtree(tmp, ignore_errors=True)
    return False


def replace_dir(tmp: PathLike, final: PathLike, keep=()) -> Path:
    """Make the completed directory `tmp` visible as `final`, replacing what `final` held.

    Two renames (the old directory aside, the new one in), so a reader sees the old directory or
    the new one, never half of one; the old one is removed afterwards, but for the entries named in `keep`
    (what a user let the command write beside, `claim_output(..., overwrite=True)`), carried into the new one."""
    tmp, final = Path(tmp), Path(final)
    old = final.with_name(f"{final.name}.old-{os.getpid()}")
    if final.exists():
        _remove(old)
        os.replace(final, old)
    os.replace(tmp, final)
    for name in keep:
        if (old / name).exists() or (old / name).is_symlink():
            os.replace(old / name, final / name)
    _remove(old)
    return final


def file_digest(path: PathLike, from_storage: bool = False) -> str:
    """sha256 of a file's bytes, read in 16 MiB blocks (model weights: a file's identity, not its name).
    `from_storage`: flushed to the device and dropped from the page cache first, so the bytes hashed are
    the ones the storage gives back, not the copy the writer left in memory."""
    import hashlib

    h = hashlib.sha256()
    with open(path, "rb") as f:
        if from_storage:
            os.fsync(f.fileno())
            if hasattr(os, "posix_fadvise"):
                os.posix_fadvise(f.fileno(), 0, 0, os.POSIX_FADV_DONTNEED)
        for block in iter(lambda: f.read(1 << 24), b""):
            h.update(block)
    return h.hexdigest()


def check_writable(path: PathLike, what: str = "output", create_dir: bool = False) -> Path:
    """Refuse at start-up an output whose folder is missing or cannot be written, naming the path.

    `path` is a file to be written (its folder is checked), or with `create_dir` a folder that
    is created if needed. The test is a real write of a temporary file, because permission bits
    say nothing about a read-only mount, and nothing at all to root.
    """
    p = Path(path)
    if not create_dir and stream_target(p):  # written straight through: the device itself must take writes
        if not os.access(p, os.W_OK):
            raise ValueError(f"{what} {path}: cannot be written (permission denied)")
        return p
    folder = p if create_dir else (p.parent if str(p.parent) else Path("."))
    if create_dir:
        if p.exists() and not p.is_dir():
            raise ValueError(f"{what} {path}: is a file, expected a folder")
        try:
            folder.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise ValueError(f"{what} {path}: cannot create the folder ({e.strerror})") from None
    elif not folder.is_dir():
        raise ValueError(f"{what} {path}: folder {folder} does not exist")
    if not create_dir and p.is_dir():
        raise ValueError(f"{what} {path}: is a folder, expected a file name")
    try:
        with tempfile.NamedTemporaryFile(dir=folder, prefix=".write-test-"):
            pass
    except OSError as e:
        reason = disk_full_message(folder) if e.errno == errno.ENOSPC else e.strerror
        raise ValueError(f"{what} {path}: folder {folder} cannot be written ({reason})") from None
    return p


def _same_file(a, b) -> bool:
    """Whether two paths name one file: the same path once resolved, or (a hard link) the same inode."""
    if Path(a).resolve() == Path(b).resolve():
        return True
    try:
        return os.path.samefile(a, b)
    except OSError:  # one of them does not exist yet: not the same file
        return False


def check_paths_apart(outputs: list, inputs: list) -> None:
    """Refuse an output that is an input or another output, however spelled: it would replace the input
    with the CSV, or one output with the other. `outputs`, `inputs`: (what, path) pairs, both named."""
    outs = [(what, path) for what, path in outputs if path]
    for i, (what, path) in enumerate(outs):
        _check_not_input(Path(path), what, False, [*outs[:i], *inputs])  # claim_output's own check


def mark_name(command: str) -> str:
    """The file in a folder a command wrote to that names the files it wrote there (one a command, so two
    commands writing into one folder keep their own)."""
    return f".written-by-{command.replace('/', '_')}.json"


def mark_output(folder: PathLike, command: str, files, add: bool = False) -> Path:
    """Record in `folder` that `command` wrote it, and which files (names, with their sizes): what a later run
    of the same command may replace without being asked (`claim_output`). A file the folder's previous mark
    by the same command listed, still as it was written, and this run did not write again is removed: it was
    that command's, and left it would mix two runs' outputs (a corpus of two seeds). `add`: the files join
    those the mark lists, none removed (a benchmark's records, one a run, side by side in one folder)."""
    import json

    folder = Path(folder)
    kept = _marked_sizes(folder, command) if add else {}
    for stale in ({} if add else _marked_sizes(folder, command)).keys() - set(files):
        with contextlib.suppress(FileNotFoundError):
            (folder / stale).unlink()
    sizes = {**kept, **{name: (folder / name).stat().st_size for name in files}}
    sizes = {name: sizes[name] for name in sorted(sizes)}
    return atomic_write_text(folder / mark_name(command),
                             json.dumps({"command": command, "files": sizes}, indent=1) + "\n")


def _marked_files(folder: Path, command: Optional[str]) -> set:
    """The names `command` recorded writing in `folder` that are still what it wrote: a regular file (not a
    link put there since) of the size it recorded; its mark among them. Empty for another command's mark,
    an unreadable one or none."""
    return set(_marked_sizes(folder, command)) | ({mark_name(command)} if command else set())


def _marked_sizes(folder: Path, command: Optional[str]) -> dict:
    """name -> size of the files `_marked_files` names, the mark itself left out."""
    if command is None or not (folder / mark_name(command)).is_file():
        return {}
    from solution.common.jsonio import JsonError, read_json_object

    try:
        mark = read_json_object(folder / mark_name(command))
    except JsonError:
        return {}
    files = mark.get("files")
    if mark.get("command") != command or not isinstance(files, dict):
        return {}
    return {str(name): size for name, size in files.items() if _unchanged(folder / str(name), size)}


def _unchanged(path: Path, size) -> bool:
    try:
        st = os.lstat(path)
    except OSError:
        return False
    return stat.S_ISREG(st.st_mode) and st.st_size == size


def _is_temporary(name: str) -> bool:
    """A temporary name this project's writers leave only while they run (or when killed): never the user's."""
    return bool(re.search(r"\.(tmp|old)-[0-9]+$", name))


def _inside(inner: Path, outer: Path) -> bool:
    try:
        inner.resolve().relative_to(outer.resolve())
        return True
    except ValueError:
        return False


def _check_not_input(path: Path, what: str, folder: bool, inputs) -> None:
    for other, other_path in inputs:
        if not other_path:
            continue
        into_input = Path(other_path).is_dir() and _inside(path, Path(other_path))
        if _same_file(path, other_path):
            raise ValueError(f"{what} {path} is the same file as {other} {other_path}; write it elsewhere")
        if (folder and _inside(Path(other_path), path)) or into_input:
            where = "is inside" if into_input else "holds"
            raise ValueError(f"{what} {path} {where} {other} {other_path}: an output never replaces an input; "
                             "write it elsewhere")


def _refuse_existing(path: Path, what: str, why: str) -> ValueError:
    return ValueError(f"{what} {path}: {why}; it is not replaced unless asked: pass --overwrite (its files of "
                      f"the same names are then replaced, nothing else is removed), or choose another {what}")


def claim_output(path: PathLike, what: str, *, folder: bool = False, command: Optional[str] = None,
                 names=(), owned: Optional[Callable[[Path], bool]] = None, overwrite: bool = False,
                 inputs=()) -> Path:
    """Check, before any work, that the command may write its output `path` (`what`: the argument naming it);
    returns where to write (through a link to a folder, the folder it names). A ValueError names what is wrong.

    The rule every command keeps:
    - an output is never one of the command's `inputs` ((what, path) pairs) nor a folder holding one;
    - a link is written through, never replaced; a pipe or device takes a file, never a folder;
    - nothing the command did not make is replaced unless `overwrite`: an existing file is replaced when
      `owned(path)` recognises it as this command's output or its folder's mark by `command` lists it; an
      existing folder when it holds nothing but the `names` this command writes and the files its own mark
      (`mark_output` by `command`) lists;
    - with `overwrite`, still no folder is deleted to make room (`replace_dir` keeps what it does not replace).
    """
    p = given = Path(path)
    _check_not_input(p, what, folder, inputs)
    if stream_target(p):
        if folder:
            raise ValueError(f"{what} {path}: a pipe or device, expected a folder")
        return check_writable(p, what)
    if p.is_symlink() and p.exists():
        p = write_target(p)
    if not p.exists():
        check_writable(p, what, create_dir=False) if not folder else _check_parent(p, what)
        return p
    if folder != p.is_dir():
        raise ValueError(f"{what} {path}: is a {'file' if folder else 'folder'}, expected a "
                         f"{'folder' if folder else 'file name'}")
    if folder:
        allowed = set(names) | _marked_files(p, command)
        # A link is never one of a command's own files: replacing the folder would drop it.
        foreign = sorted(e.name for e in p.iterdir()
                         if (e.name not in allowed or e.is_symlink()) and not _is_temporary(e.name))
        if foreign and not overwrite:
            shown = ", ".join(foreign[:3]) + (f" and {len(foreign) - 3} more" if len(foreign) > 3 else "")
            raise _refuse_existing(Path(path), what, f"holds files this command did not write ({shown})")
        return check_writable(p, what, create_dir=True)
    ours = (owned is not None and owned(p)) or given.name in _marked_files(given.parent, command)
    if not overwrite and p.stat().st_size and not ours:  # an empty file holds nothing
        raise _refuse_existing(Path(path), what, "exists and is not an output of this command")
    return check_writable(p, what)


def write_record(path: PathLike, text: str, command: str) -> Path:
    """Write a record claimed by `claim_record` whole, and mark it as `command`'s (beside its other records)."""
    out = atomic_write_text(path, text)
    if not stream_target(path) and not Path(path).is_symlink():
        mark_output(Path(path).parent, command, [Path(path).name], add=True)
    return out


def mark_written(path: PathLike, command: str) -> None:
    """Mark a file another writer made (a chart from matplotlib) as `command`'s, for its next run."""
    if not stream_target(path) and not Path(path).is_symlink() and Path(path).is_file():
        mark_output(Path(path).parent, command, [Path(path).name], add=True)


def _check_parent(p: Path, what: str) -> None:
    """A folder to be made: the nearest existing folder above it must take writes."""
    above = p.parent
    while not above.exists() and above != above.parent:
        above = above.parent
    if not above.is_dir():
        raise ValueError(f"{what} {p}: cannot create the folder ({above} is a file, not a folder)")
    check_writable(above, what, create_dir=True)


def starts_with(prefix: bytes) -> Callable[[Path], bool]:
    """An `owned` test for `claim_output`: the file's first bytes are `prefix` (a CSV header, a JSON key)."""
    def owned(path: Path) -> bool:
        try:
            with Path(path).open("rb") as f:
                return f.read(len(prefix)) == prefix
        except OSError:
            return False
    return owned


LOCK_FILE = "train.lock"


@contextlib.contextmanager
def exclusive_lock(folder: PathLike, what: str = "folder") -> Iterator[Path]:
    """Hold an exclusive lock on `folder` for the block: flock on folder/train.lock, which then names the
    holder ("pid N on HOST"). Held elsewhere: a ValueError naming the folder and that holder, at once.

    The kernel drops the lock when its holder's last descriptor closes, a killed process included, so a
    stale file locks nothing; the file stays (removing it would let a third process lock a new file while
    a second holds the old one). Where the filesystem has no flock (Lustre without `-o flock`), the block
    runs unlocked after a one-line warning."""
    import fcntl

    path = Path(folder) / LOCK_FILE
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 256, 0).decode(errors="replace").strip() or "holder unknown"
            raise ValueError(f"{what} {folder}: in use by another run ({holder}; lock {path}); wait for it to "
                             f"end or stop it, or choose another {what}") from None
        except OSError as e:
            print(f"warning: {what} {folder}: cannot be locked ({e.strerror}); a second run on it would not be "
                  "refused", file=sys.stderr, flush=True)
        else:
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"pid {os.getpid()} on {socket.gethostname()}\n".encode(), 0)
        yield path
    finally:
        os.close(fd)
