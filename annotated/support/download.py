"""Multi30k (task 1, German–English) raw files: find a local copy or download and verify it.

Where the files come from, in order:

1. a directory given as an argument (``load_pairs(split, data_dir=...)``);
2. the directory named by the environment variable ``ANNOTATED_DATA_DIR``;
3. a cache directory (``~/.cache/annotated/multi30k``, or under ``$XDG_CACHE_HOME``),
   filled from the public Multi30k repository the first time it is needed.

A local directory (1 or 2) is only read, never written, and never triggers a download.
Every file is checked against its SHA-256 before use, local copies included, so a
truncated or edited file is caught before it turns into a puzzling training curve.
Downloads go to a temporary file beside the destination, ``.NAME.<pid>.part``, and are moved
into place with ``os.replace`` only once complete and verified: an interrupted download leaves
no half file, and one killed outright leaves a temporary file that the next download into the
folder removes (see ``annotated.support.files``). Files get the permissions of the umask, as
any file the user writes, so a folder fetched once can be shared.

Reading the files (``annotated.data.read_lines``, ``load_pairs``) goes through
:func:`explain_read_errors` and :func:`check_aligned`: a file that is not gzip, is cut short,
is not UTF-8, or has an empty line stops with a :class:`~annotated.support.errors.DataError`
that names the file, the line where it can, and the fix.

For a classroom without network, fetch the files ahead of time::

    python -m annotated.data download --dest /some/dir
    export ANNOTATED_DATA_DIR=/some/dir

The dataset: Elliott et al., "Multi30K: Multilingual English-German Image Descriptions",
Proceedings of the 5th Workshop on Vision and Language, 2016; provided by its authors for
non-commercial research and educational use.
"""

import argparse
import contextlib
import errno
import functools
import gzip
import hashlib
import http.client
import os
import sys
import urllib.error
import urllib.parse
import urllib.request
import zlib
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import BinaryIO

from annotated.support.errors import CourseError, DataError, run_command
from annotated.support.files import atomic_write, nearest_existing, remove_stale_temp_files, signals_as_interrupt
from annotated.support.options import MAX_SECONDS

BASE_URL = "https://raw.githubusercontent.com/multi30k/dataset/master/data/task1/raw/"
ENV_VAR = "ANNOTATED_DATA_DIR"
DOWNLOAD_COMMAND = "python -m annotated.data download"

# File name -> SHA-256 of the exact bytes in the Multi30k repository.
MULTI30K_FILES: dict[str, str] = {
    "train.de.gz": "726e39b2fa9eb9ffb6dc763fb35a179f80fae06ffc5d28b6ace5faa883de28a6",
    "train.en.gz": "d79cfa999dd4c51d2cb42499b6796d5a882c3a8a961923c25a898c90f8bbd56f",
    "val.de.gz": "f0cba2f995189cf5770f29a8a9a537a3ad3f51657ad873405082ff6863a5e75a",
    "val.en.gz": "14f7d25ddd868909a9213e361768460edcacdd6ab9d1e77b92560dc10c10dc28",
    "test_2016_flickr.de.gz": "9204244e408ccb38d2a55cfcd344df15005fc42a07a6e55ca6c52b6ababb8cc8",
    "test_2016_flickr.en.gz": "611d361c6334bc7246101d48097c13cf5c4413c5befc793cc629934359d532d9",
}

CHUNK_BYTES = 1 << 16
# A download in progress is .NAME.<pid>.part beside its destination (annotated.support.files).
TEMP_SUFFIX = ".part"


class ChecksumError(CourseError, RuntimeError):
    """A file's SHA-256 differs from the one it should have."""


class DownloadError(CourseError, RuntimeError):
    """A file could not be fetched (no network, HTTP error, connection cut short)."""


class WriteError(CourseError, OSError):
    """A downloaded file could not be written (disk full, quota exceeded, read-only file system)."""


def default_cache_dir() -> Path:
    """``$XDG_CACHE_HOME/annotated/multi30k``, by default ``~/.cache/annotated/multi30k``."""
    cache_home = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(cache_home) / "annotated" / "multi30k"


def sha256_file(path: str | Path) -> str:
    """Hex SHA-256 of a file's bytes."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(CHUNK_BYTES), b""):
            digest.update(chunk)
    return digest.hexdigest()


def _checksum_message(path: Path, expected: str, actual: str) -> str:
    return f"{path} has SHA-256 {actual}, expected {expected}"


def verify_file(path: str | Path, expected_sha256: str) -> None:
    """Raise :class:`ChecksumError` naming the file and both hashes if they differ."""
    path = Path(path)
    actual = sha256_file(path)
    if actual != expected_sha256:
        raise ChecksumError(
            f"{_checksum_message(path, expected_sha256, actual)}: the copy is corrupt or "
            f"incomplete; delete it and fetch it again with "
            f"`{DOWNLOAD_COMMAND} --dest {path.parent}`"
        )


def _unavailable_message(names: list[str], dest: Path, reason: object) -> str:
    return (
        f"could not download the Multi30k files {', '.join(names)} into {dest} ({reason}). "
        f"To work without network, use a local copy: on a machine with network run "
        f"`{DOWNLOAD_COMMAND} --dest DIR`, copy DIR here and set the environment variable "
        f"{ENV_VAR}=DIR (or pass data_dir=DIR)"
    )


def fetch(url: str, dest: str | Path, expected_sha256: str, timeout: float = 30.0) -> Path:
    """Download ``url`` to ``dest``, verify its SHA-256, and move it into place atomically.

    The bytes go to a temporary file in ``dest``'s directory; only a complete file with
    the expected hash is renamed to ``dest``. On any failure the temporary file is removed
    and ``dest`` is left as it was. Raises :class:`DownloadError` when the server cannot be
    reached, answers with an HTTP error or cuts the connection short, and
    :class:`ChecksumError` for a wrong hash.
    """
    if not (isinstance(timeout, (int, float)) and 0 < timeout <= MAX_SECONDS):
        raise ValueError(f"timeout={timeout!r}: give the seconds to wait for the server, a number > 0 such as 30 "
                         f"(at most {MAX_SECONDS:g}, a day: longer ones overflow the socket's timer)")
    dest = Path(dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    # .NAME.<pid>.part, created with the umask's permissions, moved onto dest only if verified.
    with atomic_write(dest, suffix=TEMP_SUFFIX) as out:
        actual = _stream_to(url, out, timeout)
        if actual != expected_sha256:
            raise ChecksumError(
                f"{_checksum_message(dest, expected_sha256, actual)} after downloading {url}; "
                f"the file on the server differs from the one the course expects"
            )
    return dest


def _stream_to(url: str, out: BinaryIO, timeout: float) -> str:
    """Copy the body at ``url`` into ``out`` and return its SHA-256; raise DownloadError if
    the server cannot be reached, answers with an error, or sends less than it announced.
    Errors writing ``out`` (a full disk) are not the network's and go on as they are."""
    digest = hashlib.sha256()
    for chunk in _body(url, timeout):
        digest.update(chunk)
        out.write(chunk)
    return digest.hexdigest()


def _body(url: str, timeout: float) -> Iterator[bytes]:
    """The chunks of the body at ``url``; every failure of the network becomes DownloadError."""
    received = 0
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            expected_size = response.headers.get("Content-Length")
            for chunk in iter(lambda: response.read(CHUNK_BYTES), b""):
                received += len(chunk)
                yield chunk
    except urllib.error.HTTPError as err:
        raise DownloadError(f"{url}: HTTP {err.code} {err.reason}") from err
    except urllib.error.URLError as err:
        raise DownloadError(f"{url}: {err.reason}") from err
    except (http.client.HTTPException, OSError) as err:  # OSError: sockets, TLS, timeouts
        raise DownloadError(f"{url}: {type(err).__name__}: {err}") from err
    except ValueError as err:  # urllib's "unknown url type" for a URL without a scheme
        raise DownloadError(
            f"{url}: {err}; the base URL must start with https://, http:// or file://"
        ) from err
    # http.client returns a short body without complaint when the connection closes
    # early, so compare with the announced size here.
    if expected_size is not None and received != int(expected_size):
        raise DownloadError(f"{url}: connection closed after {received} of {expected_size} bytes")


def download(
    dest: str | Path,
    base_url: str = BASE_URL,
    files: Mapping[str, str] = MULTI30K_FILES,
    timeout: float = 30.0,
    quiet: bool = False,
) -> Path:
    """Make ``dest`` hold every file of ``files`` (name -> SHA-256), fetching what is missing.

    Files already in ``dest`` with the right hash are kept; missing or corrupt ones are
    downloaded from ``base_url + name``. Temporary files left in ``dest`` by a download that
    was killed (``.NAME.<pid>.part`` of a process that no longer runs) are removed first.
    Returns ``dest``.

    Besides :class:`DownloadError` and :class:`ChecksumError`: ``NotADirectoryError`` when
    ``dest`` or a folder above it is a file, ``PermissionError`` when ``dest`` cannot be
    written or a file in it cannot be read, :class:`WriteError` for a full disk; each names
    the path and the fix.
    """
    files = _check_files(files)
    dest = _check_dest(Path(dest).expanduser())
    try:
        for name in files:
            remove_stale_temp_files(dest, f".{name}.", TEMP_SUFFIX)
        needed = [name for name, sha in files.items() if not _is_good_copy(dest / name, sha)]
        for i, name in enumerate(needed):
            url = base_url.rstrip("/") + "/" + name
            try:
                fetch(url, dest / name, files[name], timeout=timeout)
            except DownloadError as err:
                # Stop at the first failure: offline, every remaining file would fail the same way.
                raise DownloadError(_unavailable_message(needed[i:], dest, err)) from err
            if not quiet:
                size = (dest / name).stat().st_size
                print(f"downloaded {name} ({size:,} bytes, SHA-256 verified)", file=sys.stderr)
    except PermissionError as err:
        raise _permission_error(err, dest, "download") from err
    except OSError as err:
        full_or_read_only = (errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EFBIG)
        if err.errno not in full_or_read_only or isinstance(err, CourseError):
            raise
        raise WriteError(
            f"could not write the Multi30k files into {dest}: {err.strerror}; free some space "
            f"or choose another folder (`{DOWNLOAD_COMMAND} --dest DIR`)"
        ) from err
    return dest


def _is_good_copy(path: Path, expected_sha256: str) -> bool:
    return path.is_file() and sha256_file(path) == expected_sha256


def _check_files(files: Mapping[str, str]) -> Mapping[str, str]:
    """``files`` must map file names to SHA-256 hashes (a list of names has no hashes to check)."""
    if not isinstance(files, Mapping):
        raise TypeError(
            f"files must map each file name to its SHA-256, like MULTI30K_FILES, "
            f"not {type(files).__name__} {files!r}"
        )
    return files


def _check_dest(dest: Path) -> Path:
    """``dest`` itself, or raise NotADirectoryError if it or a folder above it is a file."""
    folder = nearest_existing(dest)
    if not folder.is_dir():
        where = "is a file" if folder == dest else f"lies under {folder}, which is a file"
        raise NotADirectoryError(
            f"{dest} {where}, not a folder; choose a folder for the Multi30k files "
            f"(`{DOWNLOAD_COMMAND} --dest DIR`; the folder is created if missing)"
        )
    return dest


def _permission_error(err: PermissionError, folder: Path, action: str) -> PermissionError:
    """``err`` again, with the fix for ``action`` ("download": writing ``folder``, else reading it)."""
    path = err.filename or folder
    reason = err.strerror or str(err)
    if action == "download":
        fix = (
            f"choose a folder you can write to (`{DOWNLOAD_COMMAND} --dest DIR`, then set "
            f"{ENV_VAR}=DIR), or ask the owner of {folder} to fetch the files there"
        )
    else:
        fix = (
            f"ask the owner of {folder} to run `chmod -R a+rX {folder}`, or fetch your own copy "
            f"with `{DOWNLOAD_COMMAND} --dest DIR`"
        )
    return PermissionError(f"{path}: {reason}; {fix}")


def check_local_dir(
    directory: str | Path, files: Mapping[str, str] = MULTI30K_FILES, origin: str = ""
) -> Path:
    """Check that ``directory`` holds every file with the right SHA-256; never downloads.

    ``origin`` says where the directory came from ("data_dir" or the environment variable),
    for the error messages: a missing folder, a file instead of a folder, missing files.
    """
    files = _check_files(files)
    directory = Path(directory).expanduser()
    named = f"{directory} (from {origin})" if origin else str(directory)
    if not directory.exists():
        splits = {name.split(".")[0] for name in files}
        hint = (
            f" ({directory.name!r} is a split: give one split at a time, load_pairs(split, data_dir))"
            if str(directory) in splits else ""
        )
        raise FileNotFoundError(
            f"{named} does not exist{hint}; fetch the Multi30k files into it with "
            f"`{DOWNLOAD_COMMAND} --dest {directory}`, or name the folder that holds them"
        )
    if not directory.is_dir():
        holder = directory.resolve().parent
        hint = f" (the folder holding it is {holder})" if directory.name in files else ""
        raise NotADirectoryError(
            f"{named} is a file, not a folder; name the folder that holds the Multi30k "
            f".gz files{hint}"
        )
    missing = [name for name in files if not (directory / name).is_file()]
    if missing:
        raise FileNotFoundError(
            f"{named} lacks the Multi30k files {', '.join(missing)}; fetch them with "
            f"`{DOWNLOAD_COMMAND} --dest {directory}`, or unset {ENV_VAR} to use the download cache"
        )
    try:
        for name, sha in files.items():
            verify_file(directory / name, sha)
    except PermissionError as err:
        raise _permission_error(err, directory, "read") from err
    return directory


def resolve_data_dir(
    data_dir: str | Path | None = None,
    base_url: str = BASE_URL,
    files: Mapping[str, str] = MULTI30K_FILES,
    cache_dir: str | Path | None = None,
) -> Path:
    """The directory holding verified Multi30k files: ``data_dir``, else ``$ANNOTATED_DATA_DIR``,
    else the cache directory, downloading into it what is missing."""
    if data_dir is not None:
        if not str(data_dir).strip():
            raise DataError(
                f"data_dir is the empty string {data_dir!r}; pass the folder holding the Multi30k "
                f".gz files, or None to use {ENV_VAR} or the download cache"
            )
        return check_local_dir(data_dir, files, origin="data_dir")
    local = os.environ.get(ENV_VAR, "").strip()  # set but empty counts as unset
    if local:
        return check_local_dir(local, files, origin=f"the environment variable {ENV_VAR}")
    return download(cache_dir if cache_dir is not None else default_cache_dir(), base_url, files)


def _refetch_fix(path: Path) -> str:
    return f"fetch the original again with `{DOWNLOAD_COMMAND} --dest {path.parent}`"


@contextlib.contextmanager
def explain_read_errors(path: str | Path) -> Iterator[None]:
    """Turn the errors of reading a gzip-compressed UTF-8 file into :class:`DataError` naming
    ``path``, what is wrong with it and the fix.

    A file that is not gzip (``BadGzipFile``), is cut short (``EOFError``), has corrupt
    compressed data (``BadGzipFile``, ``zlib.error``) or is not UTF-8 (``UnicodeDecodeError``,
    reported with its line number). A missing file is left to ``FileNotFoundError``.
    """
    path = Path(path)
    try:
        yield
    except UnicodeDecodeError as err:
        raise DataError(
            f"{path}: {_where_not_utf8(path, err)} is not UTF-8 text (byte {err.object[err.start]:#04x}; "
            f"saved as Latin-1 or Windows-1252?); re-encode it as UTF-8, e.g. `zcat {path} | iconv -f "
            f"latin1 -t utf-8 | gzip > new.gz`, or {_refetch_fix(path)}"
        ) from err
    except EOFError as err:
        raise DataError(
            f"{path}: the gzip data ends early, the file is truncated (an interrupted copy?); "
            f"{_refetch_fix(path)}, or compress your own text again with `gzip FILE`"
        ) from err
    except (gzip.BadGzipFile, zlib.error) as err:
        if str(err).startswith("Not a gzipped file"):
            problem = "is not gzip-compressed (plain text?): compress it with `gzip FILE`, or"
        else:
            problem = f"has corrupt gzip data ({err});"
        raise DataError(f"{path} {problem} {_refetch_fix(path)}") from err


def _where_not_utf8(path: Path, err: UnicodeDecodeError) -> str:
    """ "line N" of the first byte that is not UTF-8; the decoder only knows a position in a chunk."""
    try:
        data = gzip.decompress(path.read_bytes())
        data.decode("utf-8")  # a byte-order mark is UTF-8 too: positions count from byte 0
    except UnicodeDecodeError as whole:
        line = data.count(b"\n", 0, whole.start) + 1
        return f"line {line}"
    except (OSError, EOFError, zlib.error):
        pass
    return "the text"


def check_aligned(german_path: Path, german: list[str], english_path: Path, english: list[str]) -> None:
    """Raise :class:`DataError` unless line i of one file translates line i of the other:
    the same number of lines, none of them empty.

    Empty lines: the first one is named by file and line number (counted from 1), also when both
    sides of a pair are empty; in the middle of a file it means a sentence was lost or a line
    break added, and a pair with an empty side teaches the model nothing true. Blank lines at
    the very end of a file are not sentences and never reach here (``read_lines`` drops them).
    A file without any sentence is refused too.
    """
    for path, lines, other_path, other in ((german_path, german, english_path, english),
                                           (english_path, english, german_path, german)):
        if not lines:
            raise DataError(f"{path} holds no sentences: {_refetch_fix(path)}")
        empty = [i for i, line in enumerate(lines) if not line]
        if empty:
            i = empty[0]
            partner = other[i] if i < len(other) else None
            beside = (
                f"its partner, line {i + 1} of {other_path}, is empty too"
                if partner == "" else
                f"line {i + 1} of {other_path} reads {partner!r}" if partner is not None else
                f"{other_path} has only {len(other)} lines"
            )
            more = f" ({len(empty) - 1} more empty lines after it)" if len(empty) > 1 else ""
            raise DataError(
                f"{path}, line {i + 1}: empty sentence{more}; {beside}. Every line must hold one "
                f"sentence: delete line {i + 1} from both files, or {_refetch_fix(path)}"
            )
    if len(german) != len(english):
        raise DataError(
            f"{german_path} has {len(german)} lines but {english_path} has {len(english)}; line i "
            f"of one file must translate line i of the other: find the line added or lost, or "
            f"{_refetch_fix(german_path)}"
        )


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m annotated.data download [--dest DIR] [--base-url URL] [--timeout SECONDS]``.

    Bad arguments stop with argparse's usage message (exit code 2); a failed download, a
    wrong checksum, a folder that cannot be written stop with one or two lines naming the
    problem and the fix (exit code 1), never a traceback.
    """
    if isinstance(argv, (str, bytes)):
        raise TypeError(
            f"main() takes the arguments as a list, like ['download', '--dest', 'DIR'], not the "
            f"string {argv!r}; split it with shlex.split"
        )
    parser = argparse.ArgumentParser(
        prog="python -m annotated.data",
        description="Fetch the Multi30k German-English files ahead of time.",
    )
    commands = parser.add_subparsers(dest="command", required=True)
    fetch_cmd = commands.add_parser(
        "download",
        help="download and verify the raw .gz files",
        description="Download the six Multi30k task-1 files, verify their SHA-256, write them atomically.",
    )
    fetch_cmd.add_argument(
        "--dest", type=Path, default=None,
        help=f"directory to fill (default: {default_cache_dir()}); then set {ENV_VAR} to it",
    )
    fetch_cmd.add_argument(
        "--base-url", type=_base_url, default=BASE_URL,
        help="where the files live (default: %(default)s)",
    )
    fetch_cmd.add_argument("--timeout", type=_positive_seconds, default=30.0, help="seconds per connection")
    args = parser.parse_args(argv)

    dest = args.dest.expanduser() if args.dest is not None else default_cache_dir()
    if dest.exists() and not dest.is_dir():
        fetch_cmd.error(f"argument --dest: {dest} is a file, not a folder; name a folder (created if missing)")

    def body() -> int:
        download(dest, args.base_url, MULTI30K_FILES, timeout=args.timeout)
        print(f"Multi30k files verified in {dest}; use them with: export {ENV_VAR}={dest.resolve()}")
        return 0

    with signals_as_interrupt():  # SIGTERM and SIGHUP as Ctrl-C: the partial download is removed
        return run_command(body, parser.prog)


def _positive_seconds(text: str) -> float:
    """argparse type: a number of seconds greater than 0."""
    try:
        seconds = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not 0 < seconds <= MAX_SECONDS:  # also refuses nan and inf; a socket's timer overflows past ~1e9 s
        raise argparse.ArgumentTypeError(
            f"{text!r}: give a number of seconds greater than 0 and at most {MAX_SECONDS:g} (a day), such as 30"
        )
    return seconds


def _base_url(text: str) -> str:
    """argparse type: a URL with a scheme urllib can fetch from."""
    scheme = urllib.parse.urlsplit(text).scheme
    if scheme not in ("https", "http", "file"):
        raise argparse.ArgumentTypeError(
            f"{text!r} is not an https://, http:// or file:// URL (default: {BASE_URL})"
        )
    return text


def explaining_read_errors(read: Callable) -> Callable:
    """``read(path, ...)`` inside :func:`explain_read_errors`: what the package wraps around the notebook's
    ``read_lines``, whose cell trusts its file."""

    @functools.wraps(read)
    def wrapper(path: str | Path, *args, **kwargs):
        with explain_read_errors(path):
            return read(path, *args, **kwargs)

    return wrapper
