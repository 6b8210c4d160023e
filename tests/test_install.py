"""The two install routes, pip (pyproject.toml) and conda (environment.yml), agree."""

import re

import pytest

from annotated.support.course import ROOT


try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    tomllib = pytest.importorskip("tomli")


def pyproject():
    return tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))


def environment_pip_requirements() -> list[str]:
    """The entries under `- pip:` in environment.yml (a flat list; no YAML library needed)."""
    lines = (ROOT / "environment.yml").read_text(encoding="utf-8").splitlines()
    start = next(i for i, line in enumerate(lines) if line.strip() == "- pip:")
    entries = []
    for line in lines[start + 1:]:
        match = re.match(r"^\s{4,}-\s+(.+?)\s*$", line)
        if not match:
            break
        entries.append(match.group(1))
    return entries


def test_environment_yml_installs_exactly_the_pyproject_dependencies_and_the_package():
    project = pyproject()["project"]
    wanted = sorted(project["dependencies"] + project["optional-dependencies"]["test"])
    entries = environment_pip_requirements()
    assert "-e ." in entries, "environment.yml must install the package itself with `-e .`"
    assert sorted(e for e in entries if e != "-e .") == wanted, (
        "environment.yml and pyproject.toml list different requirements; make them the same"
    )


def test_environment_yml_python_matches_requires_python():
    requires = pyproject()["project"]["requires-python"]
    text = (ROOT / "environment.yml").read_text(encoding="utf-8")
    assert f"python{requires}" in text.replace(" ", ""), f"environment.yml should pin python{requires}"


def test_torchtext_is_not_a_dependency():
    project = pyproject()["project"]
    everything = project["dependencies"] + sum(project["optional-dependencies"].values(), [])
    assert not any(r.lower().startswith("torchtext") for r in everything)
