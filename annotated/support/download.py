"""Multi30k (task 1, German–English) raw files: find a local copy or download and verify it.

Where the files come from, in order:

1. a directory given as an argument (``load_pairs(split, data_dir=...)``);
2. the directory named by the environment variable ``ANNOTATED_DATA_DIR``;
3. a cache directory (``~/.cache/annotated/multi30k``, or under ``$XDG_CACHE_HOME``),
   filled from the public Multi30k repository the first time it is needed.

A local directory (1 or 2) is only read, never written, and never triggers a download.
Every file is checked against its SHA-256 before use, local copies included, so a
truncated or edited file is caught before it turns into a puzzling training curve.
Downloads go to a temporary file beside the destination and are moved into place with
``os.replace`` only once complete and verified: an interrupted download leaves no half file.

For a classroom without network, fetch the files ahead of time::

    python -m annotated.data download --dest /some/dir
    export ANNOTATED_DATA_DIR=/some/dir

The dataset: Elliott et al., "Multi30K: Multilingual English-German Image Descriptions",
Proceedings of the 5th Workshop on Vision and Language, 2016; provided by its authors for
non-commercial research and educational use.
"""

import argparse
import hashlib
import http.client
import os
import sys
import tempfile
import urllib.error
import urllib.request
from collections.abc import Mapping
from typing import BinaryIO
from pathlib import Path

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


class ChecksumError(RuntimeError):
    """A file's SHA-256 differs from the one it should have."""


class DownloadError(RuntimeError):
    """A file could not be fetched (no network, HTTP error, connection cut short)."""


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
    dest = Path(dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(dir=dest.parent, prefix=f".{dest.name}.", suffix=".part")
    tmp = Path(tmp_name)
    try:
        with os.fdopen(fd, "wb") as out:
            actual = _stream_to(url, out, timeout)
            out.flush()
            os.fsync(out.fileno())
        if actual != expected_sha256:
            raise ChecksumError(
                f"{_checksum_message(dest, expected_sha256, actual)} after downloading {url}; "
                f"the file on the server differs from the one the course expects"
            )
        os.replace(tmp, dest)
    finally:
        tmp.unlink(missing_ok=True)
    return dest


def _stream_to(url: str, out: BinaryIO, timeout: float) -> str:
    """Copy the body at ``url`` into ``out`` and return its SHA-256; raise DownloadError if
    the server cannot be reached, answers with an error, or sends less than it announced."""
    digest = hashlib.sha256()
    received = 0
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            expected_size = response.headers.get("Content-Length")
            for chunk in iter(lambda: response.read(CHUNK_BYTES), b""):
                digest.update(chunk)
                out.write(chunk)
                received += len(chunk)
    except urllib.error.HTTPError as err:
        raise DownloadError(f"{url}: HTTP {err.code} {err.reason}") from err
    except urllib.error.URLError as err:
        raise DownloadError(f"{url}: {err.reason}") from err
    except (http.client.HTTPException, ConnectionError, TimeoutError) as err:
        raise DownloadError(f"{url}: {type(err).__name__}: {err}") from err
    # http.client returns a short body without complaint when the connection closes
    # early, so compare with the announced size here.
    if expected_size is not None and received != int(expected_size):
        raise DownloadError(f"{url}: connection closed after {received} of {expected_size} bytes")
    return digest.hexdigest()


def download(
    dest: str | Path,
    base_url: str = BASE_URL,
    files: Mapping[str, str] = MULTI30K_FILES,
    timeout: float = 30.0,
    quiet: bool = False,
) -> Path:
    """Make ``dest`` hold every file of ``files`` (name -> SHA-256), fetching what is missing.

    Files already in ``dest`` with the right hash are kept; missing or corrupt ones are
    downloaded from ``base_url + name``. Returns ``dest``.
    """
    dest = Path(dest)
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
    return dest


def _is_good_copy(path: Path, expected_sha256: str) -> bool:
    return path.is_file() and sha256_file(path) == expected_sha256


def check_local_dir(directory: str | Path, files: Mapping[str, str] = MULTI30K_FILES) -> Path:
    """Check that ``directory`` holds every file with the right SHA-256; never downloads."""
    directory = Path(directory).expanduser()
    missing = [name for name in files if not (directory / name).is_file()]
    if missing:
        raise FileNotFoundError(
            f"{directory} lacks the Multi30k files {', '.join(missing)}; fetch them with "
            f"`{DOWNLOAD_COMMAND} --dest {directory}`, or unset {ENV_VAR} to use the download cache"
        )
    for name, sha in files.items():
        verify_file(directory / name, sha)
    return directory


def resolve_data_dir(
    data_dir: str | Path | None = None,
    base_url: str = BASE_URL,
    files: Mapping[str, str] = MULTI30K_FILES,
    cache_dir: str | Path | None = None,
) -> Path:
    """The directory holding verified Multi30k files: ``data_dir``, else ``$ANNOTATED_DATA_DIR``,
    else the cache directory, downloading into it what is missing."""
    local = data_dir if data_dir is not None else os.environ.get(ENV_VAR)
    if local:
        return check_local_dir(local, files)
    return download(cache_dir if cache_dir is not None else default_cache_dir(), base_url, files)


def main(argv: list[str] | None = None) -> int:
    """``python -m annotated.data download [--dest DIR] [--base-url URL]``."""
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
        "--base-url", default=BASE_URL, help="where the files live (default: %(default)s)"
    )
    fetch_cmd.add_argument("--timeout", type=float, default=30.0, help="seconds per connection")
    args = parser.parse_args(argv)

    dest = args.dest if args.dest is not None else default_cache_dir()
    try:
        download(dest, args.base_url, MULTI30K_FILES, timeout=args.timeout)
    except (DownloadError, ChecksumError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    print(f"Multi30k files verified in {dest}; use them with: export {ENV_VAR}={dest.resolve()}")
    return 0
