"""The lecture cut (annotated/support/lecture.py): every notebook has a plan that names its cells,
figures drawn from the cells as they are now, 16 to 40 slides (SLIDES_PER_SESSION) of at most 60
words, at most 25 of them the core, timed to 50 minutes, talking points on every slide, speaker notes
without code, and guide timetables whose slide ranges exist. A bad plan is one clear line; a deck
built on its own links to no raw file. What an audience sees in the browser (font sizes, figure text,
overflow, links) is measured by tests/test_browser.py on the built site."""

import json
import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

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
def test_every_lecture_has_at_most_25_core_slides_whose_sections_add_up_to_50_minutes(name):
    assert lecture.timing_problems(plan_of(name)) == []


@pytest.mark.parametrize("name", NAMES)
def test_every_slide_has_a_title_few_words_and_talking_points(name):
    for slide in plan_of(name).slides:
        assert slide.title.strip()
        assert slide.words() <= lecture.MAX_WORDS, (name, slide.number, slide.words())
        assert slide.notes, f"{name}, slide {slide.number} ({slide.title}): no talking points in its notes"


@pytest.mark.parametrize("name", NAMES)
def test_speaker_notes_are_prose_without_a_code_block(name):
    plan = plan_of(name)
    cells = {c.get("id"): c for c in nbformat.read(plan.notebook, as_version=4).cells}
    for slide in plan.slides:
        notes = lecture.notes_html(slide, cells, plan.timing())
        assert "<pre" not in notes, f"{name}, slide {slide.number} ({slide.title}): a code block in the notes"


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


CODE_CELL, CODE_LINES = "4aa9a68b", 31  # a code cell of notebook 04 and its lines
MARKDOWN_CELL = "c989cbf4"
PRINTS, PRINTED_LINES = "4aa9a68b", 10  # a cell that prints 10 lines


def slide(keys: str) -> str:
    return f'[[slide]]\ntitle = "A slide"\n{keys}\n'


@pytest.mark.parametrize("text, message", [
    (slide('figure = "nosuchcell"'), r"slide 2 \('A slide'\): figure names 'nosuchcell', no cell of 04"),
    (slide('colour = "red"'), r"unknown keys \['colour'\]"),
    ('[[slide]]\npoints = ["x"]', r"slide 2: no title"),
    (slide('run = "plt.plot()"'), r"`run` needs `after`"),
    (slide(f'after = "{FIGURE_CELL}"'), r"after = \"d1c5dc53\" without run"),
    (slide(f'figure = "{FIGURE_CELL}"\ndiagram = "attention_flow"'), r"one figure per slide"),
    (slide('points = ["' + "word " * 60 + '"]'), r"62 words of prose, more than 60"),
    ('[[slide]\ntitle = "A"', r"not valid TOML"),
    ('title = "A"', r"unknown top-level keys \['title'\]"),
    ("", r"no slides; write each slide as a \[\[slide\]\] table"),
    # The bad values an instructor might write, each one line naming the slide, the key and the fix.
    (slide('points = "a string"'), r"slide 2 \('A slide'\): points = \"a string\" is one text, not a list; "
                                   r"write points = \["),
    (slide('points = ["a", 3]'), r"points = \[\"a\", 3\] is not a list of texts"),
    (slide(f'code = "{CODE_CELL}"\ncode_lines = [3, 1]'),
     rf"code_lines = \[3, 1\]: the first line comes after the last; give \[first, last\], "
     rf"1 <= first <= last <= {CODE_LINES} \(cell {CODE_CELL} has {CODE_LINES} lines\)"),
    (slide(f'code = "{CODE_CELL}"\ncode_lines = [0, 2]'), r"code_lines = \[0, 2\]: lines count from 1"),
    (slide(f'code = "{CODE_CELL}"\ncode_lines = [30, {CODE_LINES + 1}]'),
     rf"code_lines = \[30, {CODE_LINES + 1}\]: past the last line; .* <= {CODE_LINES}"),
    (slide(f'code = "{CODE_CELL}"\ncode_lines = "1-3"'), r"code_lines = \"1-3\" is not two line numbers"),
    (slide(f'code = "{CODE_CELL}"\ncode_lines = [1, 2, 3]'), r"code_lines = \[1, 2, 3\] is not two line numbers"),
    (slide(f'code = "{CODE_CELL}"\ncode_lines = [1.0, 2]'), r"is not two line numbers"),
    (slide('code_lines = [1, 2]'), r"code_lines = \[1, 2\] without code"),
    (slide(f'code = "{MARKDOWN_CELL}"'), rf"code names '{MARKDOWN_CELL}', a markdown cell; code takes a code cell"),
    (slide(f'output = "{PRINTS}"\noutput_lines = [2, {PRINTED_LINES + 1}]'),
     rf"output_lines = \[2, {PRINTED_LINES + 1}\]: past the last line; .*the output of cell {PRINTS} has "
     rf"{PRINTED_LINES} lines"),
    (slide('output = "41b14c50"'), r"output names '41b14c50', a cell that printed nothing"),
    (slide(f'notes_from = ["{FIGURE_CELL}"]'), rf"notes_from names '{FIGURE_CELL}', a code cell; notes_from takes "
                                               rf"a markdown cell"),
    ('[[slide]]\ntitle = 42', r"slide 2: title = 42 is not text; write title = \"A few words\""),
    ('[[slide]]\ntitle = "  "', r"slide 2: title = \"  \" is empty"),
    (slide('diagram = "no_such_diagram"'), r"diagram = \"no_such_diagram\" is no diagram of "
                                           r"annotated/support/diagrams.py; the diagrams are \['"),
    (slide(f'figure = "{FIGURE_CELL}#0"'), r"figures count from 1"),
    (slide('build = "yes"\npoints = ["a"]'), r"build = \"yes\" is not true or false"),
    (slide('build = true'), r"build = true without points"),
    ('[slide]\ntitle = "A"\npoints = ["x"]', r"\[slide\] is written as one table; write each slide as "
                                              r"\[\[slide\]\] \(two brackets"),
    ('slide = ["A"]', r"slide 2: \"A\" is not a table"),
    (slide('optional = "yes"'), r"optional = \"yes\" is not true or false; write optional = true"),
    (slide('minutes = 0'), r"minutes = 0 is not a positive whole number of minutes"),
    (slide('minutes = -3'), r"minutes = -3 is not a positive whole number"),
    (slide('minutes = 2.5'), r"minutes = 2.5 is not a positive whole number"),
    (slide('minutes = true'), r"minutes = true is not a positive whole number"),
    (slide('minutes = "5"'), r"minutes = \"5\" is not a positive whole number"),
    (slide('optional = true\nminutes = 3'), r"minutes = 3 on an optional slide: only core slides are timed"),
])
def test_a_bad_plan_is_refused_with_the_slide_and_the_reason(sandbox, text, message):
    sandbox.write_text(text, encoding="utf-8")
    with pytest.raises(lecture.LectureError, match=message) as caught:
        lecture.read_plan(sandbox)
    assert "\n" not in str(caught.value)


def test_a_good_slide_of_every_key_is_accepted(sandbox):
    sandbox.write_text(slide(f'points = ["a"]\nbuild = true\ncode = "{CODE_CELL}"\ncode_lines = [1, {CODE_LINES}]\n'
                             f'output = "{PRINTS}"\noutput_lines = [1, {PRINTED_LINES}]\nnotes = ["say"]\n'
                             f'notes_from = ["{MARKDOWN_CELL}"]\nminutes = 50\n')
                       + slide(f'figure = "{FIGURE_CELL}#1"\noptional = true\nnotes = ["say"]')
                       + slide('diagram = "attention_flow"\noptional = false\nnotes = ["say"]'), encoding="utf-8")
    plan = lecture.read_plan(sandbox)
    assert [s.number for s in plan.slides] == [2, 3, 4] and [s.number for s in plan.core()] == [2, 4]
    assert plan.slides[0].code_lines == (1, CODE_LINES) and plan.slides[0].minutes == 50
    assert plan.timing() == {2: (50, 50)}


def test_a_bad_plan_is_one_line_from_the_command_with_no_traceback(tmp_path):
    plan = tmp_path / "04_multi_head_attention.toml"  # beside no notebook of its own: it reads notebooks/04
    plan.write_text(slide(f'code = "{CODE_CELL}"\ncode_lines = [3, 1]'), encoding="utf-8")
    result = subprocess.run([sys.executable, "-m", "annotated.support.lecture", "--list", str(plan)],
                            capture_output=True, text=True, cwd=ROOT)
    assert result.returncode == 1
    assert result.stderr.count("\n") == 1 and "Traceback" not in result.stderr, result.stderr
    assert result.stderr.startswith("python -m annotated.support.lecture: error: 04_multi_head_attention.toml, "
                                    "slide 2 ('A slide'): code_lines = [3, 1]: the first line comes after the last")


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


def visible(deck_html: str) -> str:
    """What the audience sees of a deck: its text without the speaker notes and the scripts."""
    return re.sub(r'<aside class="notes">.*?</aside>|<script\b.*?</script>', "", deck_html, flags=re.S)


def test_a_deck_built_on_its_own_links_no_raw_or_missing_file_and_shows_no_guide_link(tmp_path):
    plan = plan_of("04_multi_head_attention")
    deck = lecture.build([plan.path], tmp_path)[0]  # as into build/lectures/, with no next deck beside it
    text = deck.read_text(encoding="utf-8")
    total = len(plan.slides) + 2
    assert text.count('<section class="lecture-slide') == total
    assert text.count('<aside class="notes">') == total
    assert "<img" not in text
    assert (tmp_path / "assets" / "lecture.css").is_file()
    targets = {t.split("#")[0] for t in re.findall(r'href="([^"]+)"', text) if not t.startswith("data:")} - {""}
    assert not [t for t in targets if lecture.is_raw(Path(t)) or not (tmp_path / t).exists()], targets
    assert "05_positional_encoding.html" not in targets  # not built beside it: named, not linked
    assert "Next: 05 · Positional encoding" in text
    assert "guide" not in visible(text).lower()
    # The notes name the course's files as text, the notebook's own links (exercises) as their paths.
    assert "<code>guide/04_multi_head_attention.md</code>" in text
    assert "<code>exercises/04_multi_head_attention.ipynb</code>" in text
    # With the next deck built beside it, the closing slide links it.
    both = lecture.build([plan.path, lecture.LECTURES / "05_positional_encoding.toml"], tmp_path / "both")
    assert 'href="05_positional_encoding.html"' in both[0].read_text(encoding="utf-8")


def test_drop_links_keeps_web_links_and_fragments_and_turns_the_rest_into_text(tmp_path):
    (tmp_path / "here.html").write_text("x")
    text = ('<a href="here.html#a">page</a> <a href="gone.html">gone</a> <a href="https://arxiv.org">paper</a> '
            '<a href="#top">top</a> <a class="x" href="../notebooks/04_multi_head_attention.ipynb">notebook</a>')
    kept = lecture.drop_links(text, tmp_path, lambda path: path.exists() and not lecture.is_raw(path))
    assert '<a href="here.html#a">page</a>' in kept and '<a href="https://arxiv.org">paper</a>' in kept
    assert '<a href="#top">top</a>' in kept and " gone " in kept and 'href="gone.html"' not in kept
    assert "notebook" in kept and ".ipynb\"" not in kept


def sandbox_plan(sandbox, *slides: str) -> lecture.Plan:
    sandbox.write_text("".join(slides), encoding="utf-8")
    return lecture.read_plan(sandbox)


def say(keys: str = "") -> str:
    return slide(f'points = ["a point"]\nnotes = ["say it"]\n{keys}')


def test_the_timing_check_counts_core_slides_and_their_minutes_only(sandbox):
    core = [say(f"minutes = {m}") for m in (20, 20, 10)] + [say()] * 20  # 23 + title and closing = 25
    optional = [say("optional = true")] * 8
    assert lecture.timing_problems(sandbox_plan(sandbox, *core, *optional)) == []
    assert lecture.timing_problems(sandbox_plan(sandbox, *core, say(), *optional)) == [
        "04_multi_head_attention.toml: 26 core slides (title and closing included), more than 25; mark some "
        "optional = true"]
    short = [say(f"minutes = {m}") for m in (20, 20, 9)]
    assert lecture.timing_problems(sandbox_plan(sandbox, *short)) == [
        "04_multi_head_attention.toml: the core sections' minutes add up to 49, not 50"]
    late = [say("optional = true"), say(), say("minutes = 50")]
    assert lecture.timing_problems(sandbox_plan(sandbox, *late)) == [
        "04_multi_head_attention.toml: slide 3, the first core slide, has no minutes, so the time before the "
        "first timed section is not counted"]


def notes_of(deck_html: str) -> dict[int, str]:
    return {int(n): notes for n, notes in re.findall(
        r'<section [^>]*data-slide="(\d+)">.*?<aside class="notes">(.*?)</aside>', deck_html, flags=re.S)}


def test_the_notes_open_with_the_sections_time_or_optional_and_core_leaves_optional_slides_out(sandbox, tmp_path):
    plan = sandbox_plan(sandbox, say("minutes = 30"), say("optional = true"), say(), say("minutes = 20"),
                        say("optional = true"))
    links = lecture.repo_links(plan, tmp_path, None)
    whole = lecture.deck_html(plan, "assets", links)
    notes = notes_of(whole)
    assert notes[2].startswith('<p class="lecture-timing"><strong>About 30 minutes for this section (30 of 50 '
                               'elapsed at its end).</strong></p><ul><li>say it')
    assert notes[5].startswith("<p class=\"lecture-timing\"><strong>About 20 minutes for this section (50 of 50 "
                               "elapsed at its end).")
    for n in (3, 6):
        assert re.sub(r"<[^>]+>", "", notes[n]).startswith("Optional. ")
        assert re.search(rf'<section class="lecture-slide lecture-optional" data-optional="true" id="s{n}"', whole)
    assert "lecture-timing" not in notes[4] and "Optional." not in notes[4]
    assert "The 50-minute core is 5 of the 7 slides" in whole and "O skips" in whole
    core = lecture.deck_html(plan, "assets", links, core=True)
    assert sorted(notes_of(core)) == [1, 2, 4, 5, 7]  # the closing slide keeps its number in the whole deck
    assert "data-optional=\"true\"" not in core and "· 5 slides" in core
    assert "slideNumber: (slide) => [Number(slide.dataset.slide || 0)]" in core


def test_a_code_block_of_the_notebooks_prose_is_left_out_of_the_notes(sandbox):
    notebook = lecture.NOTEBOOKS / "04_multi_head_attention.ipynb"
    nb = nbformat.read(notebook, as_version=4)
    cell = next(c for c in nb.cells if c.get("id") == MARKDOWN_CELL)
    cell.source += "\n\nRun:\n\n```bash\npython -m annotated.train\n```\n\nor\n\n    indented code\n"
    nbformat.write(nb, notebook)
    plan = sandbox_plan(sandbox, say(f'notes_from = ["{MARKDOWN_CELL}"]\nminutes = 50'))
    notes = lecture.notes_html(plan.slides[0], {c.get("id"): c for c in nb.cells}, plan.timing())
    assert "<pre" not in notes and "annotated.train" not in notes and "indented code" not in notes
    assert notes.count("(A code block of the notebook, not shown here.)") == 2 and "Run:" in notes


def test_the_core_option_of_the_command_leaves_the_optional_slides_out(sandbox, tmp_path):
    sandbox.write_text(say("minutes = 50") + say("optional = true") + say(), encoding="utf-8")
    assert lecture.main([str(sandbox), "--core", "--out", str(tmp_path / "core")]) == 0
    text = (tmp_path / "core" / "04_multi_head_attention.html").read_text(encoding="utf-8")
    assert sorted(notes_of(text)) == [1, 2, 4, 5] and "data-optional=\"true\"" not in text
    assert lecture.DEFAULT_CORE_OUT != lecture.DEFAULT_OUT  # by default beside the whole decks, not over them


def test_a_rebuild_never_writes_through_a_link_left_in_the_output_folder(sandbox, tmp_path):
    sandbox.write_text(say("minutes = 50"), encoding="utf-8")
    out, outside = tmp_path / "out", tmp_path / "outside"
    assert lecture.main([str(sandbox), "--out", str(out)]) == 0
    outside.mkdir()
    (outside / "mine.html").write_text("mine", encoding="utf-8")
    (outside / "lecture.css").write_text("my css", encoding="utf-8")
    (outside / "folder").mkdir()
    deck = out / "04_multi_head_attention.html"
    deck.unlink()
    deck.symlink_to(outside / "mine.html")
    (out / "assets" / "lecture.css").unlink()
    (out / "assets" / "lecture.css").symlink_to(outside / "lecture.css")
    (out / "pdf").symlink_to(outside / "folder", target_is_directory=True)
    assert lecture.main([str(sandbox), "--out", str(out)]) == 0
    assert (outside / "mine.html").read_text(encoding="utf-8") == "mine"
    assert (outside / "lecture.css").read_text(encoding="utf-8") == "my css"
    assert list((outside / "folder").iterdir()) == []
    assert not deck.is_symlink() and "<section" in deck.read_text(encoding="utf-8")
    assert not (out / "assets" / "lecture.css").is_symlink() and not (out / "pdf").exists()


def test_the_handout_options_need_pdf(capsys):
    with pytest.raises(SystemExit) as caught:
        lecture.main(["--per-page", "4"])
    assert caught.value.code == 2
    assert "--per-page and --handout-notes shape the PDF handout: add --pdf" in capsys.readouterr().err
    with pytest.raises(ValueError, match="per_page = 3"):
        lecture.write_pdfs([], Path("unused"), per_page=3)


def test_a_figure_drawn_twice_is_the_same_svg_and_is_not_written_again(tmp_path):
    def draw() -> str:
        with matplotlib.rc_context({"svg.fonttype": "none"}):
            fig, ax = plt.subplots(figsize=(4, 3))
            ax.imshow([[0, 1], [1, 0]])  # clip paths and an image: the ids matplotlib makes up
            ax.set_title("same")
            svg = lecture.slide_svg(fig)
            plt.close(fig)
        return svg
    first, second = draw(), draw()
    assert first == second and "<dc:date>" not in first and 'id="p' in first
    path = tmp_path / "f.svg"
    assert lecture.write_if_changed(path, first) is True
    stamp = path.stat().st_mtime_ns, path.stat().st_ino
    assert lecture.write_if_changed(path, second) is False
    assert (path.stat().st_mtime_ns, path.stat().st_ino) == stamp
    assert lecture.write_if_changed(path, first.replace("same", "new")) is True
    assert "new" in path.read_text(encoding="utf-8")
