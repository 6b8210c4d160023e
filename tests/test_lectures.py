"""The lecture cut (annotated/support/lecture.py): every notebook has a plan that names its cells,
figures drawn from the cells as they are now, 16 to 40 slides (SLIDES_PER_SESSION) of at most 60
words, talking points on every slide, and guide timetables whose slide ranges exist. What an audience sees in the browser
(font sizes, figure text, overflow) is measured by tests/test_browser.py on the built site."""

import json
import re
import shutil
import subprocess
import sys
import textwrap

import matplotlib
import nbformat
import pytest

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from annotated.support import lecture  # noqa: E402
from annotated.support.course import NOTEBOOKS, ROOT  # noqa: E402

NAMES = [p.stem for p in sorted(NOTEBOOKS.glob("*.ipynb"))]
GUIDE = ROOT / "guide"
ROW_SLIDES = re.compile(r"^(\d+)(?:–(\d+))?$")


def plan_of(name: str) -> lecture.Plan:
    return lecture.read_plan(lecture.LECTURES / f"{name}.toml")


@pytest.mark.parametrize("name", NAMES)
def test_every_notebook_has_a_lecture_of_16_to_40_slides(name):
    plan = plan_of(name)
    low, high = lecture.SLIDES_PER_SESSION
    assert low <= len(plan.slides) + 2 <= high, f"{name}: {len(plan.slides) + 2} slides"


@pytest.mark.parametrize("name", NAMES)
def test_every_slide_has_a_title_few_words_and_talking_points(name):
    for slide in plan_of(name).slides:
        assert slide.title.strip()
        assert slide.words() <= lecture.MAX_WORDS, (name, slide.number, slide.words())
        assert slide.notes, f"{name}, slide {slide.number} ({slide.title}): no talking points in its notes"


@pytest.mark.parametrize("name", NAMES)
def test_every_figure_was_drawn_from_the_cell_as_it_is_now(name):
    assert lecture.stale_figures(plan_of(name)) == []


# 21 px monospace is 12.6 px a character: 94 fit the 1192 px inside a slide's margins (the browser test
# measures the real edges).
MAX_CODE_COLUMNS, MAX_CODE_LINES = 94, 14


@pytest.mark.parametrize("name", NAMES)
def test_code_and_output_on_a_slide_are_short_enough_to_read(name):
    plan = plan_of(name)
    cells = {c.get("id"): c for c in nbformat.read(plan.notebook, as_version=4).cells}
    for slide in plan.slides:
        if slide.code:
            lines = textwrap.dedent(lecture._part(cells[slide.code].source, slide.code_lines)).split("\n")
            assert len(lines) <= MAX_CODE_LINES and max(map(len, lines)) <= MAX_CODE_COLUMNS, (name, slide.number)
        if slide.output:
            shown = lecture._output_html(cells[slide.output])
            if not shown.startswith("<div"):
                lines = lecture._part(shown, slide.output_lines).split("\n")
                assert len(lines) <= MAX_CODE_LINES and max(map(len, lines)) <= MAX_CODE_COLUMNS, (name, slide.number)


def timetable(name: str) -> list[tuple[str, str]]:
    """(minutes, slides) of every row of the guide's "A 90-minute session" table."""
    text = (GUIDE / f"{name}.md").read_text(encoding="utf-8")
    section = text.split("## A 90-minute session", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("|")]
    header = [c.strip() for c in rows[0].strip("|").split("|")]
    assert header[:2] == ["minutes", "slides"], f"guide/{name}.md: the timetable's columns are {header}"
    return [tuple(c.strip() for c in row.strip("|").split("|")[:2]) for row in rows[2:]]


@pytest.mark.parametrize("name", NAMES)
def test_the_guide_timetable_names_slide_ranges_of_the_lecture_in_order_covering_it(name):
    total = len(plan_of(name).slides) + 2
    covered, last = set(), 0
    for minutes, slides in timetable(name):
        if slides == "—":
            continue
        match = ROW_SLIDES.match(slides)
        assert match, f"guide/{name}.md, row {minutes}: slides {slides!r} is not N or N–M"
        first, end = int(match.group(1)), int(match.group(2) or match.group(1))
        assert 1 <= first <= end <= total, f"guide/{name}.md, row {minutes}: slides {slides}, the lecture has {total}"
        assert first >= last, f"guide/{name}.md, row {minutes}: slides {slides} come before the row above's"
        covered |= set(range(first, end + 1))
        last = end
    assert set(range(2, total)) <= covered, f"guide/{name}.md: slides {sorted(set(range(2, total)) - covered)} " \
                                            "are in no row of the timetable"


@pytest.mark.parametrize("name", NAMES)
def test_the_guide_links_its_lecture(name):
    text = (GUIDE / f"{name}.md").read_text(encoding="utf-8")
    assert f"(../build/lectures/{name}.html)" in text


def test_angle_brackets_in_a_plan_are_text_not_html():
    html = lecture._inline("reads `<s>` then <pad> and $x < y$ or $\\texttt{<pad>}$")
    assert "<code>&lt;s&gt;</code>" in html and "&lt;pad&gt;" in html
    assert r"$x \lt  y$" in html and r"\texttt{\lt pad\gt }" in html
    assert "<pad>" not in html and "<s>" not in html


def test_words_count_an_equation_as_one_word():
    slide = lecture.Slide(2, "Why $W^O$?", points=["$d_k = d_{\\text{model}} / h$ columns each"])
    assert slide.words() == 2 + 1 + 2


# ------------------------------------------------------------------ bad plans

@pytest.fixture()
def sandbox(tmp_path, monkeypatch):
    """A copy of notebook 04 and a plan folder, with the module pointed at them."""
    notebooks, lectures = tmp_path / "notebooks", tmp_path / "lectures"
    notebooks.mkdir()
    lectures.mkdir()
    shutil.copy(NOTEBOOKS / "04_multi_head_attention.ipynb", notebooks)
    monkeypatch.setattr(lecture, "NOTEBOOKS", notebooks)
    monkeypatch.setattr(lecture, "LECTURES", lectures)
    monkeypatch.setattr(lecture, "FIGURES", lectures / "figures")
    return lectures / "04_multi_head_attention.toml"


FIGURE_CELL = "d1c5dc53"  # notebook 04's Figure 2


@pytest.mark.parametrize("text, message", [
    ('[[slide]]\ntitle = "A"\nfigure = "nosuchcell"', r"figure = 'nosuchcell' names no cell of 04"),
    ('[[slide]]\ntitle = "A"\ncolour = "red"', r"unknown keys \['colour'\]"),
    ('[[slide]]\npoints = ["x"]', r"slide 2: no title"),
    ('[[slide]]\ntitle = "A"\nrun = "plt.plot()"', r"`run` needs `after`"),
    (f'[[slide]]\ntitle = "A"\nfigure = "{FIGURE_CELL}"\ndiagram = "attention_flow"', r"one figure per slide"),
    ('[[slide]]\ntitle = "A"\npoints = ["' + "word " * 60 + '"]', r"61 words of prose, more than 60"),
    ('[[slide]\ntitle = "A"', r"not valid TOML"),
    ('title = "A"', r"unknown top-level keys \['title'\]"),
])
def test_a_bad_plan_is_refused_with_the_slide_and_the_reason(sandbox, text, message):
    sandbox.write_text(text, encoding="utf-8")
    with pytest.raises(lecture.LectureError, match=message):
        lecture.read_plan(sandbox)


def test_a_plan_without_its_notebook_is_refused(sandbox):
    orphan = sandbox.with_name("99_nothing.toml")
    orphan.write_text('[[slide]]\ntitle = "A"', encoding="utf-8")
    with pytest.raises(lecture.LectureError, match=r"no notebook \S*notebooks/99_nothing\.ipynb for this plan"):
        lecture.read_plan(orphan)


def test_a_figure_whose_cell_changed_is_stale_and_the_deck_says_what_to_run(sandbox):
    sandbox.write_text(f'[[slide]]\ntitle = "Figure 2"\nfigure = "{FIGURE_CELL}"\nnotes = ["say"]', encoding="utf-8")
    plan = lecture.read_plan(sandbox)
    assert lecture.stale_figures(plan) == ["slide 2 (Figure 2)"]  # never drawn
    folder = lecture.figure_folder(plan)
    folder.mkdir(parents=True)
    cell = next(c for c in nbformat.read(plan.notebook, as_version=4).cells if c.get("id") == FIGURE_CELL)
    (folder / f"{FIGURE_CELL}-last.svg").write_text("<svg></svg>", encoding="utf-8")
    (folder / "manifest.json").write_text(json.dumps({f"{FIGURE_CELL}-last": lecture.cell_hash(cell)}))
    assert lecture.stale_figures(plan) == []
    nb = nbformat.read(plan.notebook, as_version=4)
    next(c for c in nb.cells if c.get("id") == FIGURE_CELL).source += "\n# changed"
    nbformat.write(nb, plan.notebook)
    assert lecture.stale_figures(plan) == ["slide 2 (Figure 2)"]
    with pytest.raises(lecture.LectureError, match=r"--figures notebooks/04_multi_head_attention.ipynb|--figures .*04"):
        lecture.deck_html(plan, "assets", lecture.repo_links(plan, sandbox.parent, None))


def test_the_command_refuses_what_is_not_a_plan_in_one_line(tmp_path):
    result = subprocess.run([sys.executable, "-m", "annotated.support.lecture", str(tmp_path / "x.toml")],
                            capture_output=True, text=True, cwd=ROOT)
    assert result.returncode == 2
    assert result.stderr.strip().splitlines()[-1].endswith("is not a lecture plan; give one of lectures/*.toml "
                                                           "(or its notebook)")


def test_list_numbers_the_slides_as_the_deck_does():
    result = subprocess.run([sys.executable, "-m", "annotated.support.lecture", "--list",
                             "notebooks/04_multi_head_attention.ipynb"], capture_output=True, text=True, cwd=ROOT)
    assert result.returncode == 0, result.stderr
    plan = plan_of("04_multi_head_attention")
    assert f"04_multi_head_attention: {len(plan.slides) + 2} slides" in result.stdout
    assert f"  {plan.slides[-1].number:3d}  {plan.slides[-1].title}" in result.stdout


# ------------------------------------------------------------------ figures and the deck

def test_slide_svg_scales_the_figure_to_the_slide_and_keeps_text_as_text_at_least_min_font():
    with matplotlib.rc_context({"svg.fonttype": "none"}):
        fig, ax = plt.subplots(figsize=(4, 3))
        ax.set_title("tiny", fontsize=6)
        ax.set_xlabel("big", fontsize=30)
        svg = lecture.slide_svg(fig)
        plt.close(fig)
    width, height = fig.get_size_inches()
    assert min(lecture.FIGURE_INCHES[0] / width, lecture.FIGURE_INCHES[1] / height) == pytest.approx(1.0)
    sizes = {text: float(size) for size, text in re.findall(r"font-size[:=]\s*\"?([\d.]+)px[^>]*>([a-z]+)<", svg)}
    assert ">tiny<" in svg and ">big<" in svg  # text, not paths
    assert sizes.get("tiny", lecture.MIN_FONT_PT) >= lecture.MIN_FONT_PT and sizes.get("big", 30) == 30


def test_figures_inlined_on_one_page_get_ids_of_their_own():
    svg = '<svg><defs><clipPath id="p1"><rect/></clipPath></defs><g clip-path="url(#p1)"></g><use xlink:href="#p1"/></svg>'
    a, b = lecture._unique_ids(svg, "s2-"), lecture._unique_ids(svg, "s3-")
    assert 'id="s2-p1"' in a and "url(#s2-p1)" in a and 'href="#s2-p1"' in a
    assert not set(re.findall(r'id="([^"]+)"', a)) & set(re.findall(r'id="([^"]+)"', b))


def test_the_deck_has_every_slide_with_notes_links_and_no_raster_image(tmp_path):
    plan = plan_of("04_multi_head_attention")
    deck = lecture.build([plan.path], tmp_path)[0]
    text = deck.read_text(encoding="utf-8")
    total = len(plan.slides) + 2
    assert text.count('<section class="lecture-slide') == total
    assert text.count('<aside class="notes">') == total
    assert "<img" not in text
    assert 'href="05_positional_encoding.html"' in text  # on to the next lecture
    assert re.search(r'href="[^"]*README\.md"', text) and re.search(r'href="[^"]*guide/04_multi_head_attention\.md"', text)
    assert (tmp_path / "assets" / "lecture.css").is_file()
    # The notebook's own links (in the notes: exercises, solutions) resolve from the deck's folder.
    targets = {t.split("#")[0] for t in re.findall(r'href="([^"]+)"', text) if not t.startswith("data:")} - {""}
    missing = [t for t in targets if not t.endswith("05_positional_encoding.html") and not (tmp_path / t).exists()]
    assert not missing and any(t.endswith("exercises/04_multi_head_attention.ipynb") for t in targets), missing
