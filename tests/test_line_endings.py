"""The shipped model on a Windows clone: git's ``core.autocrlf=true`` (Git for Windows' default)
writes text files with CRLF line endings, and four files of ``annotated/pretrained/`` then fail their
checksums. ``.gitattributes`` keeps them byte-exact, and the doctor's fix for a clone made before it
existed writes the committed bytes again.

Each test builds a small repository in a temporary folder holding the course's real
``.gitattributes`` and shipped model, and clones it with ``core.autocrlf=true`` (git converts on
every platform when told to, so Linux shows what Windows does).
"""

import os
import shlex
import shutil
import subprocess
from pathlib import Path

import pytest

import annotated.support.doctor as doctor
from annotated.support.checkpoint import CheckpointError
from annotated.support.course import ROOT
from annotated.support.pretrained import FILES, PRETRAINED_DIR, check_files, check_ties

pytestmark = pytest.mark.skipif(shutil.which("git") is None, reason="needs the git command")

SHIPPED = (*FILES, "SHA256SUMS")
TEXT_FILES = ("config.json", "bpe_codes.txt", "vocab.txt", "SHA256SUMS")


def git(*args, cwd: Path) -> str:
    env = {**os.environ, "GIT_CONFIG_GLOBAL": os.devnull, "GIT_CONFIG_NOSYSTEM": "1", "GIT_AUTHOR_NAME": "t",
           "GIT_AUTHOR_EMAIL": "t@example.org", "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@example.org"}
    return subprocess.run(["git", *args], cwd=cwd, env=env, check=True, capture_output=True, text=True).stdout


def course_repository(path: Path, attributes: bool) -> Path:
    """A repository laid out as the course: annotated/__init__.py and the shipped model, with the
    course's .gitattributes or without it."""
    (path / "annotated").mkdir(parents=True)
    (path / "annotated" / "__init__.py").write_text("")
    shutil.copytree(PRETRAINED_DIR, path / "annotated" / "pretrained")
    if attributes:
        shutil.copy(ROOT / ".gitattributes", path / ".gitattributes")
    git("init", "-q", "-b", "main", cwd=path)
    git("add", ".", cwd=path)
    git("commit", "-q", "-m", "the course", cwd=path)
    return path


def windows_clone(source: Path, to: Path) -> Path:
    git("clone", "-q", "-c", "core.autocrlf=true", str(source), str(to), cwd=source.parent)
    return to / "annotated" / "pretrained"


def settled(clone: Path) -> None:
    """The clone as it is days later: its files older than git's index, so that git trusts their
    recorded size and time (a file written in the index's second is compared by content, "racy git")."""
    for path in clone.rglob("*"):
        if ".git" not in path.relative_to(clone).parts:
            os.utime(path, (path.stat().st_atime - 3600, path.stat().st_mtime - 3600))
    git("update-index", "-q", "--really-refresh", cwd=clone)


def shipped_bytes(folder: Path) -> dict[str, bytes]:
    return {name: (folder / name).read_bytes() for name in SHIPPED}


def test_without_gitattributes_a_windows_clone_gets_crlf_and_the_checksums_fail(tmp_path):
    """The fault itself, as it was before .gitattributes: and load names its cause and the fix."""
    folder = windows_clone(course_repository(tmp_path / "upstream", attributes=False), tmp_path / "clone")
    converted = [name for name in SHIPPED if (folder / name).read_bytes() != (PRETRAINED_DIR / name).read_bytes()]
    assert sorted(converted) == sorted(TEXT_FILES)
    with pytest.raises(CheckpointError, match=r"config.json has Windows line endings \(CRLF, as git writes text "
                                              r"files with core.autocrlf=true\), so it does not match its checksum "
                                              r"in SHA256SUMS; restore the files as committed: `git -C "):
        check_files(folder)


def test_with_the_courses_gitattributes_a_windows_clone_is_byte_exact(tmp_path):
    folder = windows_clone(course_repository(tmp_path / "upstream", attributes=True), tmp_path / "clone")
    assert shipped_bytes(folder) == shipped_bytes(PRETRAINED_DIR)
    check_files(folder)
    check_ties(folder)
    assert doctor.check_model(folder).ok
    assert git("status", "--porcelain", cwd=tmp_path / "clone") == ""


def test_the_doctors_fix_restores_a_clone_made_before_gitattributes(tmp_path):
    """A student cloned on Windows before .gitattributes existed, then pulled it: git rewrites only the
    files that changed, so vocab.txt and bpe_codes.txt keep their CRLF, and a plain `git checkout --
    annotated/pretrained` (the doctor's old advice) writes nothing, because git sees no change. The
    doctor's fix must make the folder byte-exact and the clone clean."""
    upstream = tmp_path / "upstream"
    course_repository(upstream, attributes=False)
    clone = tmp_path / "clone"
    folder = windows_clone(upstream, clone)
    shutil.copy(ROOT / ".gitattributes", upstream / ".gitattributes")
    git("add", ".gitattributes", cwd=upstream)
    git("commit", "-q", "-m", ".gitattributes", cwd=upstream)
    settled(clone)
    git("pull", "-q", "--no-rebase", cwd=clone)
    assert (clone / ".gitattributes").is_file()
    assert b"\r\n" in (folder / "vocab.txt").read_bytes()  # still converted after the pull
    git("checkout", "--", "annotated/pretrained", cwd=clone)  # the advice that changed nothing
    assert b"\r\n" in (folder / "vocab.txt").read_bytes()

    result = doctor.check_model(folder)
    assert not result.ok and "has Windows line endings (CRLF" in result.detail
    commands = [part for i, part in enumerate(result.fix.split("`")) if i % 2]
    assert commands and all(command.startswith(f"git -C {clone} ") for command in commands), result.fix
    for command in commands:
        git(*shlex.split(command)[1:], cwd=tmp_path)
    assert shipped_bytes(folder) == shipped_bytes(PRETRAINED_DIR)
    assert doctor.check_model(folder).ok
    assert git("status", "--porcelain", cwd=clone) == ""


def test_the_fix_quotes_a_course_folder_with_spaces(tmp_path):
    from annotated.support.pretrained import restore_commands

    first, second = restore_commands(tmp_path / "My Courses" / "annotated")
    assert shlex.split(first)[:3] == ["git", "-C", str(tmp_path / "My Courses" / "annotated")]
    assert second.endswith("checkout HEAD -- annotated/pretrained")


def test_the_gitattributes_covers_every_file_whose_bytes_are_checked():
    listed = git("check-attr", "text", "--", *(f"annotated/pretrained/{name}" for name in SHIPPED), cwd=ROOT)
    assert listed.count("text: unset") == len(SHIPPED), listed
