"""Let ``pytest --nbval`` find the sanitize file from any working directory; give each of
pytest-xdist's workers its share of the cores; name files the tests leave behind."""

import os
from pathlib import Path

ROOT = Path(__file__).resolve().parent

# ``pytest --nbval`` runs in parallel (``-n auto --dist loadscope`` in pyproject.toml: every
# notebook whole in one kernel, every test module on one worker). PyTorch would give each worker,
# and each kernel a worker starts, a thread per core; on two cores two workers of two threads wait
# on each other (the translation notebook, 11 now and 09 then, was still training after 20 minutes,
# where it takes 5 alone: benchmarks/RESULTS.md, "The test suite's time"). So each
# worker, and every kernel and command it starts, gets its share: one thread each on two cores.
# Set before torch is imported.
CORES = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
if os.environ.get("PYTEST_XDIST_WORKER_COUNT"):
    _share = max(1, CORES // int(os.environ["PYTEST_XDIST_WORKER_COUNT"]))
    for _name in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ.setdefault(_name, str(_share))


def pytest_xdist_auto_num_workers(config):
    """``-n auto`` for files named one by one (``pytest --nbval notebooks/08_training.ipynb``): no
    more workers than files, so that one notebook keeps every core. Folders: one worker per core."""
    paths = [Path(arg.split("::")[0]) for arg in config.args]
    if paths and all(path.is_file() for path in paths):
        return max(1, min(CORES, len(set(paths))))
    return None  # pytest-xdist's own count


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


def _is_worker(session) -> bool:
    return hasattr(session.config, "workerinput")  # the check runs once, around all the workers


def pytest_sessionstart(session):
    if _is_worker(session):
        return
    session.config._files_before = _files_outside_tmp()


def pytest_sessionfinish(session, exitstatus):
    if _is_worker(session):
        return
    left = sorted(_files_outside_tmp() - session.config._files_before)
    if left:
        names = ", ".join(str(p) for p in left[:10]) + (f" and {len(left) - 10} more" if len(left) > 10 else "")
        print(f"\nerror: the tests left files outside their temporary directories: {names}")
        session.exitstatus = 1
