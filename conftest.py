"""Let ``pytest --nbval`` find the sanitize file from any working directory."""

from pathlib import Path

ROOT = Path(__file__).resolve().parent


def pytest_configure(config):
    # nbval opens the file relative to the current directory, so hand it an absolute path.
    option = getattr(config.option, "nbval_sanitize_with", None)
    if option and not Path(option).is_absolute():
        config.option.nbval_sanitize_with = str(ROOT / option)


# Tests write only below their temporary directories: a file left in the checkout or in the
# download cache after the session is an error of the session, named.
# build/ is the folder for what is built on purpose (the browser test's screenshots, for a person to look at).
SKIPPED = {".git", ".venv", ".pytest_cache", "__pycache__", ".ipynb_checkpoints", "annotated.egg-info", "build"}


def _files_outside_tmp() -> set[Path]:
    cache = Path.home() / ".cache" / "annotated"
    found = set(cache.rglob("*")) if cache.exists() else set()
    stack = [ROOT]
    while stack:
        folder = stack.pop()
        for entry in folder.iterdir():
            if entry.name in SKIPPED or entry.is_symlink():
                continue
            if entry.is_dir():
                stack.append(entry)
            else:
                found.add(entry)
    return found


def pytest_sessionstart(session):
    session.config._files_before = _files_outside_tmp()


def pytest_sessionfinish(session, exitstatus):
    left = sorted(_files_outside_tmp() - session.config._files_before)
    if left:
        names = ", ".join(str(p) for p in left[:10]) + (f" and {len(left) - 10} more" if len(left) > 10 else "")
        print(f"\nerror: the tests left files outside their temporary directories: {names}")
        session.exitstatus = 1
