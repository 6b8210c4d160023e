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

Every command writes a file the same way (:func:`atomic_write`, or :func:`write_text`,
:func:`write_bytes`, :func:`write_notebook`, :func:`copy_file` on top of it): a temporary file
beside the target, flushed to disk, renamed over the target. A target that is a symbolic link is
refused, never written through. ``exclusive=True`` (an output that must not exist yet) is checked
again when the file is saved, by a hard link that fails if the name is taken, so that two
processes cannot both create it. :func:`check_output_file`, called before any work, refuses an
output that is one of the command's inputs, a file of the course that git tracks, or a file of
the shipped model (the last two unless forced). :func:`signals_as_interrupt` makes SIGTERM and
SIGHUP (sent by ``timeout``, Slurm, Kubernetes, a cancelled CI job, a closed terminal) stop a
command the way Ctrl-C does, so that it cleans up what it was writing.
"""

import contextlib
import datetime
import errno
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


class OutputRefused(UsageError):
    """An output a command must not write (a link, one of its inputs, a course file, the shipped
    model); raised before any work, the message names the path and the fix."""


class OutputExists(CourseError, FileExistsError):
    """An output that had to be new was created by someone else while the command worked."""

    def __str__(self) -> str:
        return self.strerror or super().__str__()


def _shown(path: str | Path) -> str:
    return os.fspath(path)


def refuse_link(path: str | Path, option: str = "--out") -> None:
    """An :class:`OutputRefused` if ``path`` is a symbolic link (dangling or not): a command
    never writes through one, which would change a file elsewhere."""
    if os.path.islink(path):
        try:
            where = f" (to {os.readlink(path)})"
        except OSError:
            where = ""
        raise OutputRefused(f"{option} {_shown(path)} is a symbolic link{where}; the command never writes "
                            f"through a link, which would change the file it points to: remove the link, or "
                            f"name another file")


def _refuse_folder(path: str | Path, option: str) -> None:
    if os.path.isdir(path):
        raise OutputRefused(f"{option} {_shown(path)} is a folder; name a file for the output, "
                            f"e.g. {option} {Path(path) / 'out'}")


@contextlib.contextmanager
def atomic_write(path: str | Path, suffix: str = ".tmp", mode: str = "wb", *,
                 exclusive: bool = False, option: str = "--out") -> Iterator[IO]:
    """``with atomic_write(path) as f: f.write(...)``: ``path`` gets the whole new content, or
    keeps what it had.

    The content goes to a temporary file beside ``path`` (see :func:`open_temp_beside`), which
    is flushed to disk and moved onto ``path`` when the block ends without an exception; on an
    exception (a full disk, Ctrl-C) it is deleted and the exception goes on. A ``path`` that is
    a symbolic link or a folder is refused before anything is written (:class:`OutputRefused`).
    With ``exclusive``, ``path`` must not exist when the file is saved: the temporary file is
    hard-linked to it, which fails if the name is taken, so of two processes that create the same
    file only one succeeds; the other gets :class:`OutputExists` and ``path`` keeps the first's.
    """
    refuse_link(path, option)
    _refuse_folder(path, option)
    out, tmp = open_temp_beside(path, suffix, mode)
    info = os.fstat(out.fileno())
    inode = (info.st_dev, info.st_ino)
    call = _ours[inode]
    try:
        with out:
            yield out
            out.flush()
            os.fsync(out.fileno())
        if exclusive:
            _create_exclusively(tmp, Path(path), option)
        else:
            os.replace(tmp, path)  # a link put there meanwhile is replaced, never followed
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    finally:
        with _lock:
            if _ours.get(inode) == call:  # not a newer file that was given the same inode
                del _ours[inode]


def _create_exclusively(tmp: Path, path: Path, option: str) -> None:
    """Give the complete file ``tmp`` the name ``path``, which must not exist (atomically)."""
    taken = OutputExists(errno.EEXIST, f"{option} {path} was created by another process while this one "
                                       f"worked, and is kept; name another file, or pass --overwrite to replace "
                                       f"it", str(path))
    try:
        os.link(tmp, path)  # fails if path exists, a dangling link included
    except FileExistsError:
        raise taken from None
    except OSError as error:
        if error.errno not in (errno.EPERM, errno.ENOTSUP, errno.EOPNOTSUPP, errno.EMLINK, errno.ENOSYS):
            raise
        # A file system without hard links (FAT, some network shares): claim the name, then fill it.
        try:
            os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666))
        except FileExistsError:
            raise taken from None
        os.replace(tmp, path)
        return
    tmp.unlink()


def write_bytes(path: str | Path, data: bytes, *, exclusive: bool = False, option: str = "--out") -> Path:
    """``path`` gets ``data`` whole, or keeps what it had (:func:`atomic_write`)."""
    with atomic_write(path, exclusive=exclusive, option=option) as out:
        out.write(data)
    return Path(path)


def write_text(path: str | Path, text: str, *, exclusive: bool = False, option: str = "--out") -> Path:
    """``path`` gets ``text`` (UTF-8, newlines as given) whole, or keeps what it had."""
    return write_bytes(path, text.encode("utf-8"), exclusive=exclusive, option=option)


def write_notebook(nb, path: str | Path, *, exclusive: bool = False, option: str = "--out") -> Path:
    """``nbformat.write(nb, path)`` through :func:`atomic_write`: the notebook is whole, or as it was."""
    import nbformat

    with atomic_write(path, mode="w", exclusive=exclusive, option=option) as out:
        nbformat.write(nb, out)
    return Path(path)


def copy_file(source: str | Path, path: str | Path, *, exclusive: bool = False, option: str = "--out") -> Path:
    """A copy of ``source``'s bytes at ``path`` (not its permissions or times), through :func:`atomic_write`."""
    with open(source, "rb") as src, atomic_write(path, exclusive=exclusive, option=option) as out:
        shutil.copyfileobj(src, out)
    return Path(path)


# ---------------------------------------------------------------------------------------------
# What an output file must not be: checked before any work.

PACKAGE = Path(__file__).resolve().parents[1]  # annotated/
CHECKOUT = PACKAGE.parent  # the course's checkout (or site-packages, for an installed package)
SHIPPED_MODEL = PACKAGE / "pretrained"
COURSE_FOLDERS = ("notebooks", "exercises", "solutions", "lectures", "guide", "annotated")


def _located(path: str | Path) -> Path:
    """``path`` absolute, its folders' links resolved but not a link in its own name."""
    path = Path(path).expanduser()
    return path.parent.resolve() / path.name


def git_tracks(root: Path, relative: Path) -> bool | None:
    """Whether git tracks ``relative`` in the checkout ``root``; None without a checkout or git."""
    import subprocess

    if not (root / ".git").exists():
        return None
    try:
        listed = subprocess.run(["git", "-C", str(root), "ls-files", "-z", "--cached", "--", relative.as_posix()],
                                capture_output=True, timeout=60, check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    return relative.as_posix().encode() in listed.split(b"\0")


def is_committed_course_file(path: str | Path, root: Path = CHECKOUT) -> bool:
    """Whether ``path`` is one of the course's committed files: one git tracks in the checkout
    ``root`` under :data:`COURSE_FOLDERS` or beside them (README.md, pyproject.toml); without a git
    checkout, an existing file of those folders (for an installed package, the package's own files),
    caches aside."""
    where = _located(path)
    try:
        relative = where.relative_to(root.resolve())
    except ValueError:
        return False
    top_level = len(relative.parts) == 1  # README.md, pyproject.toml: committed when git tracks them
    if not relative.parts or (not top_level and relative.parts[0] not in COURSE_FOLDERS):
        return False
    tracked = git_tracks(root.resolve(), relative)
    if tracked is not None:
        return tracked
    return not top_level and where.is_file() and not any(part.startswith(".") or part == "__pycache__"
                                                         for part in relative.parts)


def is_shipped_model_file(path: str | Path) -> bool:
    """Whether ``path`` is the shipped model's folder ``annotated/pretrained/`` or lies in it."""
    return _located(path).is_relative_to(SHIPPED_MODEL.resolve())


def check_output_file(path: str | Path, *, inputs: Iterable[str | Path] = (), force: bool = False,
                      overwrite: bool = True, option: str = "--out", force_option: str | None = "--force",
                      overwrite_option: str = "--overwrite") -> Path:
    """``path``, once checked to be a file a command may write; call it before any work, then write
    with :func:`atomic_write` (``exclusive=not overwrite``). Refused always (:class:`OutputRefused`,
    one line naming the path and the fix): a symbolic link, a folder, one of ``inputs`` (the same
    file, by inode, whatever its name), a place whose folder is a file or cannot be written.
    Refused unless ``force``: a committed file of the course (:func:`is_committed_course_file`), a file of the
    shipped model (:func:`is_shipped_model_file`). Refused unless ``overwrite``: an existing file."""
    path = Path(path)
    refuse_link(path, option)
    _refuse_folder(path, option)
    where = _located(path)
    for source in inputs:
        source = Path(source)
        same = (os.path.samefile(source, path) if source.exists() and path.exists()
                else _located(source) == where)
        if same:
            raise OutputRefused(f"{option} {_shown(path)} is the input {_shown(source)}: writing it would replace "
                                f"what the command reads; name another file for the output")
    unless = f", or pass {force_option} to replace it" if force_option else ""
    if not force and is_shipped_model_file(path):
        raise OutputRefused(f"{option} {_shown(path)} is in the shipped model's folder {SHIPPED_MODEL}, which the "
                            f"course's notebooks and translate read; write elsewhere (e.g. {option} runs/"
                            f"{path.name}){unless}")
    if not force and is_committed_course_file(path):
        raise OutputRefused(f"{option} {_shown(path)} is a file of the course that git tracks; name a file "
                            f"outside the course's folders (e.g. under build/){unless}")
    if not overwrite and os.path.lexists(path):
        raise OutputRefused(f"{option} {_shown(path)} already exists and is kept; name another file, or pass "
                            f"{overwrite_option} to replace it")
    parent = nearest_existing(where.parent)
    if not parent.is_dir():
        raise OutputRefused(f"cannot write {option} {_shown(path)}: {parent} is a file, not a folder; choose "
                            f"another {option}")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise OutputRefused(f"cannot write {option} {_shown(path)}: the folder {parent} is not writable for you; "
                            f"choose another {option}")
    return path


# ---------------------------------------------------------------------------------------------
# Signals: a machine's request to stop is handled as a Ctrl-C.

class Stopped(KeyboardInterrupt):
    """A KeyboardInterrupt raised by a signal other than Ctrl-C's SIGINT (``signum``): every
    ``except KeyboardInterrupt`` handles it as a Ctrl-C."""

    signum: int = 0


STOP_SIGNALS = tuple(getattr(signal, name) for name in ("SIGTERM", "SIGHUP") if hasattr(signal, name))


@contextlib.contextmanager
def signals_as_interrupt() -> Iterator[None]:
    """``with signals_as_interrupt():`` during the block, SIGTERM and SIGHUP raise :class:`Stopped`,
    a KeyboardInterrupt, where the program is, as a Ctrl-C does: the command's cleanup runs
    (temporary files and folders removed, a checkpoint saved) and it ends as interrupted (130).

    A signal that was ignored when the block began (``nohup`` ignores SIGHUP) stays ignored, and one
    a handler of the program's own already takes is left to it. Outside the main thread, where
    Python cannot set handlers, nothing changes. The earlier handlers come back when the block ends.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def stop(signum, frame):
        stopped = Stopped(f"stopped by {signal.Signals(signum).name}")
        stopped.signum = signum
        raise stopped

    previous = {}
    for signum in STOP_SIGNALS:
        if signal.getsignal(signum) == signal.SIG_DFL:
            previous[signum] = signal.signal(signum, stop)
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


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
    """A Ctrl-C, SIGTERM or SIGHUP during the block takes effect at its end (the block's steps must
    not be split)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    caught = []
    previous = {}
    for signum in (signal.SIGINT, *STOP_SIGNALS):
        if signal.getsignal(signum) not in (signal.SIG_IGN, None):
            previous[signum] = signal.signal(signum, lambda signum, frame: caught.append(signum))
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
    for signum in dict.fromkeys(caught):  # as if it came now (the default SIGINT handler raises KeyboardInterrupt)
        handler = previous[signum]
        if callable(handler):
            handler(signum, None)
        elif handler == signal.SIG_DFL:
            signal.raise_signal(signum)


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


def _links(folder: str, names: list[str]) -> list[str]:
    """For ``shutil.copytree(ignore=...)``: the symbolic links among ``names`` in ``folder``."""
    return [name for name in names if os.path.islink(os.path.join(folder, name))]


@contextlib.contextmanager
def build_folder(target: str | Path, command: str, force: bool = False, keep: bool = False,
                 inputs: Iterable[str | Path] = (), protected: Iterable[str | Path] = (),
                 option: str = "--out", marker: bool = True) -> Iterator[Path]:
    """``with build_folder(out, "python -m ...") as tmp:`` write the whole output into ``tmp``;
    when the block ends without an exception, ``tmp`` gets the :data:`MARKER` and replaces ``out``.

    ``out`` is checked first (:func:`check_output_folder`, with ``force``, ``inputs`` and
    ``protected``), and ``tmp``, ``.NAME.<pid>.tmp`` beside it, is created before the block runs,
    so a folder that cannot be written fails before any work. With ``keep``, ``tmp`` starts as a
    copy of ``out`` (a build that adds to its output), without the symbolic links ``out`` holds, so
    that nothing the build writes can go through one to a file outside ``out``. On an exception, Ctrl-C included, ``tmp``
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
            # A link left in the earlier output is not carried over: a build never writes through one.
            shutil.copytree(target, tmp, symlinks=True, ignore=_links, dirs_exist_ok=True)
        yield tmp
        stamp = datetime.datetime.now().isoformat(timespec="seconds")
        if marker:
            write_text(tmp / MARKER, f"Written by {command} on {stamp}. The next build replaces this folder "
                                     f"as a whole: keep nothing of your own in it.\n")
        swap_in(tmp, target)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    finally:
        with _lock:
            if _ours.get(inode) == call:
                del _ours[inode]
