"""annotated.support.download against a real HTTP server on 127.0.0.1 serving fixture files."""

import gzip
import hashlib
import os
import runpy
import socket
import sys
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from annotated.support.course import ROOT
from annotated.support.download import (
    DOWNLOAD_COMMAND,
    ENV_VAR,
    MULTI30K_FILES,
    ChecksumError,
    DownloadError,
    default_cache_dir,
    download,
    main,
    resolve_data_dir,
    sha256_file,
)

REAL_DATA = os.environ.get(ENV_VAR)
needs_real_data = pytest.mark.skipif(
    not REAL_DATA,
    reason=f"{ENV_VAR} is unset; point it at the Multi30k .gz files (../shared/data/multi30k)",
)


def gz(lines: list[str]) -> bytes:
    # mtime=0 keeps the bytes, and so the hash, the same on every run.
    return gzip.compress("".join(line + "\n" for line in lines).encode("utf-8"), mtime=0)


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


GOOD = {
    "train.de.gz": gz(["Zwei Hunde spielen im Schnee.", "Ein Mann liest."]),
    "train.en.gz": gz(["Two dogs play in the snow.", "A man reads."]),
}
GOOD_HASHES = {name: sha(data) for name, data in GOOD.items()}


@dataclass
class FixtureServer:
    """What the loopback server serves, and the paths it was asked for."""

    files: dict[str, bytes] = field(default_factory=dict)
    # name -> number of bytes actually sent before the connection is closed
    cut_short: dict[str, int] = field(default_factory=dict)
    announce_length: bool = True
    requests: list[str] = field(default_factory=list)
    url: str = ""


@pytest.fixture
def server():
    state = FixtureServer(files=dict(GOOD))

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):
            name = self.path.lstrip("/")
            state.requests.append(name)
            if name not in state.files:
                self.send_error(404, "Not Found")
                return
            body = state.files[name]
            self.send_response(200)
            if state.announce_length:
                self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body[: state.cut_short.get(name, len(body))])
            self.close_connection = True

        def log_message(self, *args):
            pass  # keep the test output clean

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=httpd.serve_forever, args=(0.01,), daemon=True)
    thread.start()
    state.url = f"http://127.0.0.1:{httpd.server_address[1]}/"
    yield state
    httpd.shutdown()
    httpd.server_close()
    thread.join()


@pytest.fixture
def closed_port_url():
    """A loopback URL where nothing listens: connecting is refused at once, as offline."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}/"


@pytest.fixture
def no_env(monkeypatch):
    monkeypatch.delenv(ENV_VAR, raising=False)


def local_copy(directory: Path, files: dict[str, bytes] = GOOD) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    for name, data in files.items():
        (directory / name).write_bytes(data)
    return directory


def test_download_writes_every_file_with_its_exact_bytes_and_no_temporary_files(server, tmp_path):
    dest = download(tmp_path / "data", server.url, GOOD_HASHES, quiet=True)
    assert sorted(p.name for p in dest.iterdir()) == sorted(GOOD)
    for name, data in GOOD.items():
        assert (dest / name).read_bytes() == data
    assert sorted(server.requests) == sorted(GOOD)


def test_files_already_present_and_verified_are_not_fetched_again(server, tmp_path):
    download(tmp_path, server.url, GOOD_HASHES, quiet=True)
    server.requests.clear()
    download(tmp_path, server.url, GOOD_HASHES, quiet=True)
    assert server.requests == []


def test_a_corrupted_download_names_the_file_and_both_hashes_and_leaves_no_file(server, tmp_path):
    corrupted = bytearray(GOOD["train.de.gz"])
    corrupted[-5] ^= 0xFF
    server.files["train.de.gz"] = bytes(corrupted)
    with pytest.raises(ChecksumError) as caught:
        download(tmp_path, server.url, {"train.de.gz": GOOD_HASHES["train.de.gz"]}, quiet=True)
    message = str(caught.value)
    assert "train.de.gz" in message
    assert GOOD_HASHES["train.de.gz"] in message
    assert sha(bytes(corrupted)) in message
    assert list(tmp_path.iterdir()) == []


def test_a_missing_file_gives_an_error_naming_it_and_the_http_status(server, tmp_path):
    with pytest.raises(DownloadError) as caught:
        download(tmp_path, server.url, {"val.de.gz": "0" * 64}, quiet=True)
    assert "val.de.gz" in str(caught.value)
    assert "HTTP 404" in str(caught.value)
    assert list(tmp_path.iterdir()) == []


def test_a_connection_cut_before_content_length_leaves_no_half_file(server, tmp_path):
    size = len(GOOD["train.en.gz"])
    server.cut_short["train.en.gz"] = size // 2
    with pytest.raises(DownloadError, match=rf"closed after {size // 2} of {size} bytes"):
        download(tmp_path, server.url, GOOD_HASHES, quiet=True)
    # train.de.gz came first and is complete; of train.en.gz nothing is left, not even a temp file.
    assert sorted(p.name for p in tmp_path.iterdir()) == ["train.de.gz"]


def test_a_connection_closed_early_without_a_length_is_caught_by_the_checksum(server, tmp_path):
    server.announce_length = False
    server.cut_short["train.de.gz"] = 10
    with pytest.raises(ChecksumError, match="train.de.gz"):
        download(tmp_path, server.url, GOOD_HASHES, quiet=True)
    assert list(tmp_path.iterdir()) == []


def test_offline_without_a_local_copy_one_error_names_the_files_the_variable_and_the_command(
    closed_port_url, tmp_path, no_env
):
    with pytest.raises(DownloadError) as caught:
        resolve_data_dir(base_url=closed_port_url, cache_dir=tmp_path / "cache")
    message = str(caught.value)
    for name in MULTI30K_FILES:
        assert name in message
    assert ENV_VAR in message
    assert DOWNLOAD_COMMAND in message
    assert list((tmp_path / "cache").iterdir()) == []


def test_a_directory_given_as_argument_is_read_without_network(server, tmp_path, no_env):
    local = local_copy(tmp_path / "local")
    assert resolve_data_dir(local, server.url, GOOD_HASHES) == local
    assert server.requests == []


def test_the_environment_variable_names_a_directory_read_without_network(server, tmp_path, monkeypatch):
    local = local_copy(tmp_path / "local")
    monkeypatch.setenv(ENV_VAR, str(local))
    assert resolve_data_dir(None, server.url, GOOD_HASHES) == local
    assert server.requests == []


def test_the_argument_wins_over_the_environment_variable(tmp_path, monkeypatch):
    monkeypatch.setenv(ENV_VAR, str(tmp_path / "nowhere"))
    local = local_copy(tmp_path / "local")
    assert resolve_data_dir(local, files=GOOD_HASHES) == local


def test_a_corrupt_local_copy_is_detected_and_left_untouched(server, tmp_path, no_env):
    local = local_copy(tmp_path / "local")
    (local / "train.en.gz").write_bytes(b"not gzip at all")
    with pytest.raises(ChecksumError) as caught:
        resolve_data_dir(local, server.url, GOOD_HASHES)
    message = str(caught.value)
    assert "train.en.gz" in message
    assert GOOD_HASHES["train.en.gz"] in message and sha(b"not gzip at all") in message
    assert (local / "train.en.gz").read_bytes() == b"not gzip at all"
    assert server.requests == []


def test_a_local_directory_missing_a_file_names_it_and_the_download_command(tmp_path, no_env):
    local = local_copy(tmp_path / "local", {"train.de.gz": GOOD["train.de.gz"]})
    with pytest.raises(FileNotFoundError) as caught:
        resolve_data_dir(local, files=GOOD_HASHES)
    assert "train.en.gz" in str(caught.value)
    assert DOWNLOAD_COMMAND in str(caught.value)


def test_without_a_local_directory_files_are_downloaded_into_the_cache(server, tmp_path, monkeypatch):
    monkeypatch.delenv(ENV_VAR, raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert default_cache_dir() == tmp_path / "xdg" / "annotated" / "multi30k"
    directory = resolve_data_dir(base_url=server.url, files=GOOD_HASHES)
    assert directory == default_cache_dir()
    assert all(sha256_file(directory / name) == h for name, h in GOOD_HASHES.items())


def test_a_corrupt_file_in_the_cache_is_replaced_by_a_fresh_download(server, tmp_path, no_env):
    cache = local_copy(tmp_path / "cache")
    (cache / "train.de.gz").write_bytes(b"truncated")
    resolve_data_dir(base_url=server.url, files=GOOD_HASHES, cache_dir=cache)
    assert (cache / "train.de.gz").read_bytes() == GOOD["train.de.gz"]
    assert server.requests == ["train.de.gz"]


def test_the_download_command_offline_exits_with_one_clear_error(
    closed_port_url, tmp_path, monkeypatch, capsys
):
    # Run the module as `python -m annotated.data download ...` does, in this process (a
    # subprocess would spend seconds importing torch).
    argv = ["annotated.data", "download", "--dest", str(tmp_path), "--base-url", closed_port_url]
    monkeypatch.setattr(sys, "argv", argv)
    monkeypatch.delitem(sys.modules, "annotated.data", raising=False)  # a fresh run, as with -m
    with pytest.raises(SystemExit) as caught:
        runpy.run_module("annotated.data", run_name="__main__")
    assert caught.value.code == 1
    stderr = capsys.readouterr().err
    assert "Traceback" not in stderr
    for name in MULTI30K_FILES:
        assert name in stderr
    assert ENV_VAR in stderr and DOWNLOAD_COMMAND in stderr


@needs_real_data
def test_the_download_command_fetches_and_verifies_the_real_files(server, tmp_path, capsys):
    # The real files, served over loopback, checked against the real MULTI30K_FILES hashes.
    server.files = {name: (Path(REAL_DATA) / name).read_bytes() for name in MULTI30K_FILES}
    dest = tmp_path / "multi30k"
    assert main(["download", "--dest", str(dest), "--base-url", server.url]) == 0
    for name in MULTI30K_FILES:
        assert (dest / name).read_bytes() == server.files[name]
    assert f"export {ENV_VAR}=" in capsys.readouterr().out
    # Fetching ahead of time makes the directory usable as a local copy.
    assert resolve_data_dir(dest) == dest


@needs_real_data
def test_the_shared_copy_matches_every_recorded_hash():
    for name, expected in MULTI30K_FILES.items():
        assert sha256_file(Path(REAL_DATA) / name) == expected, name


def test_the_recorded_hashes_match_the_shared_sha256sums_file():
    sums = ROOT.parent / "shared" / "data" / "multi30k" / "SHA256SUMS"
    if not sums.exists():
        pytest.skip(f"{sums} is not here to compare with")
    recorded = dict(reversed(line.split()) for line in sums.read_text().splitlines() if line.strip())
    assert recorded == MULTI30K_FILES

