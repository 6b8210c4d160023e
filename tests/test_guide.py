"""The instructor guide, ``guide/``: one file per notebook with the same headings, a
90-minute plan that adds up, discussion questions with answers, links that resolve, and a
"Common mistakes" section that is exactly what ``annotated.support.guide`` writes from the
exercise checks' docstrings."""

import re

import nbformat
import pytest

from annotated.support import guide
from annotated.support.course import NOTEBOOKS, ROOT
from annotated.support.grading import CHECKS, MODULES

NAMES = guide.notebook_names()
HEADINGS = ["## Learning objectives", "## Prerequisites", "## A 90-minute session",
            "## Common mistakes", "## Discussion questions"]
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
ROW_MINUTES = re.compile(r"^\|\s*(\d+)\s*[–-]\s*(\d+)\s*\|")


def read(name: str) -> str:
    path = guide.guide_path(name)
    assert path.exists(), f"{path.relative_to(ROOT)} is missing: every notebook has a guide"
    return path.read_text(encoding="utf-8")


def sections(text: str) -> dict[str, str]:
    """The guide's text under each '## ' heading, by heading."""
    parts = re.split(r"^(## .+)$", text, flags=re.MULTILINE)
    return {parts[i].strip(): parts[i + 1] for i in range(1, len(parts), 2)}


def notebook_title(name: str) -> str:
    first = nbformat.read(NOTEBOOKS / f"{name}.ipynb", as_version=4).cells[0].source
    return first.splitlines()[0].removeprefix("# ").split(" · ", 1)[1].strip()


def test_the_course_has_sixteen_notebooks_numbered_in_order():
    assert [name[:2] for name in NAMES] == [f"{i:02d}" for i in range(16)]


def test_the_index_links_every_guide_and_names_the_generator():
    index = (guide.GUIDE / "README.md").read_text(encoding="utf-8")
    linked = set(LINK.findall(index))
    missing = [name for name in NAMES if f"{name}.md" not in linked]
    assert not missing, f"guide/README.md does not link {missing}"
    assert "python -m annotated.support.guide" in index


@pytest.mark.parametrize("name", NAMES)
def test_guide_opens_with_the_notebooks_title_and_links_to_its_notebooks(name):
    lines = read(name).splitlines()
    assert lines[0] == f"# {name[:2]} · {notebook_title(name)}: instructor guide"
    links = f"[Notebook](../notebooks/{name}.ipynb)"
    if (guide.SOLUTIONS / f"{name}.ipynb").exists():
        links += (f" · [Exercises](../exercises/{name}.ipynb)"
                  f" · [Solutions](../solutions/{name}.ipynb)")
    links += f" · [Lecture](../build/lectures/{name}.html)"
    assert lines[2] == links


@pytest.mark.parametrize("name", NAMES)
def test_guide_has_the_five_sections_in_order(name):
    headings = [line for line in read(name).splitlines() if line.startswith("## ")]
    assert headings == HEADINGS


@pytest.mark.parametrize("name", NAMES)
def test_guide_has_four_to_six_learning_objectives(name):
    bullets = re.findall(r"^- \S", sections(read(name))["## Learning objectives"], re.MULTILINE)
    assert 4 <= len(bullets) <= 6


@pytest.mark.parametrize("name", NAMES)
def test_the_session_plan_covers_0_to_90_minutes_without_gaps_or_overlaps(name):
    plan = sections(read(name))["## A 90-minute session"]
    rows = [line for line in plan.splitlines() if line.startswith("|")]
    assert rows[:2] == ["| minutes | slides | what | how |", "|---|---|---|---|"]
    spans = [ROW_MINUTES.match(row) for row in rows[2:]]
    assert all(spans), f"a row of the plan does not start with 'from–to': {rows[2:]}"
    spans = [(int(m.group(1)), int(m.group(2))) for m in spans]
    assert spans[0][0] == 0 and spans[-1][1] == 90, spans
    assert all(start < end for start, end in spans), spans
    assert all(a[1] == b[0] for a, b in zip(spans, spans[1:])), f"gap or overlap in {spans}"


@pytest.mark.parametrize("name", NAMES)
def test_the_session_plan_names_the_slide_deck_once(name):
    assert read(name).count(f"build/slides/{name}.slides.html") == 1


@pytest.mark.parametrize("name", NAMES)
def test_guide_has_five_to_seven_discussion_questions_each_with_an_answer(name):
    text = sections(read(name))["## Discussion questions"]
    items = re.findall(r"^(\d+)\. (.*)$", text, re.MULTILINE)
    assert 5 <= len(items) <= 7
    assert [int(number) for number, _ in items] == list(range(1, len(items) + 1))
    for _, item in items:
        match = re.fullmatch(r"\*\*(.+?\?)\*\* (.+)", item)
        assert match, f"not '**Question?** answer': {item[:80]}"
        assert len(match.group(2).split()) >= 15, f"answer too short: {item[:80]}"


@pytest.mark.parametrize("name", NAMES)
def test_common_mistakes_are_exactly_what_the_generator_writes(name):
    text = read(name)
    assert guide.render(text, guide.section(name), name) == text, (
        f"guide/{name}.md: run python -m annotated.support.guide")
    mistakes = sections(text)["## Common mistakes"]
    assert guide.BEGIN in mistakes and guide.END in mistakes


@pytest.mark.parametrize("name", NAMES)
def test_every_check_of_the_notebook_appears_in_its_guide(name):
    number = int(name[:2])
    module = f"annotated.support.grading.{MODULES[number - 1]}" if number else None
    checks = [check for check, fn in CHECKS.items() if fn.__module__ == module]
    assert bool(checks) == (guide.SOLUTIONS / f"{name}.ipynb").exists()
    mistakes = sections(read(name))["## Common mistakes"]
    missing = [check for check in checks if f"(`{check}`)" not in mistakes]
    assert not missing, f"guide/{name}.md does not list {missing}"


ALL_EXERCISES = {item.number for path in sorted(guide.SOLUTIONS.glob("*.ipynb"))
                 for item in guide.exercises(path)}
# "exercise 3.1", "exercises 3.3 and 3.4", "exercises 1.2 (`name`, about 10 minutes) and 1.3"
EXERCISE_NAMED = re.compile(r"[Ee]xercises? (\d+\.\d+)((?:(?: \([^()]*\))?(?:,| and| or) \d+\.\d+)*)")


def exercises_named(text: str) -> set[str]:
    """The exercise numbers a text names."""
    found = set()
    for first, rest in EXERCISE_NAMED.findall(text):
        found |= {first, *re.findall(r"\d+\.\d+", rest)}
    return found


@pytest.mark.parametrize("name", NAMES)
def test_the_exercises_a_guide_names_exist(name):
    unknown = exercises_named(read(name)) - ALL_EXERCISES
    assert not unknown, f"guide/{name}.md names exercises that do not exist: {sorted(unknown)}"


@pytest.mark.parametrize("name", NAMES)
def test_the_session_plan_gives_every_exercise_of_the_notebook_in_class_or_as_homework(name):
    solution = guide.SOLUTIONS / f"{name}.ipynb"
    own = {item.number for item in guide.exercises(solution)} if solution.exists() else set()
    planned = exercises_named(sections(read(name))["## A 90-minute session"])
    assert own <= planned, f"guide/{name}.md's plan leaves out exercises {sorted(own - planned)}"


@pytest.mark.parametrize("name", [*NAMES, "README"])
def test_every_relative_link_resolves_to_a_file_of_the_repository(name):
    path = guide.GUIDE / f"{name}.md"
    broken = []
    for target in LINK.findall(path.read_text(encoding="utf-8")):
        if re.match(r"[a-z]+:", target) or target.startswith("#"):
            continue  # a web address or an anchor of the same page
        built = re.fullmatch(r"\.\./build/lectures/(\w+)\.html", target.split("#")[0])
        if built:  # a lecture deck, built from its plan by python -m annotated.support.lecture
            if not (ROOT / "lectures" / f"{built.group(1)}.toml").is_file():
                broken.append(target)
            continue
        if not (path.parent / target.split("#")[0]).resolve().is_file():
            broken.append(target)
    assert not broken, f"guide/{name}.md links to missing files: {broken}"


# ---------------------------------------------------------------- the generator itself


def test_diagnoses_are_the_docstrings_paragraph_on_one_line():
    text = guide.diagnoses("check_split_heads")
    assert text.startswith("an input changed in place, a result of another dtype (float64 made float32")
    assert "\n" not in text and "Diagnoses" not in text


def test_a_check_without_a_diagnoses_paragraph_is_an_error_that_says_what_to_add(monkeypatch):
    def check_without():
        """Check something, without saying which mistakes it names."""
    monkeypatch.setitem(CHECKS, "check_without", check_without)
    with pytest.raises(guide.GuideError, match=r"check_without has no paragraph starting 'Diagnoses:'"):
        guide.diagnoses("check_without")


def test_a_check_that_grading_does_not_define_is_an_error_naming_it():
    with pytest.raises(guide.GuideError, match=r"check_nothing is called by a solution notebook but"):
        guide.diagnoses("check_nothing")


def test_tags_in_diagnoses_become_code_and_code_stays_code():
    assert guide._markdown("<s> kept, ``x.max(dim)``, `</s>`") == "`<s>` kept, `x.max(dim)`, `</s>`"


def test_the_section_lists_every_exercise_in_order_with_its_check():
    text = guide.section("03_masking")
    assert re.findall(r"^- \*\*Exercise (\d\.\d), `(\w+)`", text, re.MULTILINE) == [
        ("3.1", "padding_mask"), ("3.2", "subsequent_mask"), ("3.3", "target_mask"),
        ("3.4", "decoder_input_and_labels")]
    assert guide.section("00_introduction").endswith("run `python -m annotated.doctor`.")


@pytest.mark.parametrize("text", ["no markers", f"{guide.END}\n{guide.BEGIN}",
                                  f"{guide.BEGIN}\n{guide.BEGIN}\n{guide.END}"])
def test_markers_missing_twice_or_out_of_order_are_an_error_naming_the_file(text):
    with pytest.raises(guide.GuideError, match=r"guide/x\.md: needs the marker lines"):
        guide.render(text, "new", "guide/x.md")


def test_check_mode_names_a_stale_guide_and_writes_nothing_then_the_generator_fixes_it(
        tmp_path, capsys):
    path = tmp_path / "03_masking.md"
    stale = f"# head\n\n## Common mistakes\n{guide.BEGIN}\nold words\n{guide.END}\n\n## After\n"
    path.write_text(stale, encoding="utf-8")
    assert guide.main(["--check", str(path)]) == 1
    assert str(path) in capsys.readouterr().err
    assert path.read_text(encoding="utf-8") == stale
    assert guide.main([str(path)]) == 0
    fixed = path.read_text(encoding="utf-8")
    assert "old words" not in fixed and "`check_target_mask`" in fixed
    assert fixed.startswith("# head\n") and fixed.endswith(f"{guide.END}\n\n## After\n")
    assert guide.main(["--check", str(path)]) == 0


def test_a_missing_guide_is_an_error_naming_it(tmp_path, capsys):
    path = tmp_path / "03_masking.md"
    assert guide.main(["--check", str(path)]) == 1
    assert f"{path} is missing" in capsys.readouterr().err
