"""Let ``pytest --nbval`` find the sanitize file from any working directory."""

from pathlib import Path

ROOT = Path(__file__).resolve().parent


def pytest_configure(config):
    # nbval opens the file relative to the current directory, so hand it an absolute path.
    option = getattr(config.option, "nbval_sanitize_with", None)
    if option and not Path(option).is_absolute():
        config.option.nbval_sanitize_with = str(ROOT / option)
