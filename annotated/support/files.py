"""Writing files so that a crash never leaves half a file, and cleaning up after a process that died.

A file is written to a hidden temporary file beside it, ``.NAME.<pid><suffix>``, and moved into
place with ``os.replace`` only once complete. The temporary file is created with the permissions
of the umask (``0o644`` under the usual umask ``0o022``), like any file the user creates, so a
folder filled once can be shared with other users.

A process killed outright (SIGKILL, the out-of-memory killer, a power cut) runs no cleanup and
leaves its temporary file behind. The process id in the name tells whether its writer still
runs: :func:`remove_stale_temp_files` removes those whose writer is gone.
"""

import contextlib
import itertools
import os
import re
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import IO

# Seconds a temporary file of a dead process must have gone unmodified before it is removed:
# a folder shared over the network (a home directory on a cluster) sees writers on other
# machines, whose process ids mean nothing here; a writer that is alive keeps touching its file.
STALE_AFTER_S = 60.0

_lock = threading.Lock()
# The temporary files this process is writing: (device, inode) -> a number unique to the call.
# Inodes, not paths: one folder can be named in many ways ("data", "./data", "/home/me/data").
_ours: dict[tuple[int, int], int] = {}
_calls = itertools.count()


def temp_path(path: Path, suffix: str, pid: int, n: int = 0) -> Path:
    """``.NAME.<pid><suffix>`` beside ``path`` (``.NAME.<pid>-<n><suffix>`` for n > 0)."""
    tag = str(pid) if n == 0 else f"{pid}-{n}"
    return path.parent / f".{path.name}.{tag}{suffix}"


def open_temp_beside(path: str | Path, suffix: str = ".tmp", mode: str = "wb") -> tuple[IO, Path]:
    """Create ``.NAME.<pid><suffix>`` beside ``path``, open for writing (``mode`` "wb", or "w"
    for UTF-8 text); return (file, its path).

    The file is created exclusively (an existing file is never reused) with the umask's
    permissions. The caller closes it, then moves it onto ``path`` with ``os.replace`` or
    deletes it; :func:`atomic_write` does both.
    """
    if mode not in ("wb", "w"):
        raise ValueError(f"mode {mode!r}: a temporary file is written, with mode 'wb' or 'w'")
    path = Path(path)
    with _lock:
        for n in itertools.count():
            tmp = temp_path(path, suffix, os.getpid(), n)
            try:
                fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)  # 0o666 & ~umask
            except FileExistsError:
                continue  # taken (another thread, or an earlier process with this pid): next name
            info = os.fstat(fd)
            _ours[info.st_dev, info.st_ino] = next(_calls)
            break
    return os.fdopen(fd, mode, encoding=None if mode == "wb" else "utf-8"), tmp


@contextlib.contextmanager
def atomic_write(path: str | Path, suffix: str = ".tmp", mode: str = "wb") -> Iterator[IO]:
    """``with atomic_write(path) as f: f.write(...)``: ``path`` gets the whole new content, or
    keeps what it had.

    The content goes to a temporary file beside ``path`` (see :func:`open_temp_beside`), which
    is flushed to disk and moved onto ``path`` when the block ends without an exception; on an
    exception it is deleted and the exception goes on.
    """
    out, tmp = open_temp_beside(path, suffix, mode)
    info = os.fstat(out.fileno())
    inode = (info.st_dev, info.st_ino)
    call = _ours[inode]
    try:
        with out:
            yield out
            out.flush()
            os.fsync(out.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    finally:
        with _lock:
            if _ours.get(inode) == call:  # not a newer file that was given the same inode
                del _ours[inode]


def nearest_existing(path: str | Path) -> Path:
    """``path`` itself if it exists, else its nearest ancestor that does: the place that decides
    whether ``path`` can be created (a file there means it cannot)."""
    path = Path(path)
    while not path.exists() and path != path.parent:
        path = path.parent
    return path


def pid_is_alive(pid: int) -> bool:
    """Whether a process with this id runs on this machine (one of another user counts)."""
    try:
        os.kill(pid, 0)  # signal 0: no signal sent, only the check that the process exists
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # it exists, under another user
    except OverflowError:
        return False  # no process has an id that large
    return True


def remove_stale_temp_files(
    folder: str | Path, prefix: str, suffix: str, stale_after_s: float = STALE_AFTER_S
) -> list[Path]:
    """Delete the files ``<prefix><pid><suffix>`` in ``folder`` whose writer is gone; return them.

    ``prefix`` is e.g. ``".train.de.gz."`` and ``suffix`` ``".part"``, as :func:`temp_path`
    names them. A file is stale when its writer is gone and it has not been modified for
    ``stale_after_s`` seconds (0: at once). The writer is gone when no process has its pid
    (``os.kill(pid, 0)`` finds none), or when the pid is this process's own but the file was
    left by an earlier process with the same id (common in containers, where a program often
    gets the same pid each run). Files of live writers are kept, as is anything whose name
    does not match, and files another user's folder permissions protect. A missing folder
    has nothing to clean.
    """
    folder = Path(folder)
    pattern = re.compile(re.escape(prefix) + r"(\d+)(?:-\d+)?" + re.escape(suffix))
    try:
        names = os.listdir(folder)
    except (FileNotFoundError, NotADirectoryError):
        return []
    removed = []
    now = time.time()
    for name in sorted(names):
        match = pattern.fullmatch(name)
        if not match:
            continue
        path = folder / name
        with _lock:
            try:
                info = path.lstat()
            except FileNotFoundError:
                continue  # its writer finished meanwhile
            pid = int(match.group(1))
            if pid == os.getpid():
                writer_gone = (info.st_dev, info.st_ino) not in _ours
            else:
                writer_gone = not pid_is_alive(pid)
            if writer_gone and now - info.st_mtime >= stale_after_s:
                try:
                    path.unlink()
                except (FileNotFoundError, PermissionError):
                    continue  # gone meanwhile, or another user's in a folder we may not clean
                removed.append(path)
    return removed
