"""``annotated.support.files.build_folder``: a folder built whole is swapped in at the end, and a
folder the build did not make is never replaced without ``force``."""

import errno
import os

import pytest

from annotated.support import files
from annotated.support.errors import CourseError, UsageError, run_command
from annotated.support.files import MARKER, build_folder, check_output_folder, remove_stale_temp_files


def build(out, content: str = "new", **options) -> None:
    with build_folder(out, "a test build", **options) as tmp:
        (tmp / "index.html").write_text(content)


def test_a_build_creates_its_folder_with_the_marker_and_replaces_it_next_time(tmp_path):
    out = tmp_path / "site"
    build(out, "first")
    assert (out / "index.html").read_text() == "first" and (out / MARKER).is_file()
    (out / "stale.html").write_text("from the first build")
    build(out, "second")
    assert (out / "index.html").read_text() == "second" and not (out / "stale.html").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["site"]  # no temporary folder left beside it


def test_a_folder_of_the_users_is_refused_before_any_work_and_kept(tmp_path):
    out = tmp_path / "mine"
    (out / "photos").mkdir(parents=True)
    (out / "thesis.txt").write_text("three years of work")
    worked = []
    with pytest.raises(UsageError, match=r"was not written by this command .*--force"):
        with build_folder(out, "a test build"):
            worked.append(1)
    assert not worked and (out / "thesis.txt").read_text() == "three years of work" and (out / "photos").is_dir()
    build(out, force=True)  # told to: replaced
    assert sorted(p.name for p in out.iterdir()) == [MARKER, "index.html"]


def test_an_empty_folder_is_used_without_force(tmp_path):
    (tmp_path / "empty").mkdir()
    build(tmp_path / "empty")
    assert (tmp_path / "empty" / "index.html").is_file()


def test_an_interrupted_build_leaves_the_earlier_output_whole(tmp_path):
    out = tmp_path / "site"
    build(out, "complete")
    with pytest.raises(KeyboardInterrupt):
        with build_folder(out, "a test build") as tmp:
            (tmp / "index.html").write_text("half")
            raise KeyboardInterrupt  # Ctrl-C midway
    assert (out / "index.html").read_text() == "complete"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["site"]


def test_keep_starts_from_a_copy_of_the_earlier_output(tmp_path):
    out = tmp_path / "decks"
    build(out, "deck 1")
    with build_folder(out, "a test build", keep=True) as tmp:
        (tmp / "two.html").write_text("deck 2")
    assert (out / "index.html").read_text() == "deck 1" and (out / "two.html").read_text() == "deck 2"


@pytest.mark.parametrize("where", ["cwd", "parent of cwd", "home", "root"])
def test_the_folder_one_stands_in_and_the_home_folder_are_refused_even_with_force(where, tmp_path, monkeypatch):
    (tmp_path / "inside").mkdir()
    monkeypatch.chdir(tmp_path / "inside")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    (tmp_path / "home").mkdir()
    target = {"cwd": ".", "parent of cwd": "..", "home": str(tmp_path / "home"), "root": "/"}[where]
    with pytest.raises(UsageError, match="a build replaces its whole output folder"):
        check_output_folder(target, force=True)


def test_a_folder_holding_protected_files_or_inputs_is_refused_even_with_force(tmp_path):
    (tmp_path / "repo" / "annotated").mkdir(parents=True)
    (tmp_path / "repo" / "annotated" / "model.py").write_text("taught code")
    with pytest.raises(UsageError, match=r"holds .*model\.py \(the course's files\)"):
        check_output_folder(tmp_path / "repo", force=True, protected=[tmp_path / "repo" / "annotated" / "model.py"])
    with pytest.raises(UsageError, match=r"holds .*run\.pt \(the input\)"):
        check_output_folder(tmp_path / "runs", force=True, inputs=[tmp_path / "runs" / "run.pt"])


def test_a_file_as_the_output_folder_is_a_usage_error(tmp_path):
    (tmp_path / "notes.txt").write_text("mine")
    with pytest.raises(UsageError, match="is a file; name a folder"):
        check_output_folder(tmp_path / "notes.txt")
    with pytest.raises(CourseError, match="is a file, not a folder"):
        check_output_folder(tmp_path / "notes.txt" / "site")


def test_a_read_only_place_fails_in_one_line_before_any_work(tmp_path, monkeypatch, capsys):
    def read_only(path, *args, **kwargs):
        raise OSError(errno.EROFS, "Read-only file system", str(path))

    monkeypatch.setattr(files.os, "mkdir", read_only)
    worked = []

    def body() -> int:
        with build_folder(tmp_path / "site", "a test build"):
            worked.append(1)
        return 0

    assert run_command(body, "prog") == 1
    err = capsys.readouterr().err
    assert not worked and err.count("\n") == 1
    assert "Read-only file system; that file system is read-only: write somewhere else" in err


def test_the_temporary_folder_of_a_killed_build_is_removed_by_the_next(tmp_path):
    out = tmp_path / "site"
    left = tmp_path / f".site.{2**22 + 12345}.tmp"  # a process id no process has
    (left / "sub").mkdir(parents=True)
    os.utime(left, (0, 0))
    assert remove_stale_temp_files(tmp_path, ".site.", ".tmp") == [left]
    (left / "sub").mkdir(parents=True)
    os.utime(left, (0, 0))
    build(out)
    assert not left.exists()


def test_a_ctrl_c_between_the_two_renames_waits_for_the_second(tmp_path, monkeypatch):
    import signal

    out = tmp_path / "site"
    build(out, "old")
    real_rename, calls = os.rename, []

    def rename_then_ctrl_c(src, dst):
        real_rename(src, dst)
        calls.append(dst)
        if len(calls) == 1:
            os.kill(os.getpid(), signal.SIGINT)  # after the old folder moved away, before the new came in

    monkeypatch.setattr(files.os, "rename", rename_then_ctrl_c)
    outer = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        with pytest.raises(KeyboardInterrupt):
            build(out, "new")
    finally:
        signal.signal(signal.SIGINT, outer)
    assert (out / "index.html").read_text() == "new"  # the swap finished; the Ctrl-C came after it
    assert sorted(p.name for p in tmp_path.iterdir()) == ["site"]  # and the old folder is gone
