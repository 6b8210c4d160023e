"""Writing files so that a crash never leaves half a file, and cleaning up after a process that died.

A file is written to a hidden temporary file beside it, ``.NAME.<pid><suffix>``, and moved into
place with ``os.replace`` only once complete. The temporary file is created with the permissions
of the umask (``0o644`` under the usual umask ``0o022``), like any file the user creates, so a
folder filled once can be shared with other users.

A process killed outright (SIGKILL, the out-of-memory killer, a power cut) runs no cleanup and
leaves its temporary file behind. The process id in the name tells whether its writer still
runs: :func:`remove_stale_temp_files` removes those whose writer is gone.

A folder that a command builds whole (the site, the decks, an exported model) is built the same
way: into a hidden temporary folder beside it, swapped in only once complete
(:func:`build_folder`), so that a Ctrl-C or a crash midway leaves the earlier build as it was.
A build writes a marker file into its folder, and replaces only a folder holding that marker
(or an empty one) unless told to with ``force``: a folder of the user's is never replaced by
mistake.
"""

import contextlib
import datetime
import itertools
import os
import re
import shutil
import signal
import stat
import threading
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import IO

from annotated.support.errors import CourseError, UsageError

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
                    if stat.S_ISDIR(info.st_mode):
                        shutil.rmtree(path)
                    else:
                        path.unlink()
                except (FileNotFoundError, PermissionError):
                    continue  # gone meanwhile, or another user's in a folder we may not clean
                removed.append(path)
    return removed


# ---------------------------------------------------------------------------------------------
# Folders built whole: into a temporary folder beside the target, swapped in at the end.

MARKER = ".built-by-annotated"  # written into every folder a build makes; only such a folder is replaced


def check_output_folder(target: str | Path, force: bool = False, inputs: Iterable[str | Path] = (),
                        protected: Iterable[str | Path] = (), option: str = "--out") -> Path:
    """``target`` resolved, once checked to be a folder a build may replace as a whole; call it
    before any work. Refused always: a file, the file system's root, the home folder, the folder
    the command runs in or one holding it, a folder holding one of ``protected`` (the course's own
    files) or of ``inputs`` (what the build reads). Refused unless ``force``: a folder that is not
    empty and has no :data:`MARKER`, so was not made by a build (its files could be the user's)."""
    shown = Path(target)
    target = shown.expanduser().resolve()
    if target.exists() and not target.is_dir():
        raise UsageError(f"{option} {shown} is a file; name a folder for the output (it is created, or replaced "
                         f"as a whole), e.g. {option} {shown.parent / (shown.stem + '-build')}")
    home = Path.home().resolve()
    if target == Path(target.anchor) or target == home or Path.cwd().resolve().is_relative_to(target):
        where = "the folder this command runs in, or holds it" if target not in (Path(target.anchor), home) \
            else "the root of the file system" if target != home else "your home folder"
        raise UsageError(f"{option} {shown} is {where}: a build replaces its whole output folder, so it must "
                         f"be a folder of its own; name a new one, e.g. {option} {shown / 'site'}")
    for kind, paths in (("the course's files", protected), ("the input", inputs)):
        for path in paths:
            if Path(path).expanduser().resolve().is_relative_to(target):
                raise UsageError(f"{option} {shown} holds {path} ({kind}), which the build would remove when it "
                                 f"replaces the folder; name a folder of its own for the output")
    if target.is_dir() and not force and not (target / MARKER).is_file() and any(target.iterdir()):
        raise UsageError(f"{shown} already exists and was not written by this command (it has no {MARKER} "
                         f"file), so it is not replaced: its files could be yours. Name a new {option} folder, "
                         f"or pass --force to replace {shown} and everything in it")
    parent = nearest_existing(target.parent)
    if not parent.is_dir():
        raise CourseError(f"cannot write {shown}: {parent} is a file, not a folder; choose another {option}")
    return target


def _unique_beside(path: Path, suffix: str) -> Path:
    """A name ``.NAME.<pid>[-n]<suffix>`` beside ``path`` that nothing has yet."""
    for n in itertools.count():
        candidate = temp_path(path, suffix, os.getpid(), n)
        if not os.path.lexists(candidate):
            return candidate
    raise AssertionError("unreachable")


@contextlib.contextmanager
def _sigint_deferred() -> Iterator[None]:
    """A Ctrl-C during the block takes effect at its end (the block's steps must not be split)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    caught = []
    previous = signal.signal(signal.SIGINT, lambda signum, frame: caught.append(signum))
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
    if caught and callable(previous):
        previous(signal.SIGINT, None)  # as if it came now (the default handler raises KeyboardInterrupt)


def swap_in(new: Path, target: Path) -> None:
    """Put the folder ``new`` in place of ``target`` (which may not exist); the old one is then removed.
    The two renames are not split by a Ctrl-C."""
    old = None
    try:
        with _sigint_deferred():
            if target.exists():
                old = _unique_beside(target, ".old")
                os.rename(target, old)
            os.rename(new, target)
    finally:
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)


@contextlib.contextmanager
def build_folder(target: str | Path, command: str, force: bool = False, keep: bool = False,
                 inputs: Iterable[str | Path] = (), protected: Iterable[str | Path] = (),
                 option: str = "--out", marker: bool = True) -> Iterator[Path]:
    """``with build_folder(out, "python -m ...") as tmp:`` write the whole output into ``tmp``;
    when the block ends without an exception, ``tmp`` gets the :data:`MARKER` and replaces ``out``.

    ``out`` is checked first (:func:`check_output_folder`, with ``force``, ``inputs`` and
    ``protected``), and ``tmp``, ``.NAME.<pid>.tmp`` beside it, is created before the block runs,
    so a folder that cannot be written fails before any work. With ``keep``, ``tmp`` starts as a
    copy of ``out`` (a build that adds to its output). On an exception, Ctrl-C included, ``tmp``
    is removed and ``out`` keeps what it had; a temporary folder of a killed build is removed by
    the next build beside it. ``marker=False`` writes no marker (for a folder of the repository
    that a build must never replace without ``force``).
    """
    target = check_output_folder(target, force, inputs, protected, option)
    target.parent.mkdir(parents=True, exist_ok=True)
    for suffix in (".tmp", ".old"):
        remove_stale_temp_files(target.parent, f".{target.name}.", suffix)
    with _lock:
        tmp = _unique_beside(target, ".tmp")
        os.mkdir(tmp)  # 0o777 & ~umask, like any folder the user creates
        info = os.stat(tmp)
        inode, call = (info.st_dev, info.st_ino), next(_calls)
        _ours[inode] = call
    try:
        if keep and target.is_dir():
            shutil.copytree(target, tmp, symlinks=True, dirs_exist_ok=True)
        yield tmp
        stamp = datetime.datetime.now().isoformat(timespec="seconds")
        if marker:
            (tmp / MARKER).write_text(f"Written by {command} on {stamp}. The next build replaces this folder "
                                      f"as a whole: keep nothing of your own in it.\n", encoding="utf-8")
        swap_in(tmp, target)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    finally:
        with _lock:
            if _ours.get(inode) == call:
                del _ours[inode]
