"""annotated.support.download against a real HTTP server on 127.0.0.1 serving fixture files."""

import errno
import gzip
import hashlib
import os
import runpy
import socket
import stat
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

import annotated.support.download
from annotated.support.course import ROOT
from annotated.support.download import (
    DOWNLOAD_COMMAND,
    ENV_VAR,
    MULTI30K_FILES,
    ChecksumError,
    DownloadError,
    WriteError,
    check_local_dir,
    default_cache_dir,
    download,
    fetch,
    main,
    resolve_data_dir,
    sha256_file,
)
from annotated.support.errors import CourseError, DataError
from annotated.support.files import atomic_write, open_temp_beside, pid_is_alive, remove_stale_temp_files

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
    # name -> number of bytes sent before the server waits, connection open, until the test ends
    stall_after: dict[str, int] = field(default_factory=dict)
    release: threading.Event = field(default_factory=threading.Event)
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
            start, end = state.stall_after.get(name, 0), state.cut_short.get(name, len(body))
            try:
                if start:
                    self.wfile.write(body[:start])
                    self.wfile.flush()
                    state.release.wait(30)
                self.wfile.write(body[start:end])
            except (BrokenPipeError, ConnectionResetError):
                pass  # the client is gone (a download killed on purpose)
            self.close_connection = True

        def log_message(self, *args):
            pass  # keep the test output clean

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=httpd.serve_forever, args=(0.01,), daemon=True)
    thread.start()
    state.url = f"http://127.0.0.1:{httpd.server_address[1]}/"
    yield state
    state.release.set()
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



# Permissions: files the course writes get the umask's permissions, as any file the user writes.


@pytest.fixture
def umask():
    """Set the umask for one test: ``umask(0o022)``; the old one comes back afterwards."""
    old = os.umask(0o022)
    yield os.umask
    os.umask(old)


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_a_downloaded_file_is_readable_by_others_under_the_usual_umask(server, tmp_path, umask):
    umask(0o022)
    fetch(server.url + "train.de.gz", tmp_path / "train.de.gz", GOOD_HASHES["train.de.gz"])
    assert mode(tmp_path / "train.de.gz") == 0o644  # "fetch once and share the folder" works


def test_a_private_umask_keeps_downloads_private(server, tmp_path, umask):
    umask(0o077)
    download(tmp_path, server.url, GOOD_HASHES, quiet=True)
    assert {mode(tmp_path / name) for name in GOOD} == {0o600}


# Temporary files: named .NAME.<pid>.part, and removed by the next download once their writer is gone.

KILLED_DOWNLOAD = """
import sys
from annotated.support.download import fetch
fetch(sys.argv[1], sys.argv[2], "0" * 64, timeout=60)
"""


def a_long_time_ago(path: Path) -> None:
    """Make ``path`` look untouched for an hour (stale files are removed after a minute)."""
    then = time.time() - 3600
    os.utime(path, (then, then))


def dead_pid() -> int:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def test_a_download_killed_midway_leaves_a_temp_file_that_the_next_download_removes(server, tmp_path):
    server.stall_after["train.de.gz"] = 20  # send 20 bytes, then hold the connection open
    dest = tmp_path / "data"
    dest.mkdir()
    args = [sys.executable, "-c", KILLED_DOWNLOAD, server.url + "train.de.gz", str(dest / "train.de.gz")]
    child = subprocess.Popen(args, cwd=ROOT)
    try:
        deadline = time.monotonic() + 30
        # The child has its temporary file open and waits for the rest of the body.
        while not (list(dest.glob(".train.de.gz.*.part")) and "train.de.gz" in server.requests):
            assert child.poll() is None and time.monotonic() < deadline, "the download never started"
            time.sleep(0.05)
    finally:
        child.kill()  # SIGKILL: no cleanup runs
        child.wait()
    [leftover] = dest.glob(".train.de.gz.*.part")
    assert leftover.name == f".train.de.gz.{child.pid}.part"
    a_long_time_ago(leftover)
    server.stall_after.clear()
    download(dest, server.url, GOOD_HASHES, quiet=True)
    assert sorted(p.name for p in dest.iterdir()) == sorted(GOOD)


def test_only_temp_files_whose_writer_is_gone_are_removed(tmp_path):
    names = {
        "dead": f".train.de.gz.{dead_pid()}.part",
        "dead, second file of its process": f".train.de.gz.{dead_pid()}-1.part",
        "alive": f".train.de.gz.{os.getppid()}.part",
        "another file's": f".val.de.gz.{dead_pid()}.part",
        "not a pid": ".train.de.gz.k3j_x9a2.part",
        "another suffix": f".train.de.gz.{dead_pid()}.tmp",
        "the file itself": "train.de.gz",
    }
    for name in names.values():
        (tmp_path / name).write_bytes(b"x")
        a_long_time_ago(tmp_path / name)
    removed = remove_stale_temp_files(tmp_path, ".train.de.gz.", ".part")
    stale = ["dead", "dead, second file of its process"]
    assert sorted(removed) == sorted(tmp_path / names[key] for key in stale)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(v for k, v in names.items() if k not in stale)


def test_a_fresh_temp_file_of_an_unknown_pid_is_kept_for_a_minute(tmp_path):
    # In a folder shared between machines, a pid from another machine means nothing here.
    leftover = tmp_path / f".train.de.gz.{dead_pid()}.part"
    leftover.write_bytes(b"x")
    assert remove_stale_temp_files(tmp_path, ".train.de.gz.", ".part") == []
    assert remove_stale_temp_files(tmp_path, ".train.de.gz.", ".part", stale_after_s=0) == [leftover]


def test_a_leftover_with_this_process_pid_is_removed_but_not_the_file_it_is_writing(tmp_path):
    # In a container a program often gets the same pid on every run.
    path = tmp_path / "model.pt"
    leftover = tmp_path / f".model.pt.{os.getpid()}.tmp"
    leftover.write_bytes(b"from an earlier run")
    out, tmp = open_temp_beside(path, ".tmp")
    with out:
        assert tmp == tmp_path / f".model.pt.{os.getpid()}-1.tmp"  # the name was taken
        assert remove_stale_temp_files(tmp_path, ".model.pt.", ".tmp", stale_after_s=0) == [leftover]
        assert tmp.exists()
    tmp.unlink()


def test_a_pid_of_another_user_counts_as_alive(monkeypatch):
    def kill(pid, signal):
        raise PermissionError(errno.EPERM, "Operation not permitted")

    monkeypatch.setattr(os, "kill", kill)
    assert pid_is_alive(12345)


def test_a_missing_folder_has_no_stale_files():
    assert remove_stale_temp_files(Path("/nonexistent/folder"), ".x.", ".part") == []


def test_atomic_write_replaces_the_file_whole_or_leaves_it(tmp_path, umask):
    umask(0o022)
    path = tmp_path / "notes.txt"
    path.write_text("old")
    with pytest.raises(ZeroDivisionError):
        with atomic_write(path, mode="w") as f:
            f.write("half")
            1 / 0
    assert path.read_text() == "old" and sorted(tmp_path.iterdir()) == [path]
    with atomic_write(path, mode="w") as f:
        f.write("new")
    assert path.read_text() == "new" and sorted(tmp_path.iterdir()) == [path]
    assert mode(path) == 0o644


# The command line: bad arguments exit 2 with argparse's usage line; failures exit 1 with one or
# two lines naming the problem and the fix, never a traceback.


def run_main(argv, capsys) -> tuple[int, str]:
    try:
        code = main(argv)
    except SystemExit as exit_:
        code = exit_.code
    return code, capsys.readouterr().err


@pytest.mark.parametrize("timeout", ["0", "-5", "nan", "inf", "soon"])
def test_a_timeout_that_is_not_a_positive_number_is_a_usage_error(timeout, closed_port_url, tmp_path, capsys):
    code, err = run_main(["download", "--dest", str(tmp_path), "--base-url", closed_port_url,
                          "--timeout", timeout], capsys)
    assert code == 2
    assert "--timeout" in err and "Traceback" not in err


def test_a_dest_that_is_a_file_is_a_usage_error(closed_port_url, tmp_path, capsys):
    (tmp_path / "notes.txt").write_text("mine")
    code, err = run_main(["download", "--dest", str(tmp_path / "notes.txt"), "--base-url", closed_port_url], capsys)
    assert code == 2
    assert "notes.txt is a file, not a folder" in err
    assert (tmp_path / "notes.txt").read_text() == "mine"


def test_a_base_url_without_a_scheme_is_a_usage_error(tmp_path, capsys):
    code, err = run_main(["download", "--dest", str(tmp_path), "--base-url", "example.com/data/"], capsys)
    assert code == 2 and "https://" in err


def test_a_dest_under_a_file_exits_1_with_one_line(closed_port_url, tmp_path, capsys):
    (tmp_path / "notes.txt").write_text("mine")
    dest = tmp_path / "notes.txt" / "multi30k"
    code, err = run_main(["download", "--dest", str(dest), "--base-url", closed_port_url], capsys)
    assert code == 1
    assert err.count("\n") == 1 and "Traceback" not in err
    assert f"lies under {tmp_path / 'notes.txt'}, which is a file" in err and "--dest DIR" in err


def test_a_wrong_checksum_exits_1_without_a_traceback(server, tmp_path, capsys):
    # The fixture's train.de.gz is not the real one: its hash differs from MULTI30K_FILES.
    code, err = run_main(["download", "--dest", str(tmp_path), "--base-url", server.url], capsys)
    assert code == 1
    assert "train.de.gz has SHA-256" in err and "Traceback" not in err


def test_a_folder_that_cannot_be_written_exits_1_naming_it_and_the_fix(tmp_path, capsys, monkeypatch):
    # The tests may run as root, whom permissions do not stop: the refusal is simulated.
    def refused(url, dest, *args, **kwargs):
        raise PermissionError(errno.EACCES, "Permission denied", str(Path(dest).parent / ".x.1.part"))

    monkeypatch.setattr(annotated.support.download, "fetch", refused)
    code, err = run_main(["download", "--dest", str(tmp_path)], capsys)
    assert code == 1 and "Traceback" not in err
    assert "Permission denied" in err and "choose a folder you can write to" in err


def test_a_full_disk_exits_1_naming_the_folder(tmp_path, capsys, monkeypatch):
    def full(url, dest, *args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(annotated.support.download, "fetch", full)
    code, err = run_main(["download", "--dest", str(tmp_path)], capsys)
    assert code == 1 and "Traceback" not in err
    assert str(tmp_path) in err and "No space left on device" in err and "free some space" in err
    with pytest.raises(OSError):  # `except OSError` still catches it
        download(tmp_path, quiet=True)


def test_main_refuses_a_string_of_arguments():
    with pytest.raises(TypeError, match="shlex.split"):
        main("download --dest /tmp/x")


def test_download_and_checksum_errors_are_course_errors_of_their_old_classes():
    for cls in (DownloadError, ChecksumError, WriteError):
        assert issubclass(cls, CourseError)
    assert issubclass(DownloadError, RuntimeError) and issubclass(ChecksumError, RuntimeError)
    assert issubclass(WriteError, OSError)


# The library: the same mistakes, named with their fix.


def test_a_base_url_without_a_scheme_is_a_download_error(tmp_path):
    with pytest.raises(DownloadError, match="must start with https://"):
        download(tmp_path, "example.com/data/", GOOD_HASHES, quiet=True)
    assert list(tmp_path.iterdir()) == []


def test_downloading_into_a_file_names_it(tmp_path):
    (tmp_path / "notes.txt").write_text("mine")
    with pytest.raises(NotADirectoryError, match="notes.txt is a file, not a folder"):
        download(tmp_path / "notes.txt", files=GOOD_HASHES, quiet=True)


def test_a_data_dir_that_is_one_of_the_files_names_the_folder_holding_it(tmp_path, no_env):
    local = local_copy(tmp_path / "local")
    with pytest.raises(NotADirectoryError) as caught:
        resolve_data_dir(local / "train.de.gz", files=GOOD_HASHES)
    assert "is a file, not a folder" in str(caught.value)
    assert f"the folder holding it is {local}" in str(caught.value)


def test_a_missing_folder_from_the_environment_variable_names_the_variable(tmp_path, monkeypatch):
    monkeypatch.setenv(ENV_VAR, str(tmp_path / "nowhere"))
    with pytest.raises(FileNotFoundError) as caught:
        resolve_data_dir(files=GOOD_HASHES)
    assert f"from the environment variable {ENV_VAR}) does not exist" in str(caught.value)
    assert f"{DOWNLOAD_COMMAND} --dest {tmp_path / 'nowhere'}" in str(caught.value)


def test_an_empty_data_dir_is_refused_rather_than_read_as_the_download_cache(closed_port_url, tmp_path, no_env):
    with pytest.raises(DataError, match="empty string"):
        resolve_data_dir("", closed_port_url, GOOD_HASHES, cache_dir=tmp_path / "cache")


def test_a_file_others_cannot_read_names_the_owner_fix(tmp_path, no_env, monkeypatch):
    local = local_copy(tmp_path / "local")

    def unreadable(path):
        raise PermissionError(errno.EACCES, "Permission denied", str(path))

    monkeypatch.setattr(annotated.support.download, "sha256_file", unreadable)
    with pytest.raises(PermissionError, match=r"Permission denied; ask the owner .*chmod -R a\+rX"):
        check_local_dir(local, GOOD_HASHES)


def test_a_list_of_names_instead_of_names_and_hashes_is_refused(tmp_path):
    with pytest.raises(TypeError, match="SHA-256"):
        download(tmp_path, files=list(GOOD), quiet=True)


@pytest.mark.parametrize("timeout", [0, -1, float("nan")])
def test_a_timeout_of_zero_seconds_is_refused_not_reported_as_no_network(timeout, server, tmp_path):
    with pytest.raises(ValueError, match="a number > 0"):
        download(tmp_path, server.url, GOOD_HASHES, timeout=timeout, quiet=True)
    assert server.requests == []


@pytest.mark.parametrize("timeout", ["1e12", "1e308"])
def test_a_timeout_beyond_a_day_is_a_usage_error_not_an_overflow(timeout, closed_port_url, tmp_path, capsys):
    code, err = run_main(["download", "--dest", str(tmp_path), "--base-url", closed_port_url,
                          "--timeout", timeout], capsys)
    assert code == 2 and "at most 86400 (a day)" in err and "Traceback" not in err
