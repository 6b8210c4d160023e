"""The notebooks' slide metadata, the deck export, and the offline assets (no browser needed;
``tests/test_browser.py`` measures the decks in Chromium)."""

import re
import subprocess
import sys

import nbformat
import pytest

from annotated.support import web_assets
from annotated.support.course import NOTEBOOKS
from annotated.support.download import DownloadError
from annotated.support.errors import CourseError
from annotated.support.slide_layout import BUDGET, HEADINGS, choose_slide_types, shorten_tall_cells, split_markdown
from annotated.support.slides import CODE_IN_NOTES, SLIDE_TYPES, export_deck, links_to_files, slide_type

COURSE = sorted(NOTEBOOKS.glob("*.ipynb"))
CDN = re.compile(r'<(?:script|link)\b[^>]*\b(?:src|href)="(?:https?:)?//', re.I)


@pytest.mark.parametrize("notebook", COURSE, ids=lambda p: p.stem)
def test_every_cell_of_every_notebook_has_a_slide_type_that_follows_the_layout_rule(notebook):
    cells = nbformat.read(notebook, as_version=4).cells
    types = [slide_type(cell) for cell in cells]
    assert all(t in SLIDE_TYPES for t in types), [i for i, t in enumerate(types) if t not in SLIDE_TYPES]
    assert types[0] == "slide", "a deck starts with a slide"
    for i, (cell, kind) in enumerate(zip(cells, types)):
        if cell.cell_type == "markdown":
            heading = cell.source.lstrip().startswith(HEADINGS)
            expected = "slide" if heading or i == 0 else "subslide"
            assert kind == expected, f"cell {i}: a markdown cell {'with' if heading else 'without'} a # or ## heading " \
                                     f"opens a {expected}, not a {kind!r}: run python -m annotated.support.slide_layout"
        else:
            assert kind in ("-", "subslide", "notes"), (i, kind)
        if CODE_IN_NOTES in cell.metadata.get("tags", []):
            assert cell.cell_type == "code" and cell.get("outputs"), f"cell {i}: code-in-notes needs outputs to show"
        if kind == "notes":
            assert cell.cell_type == "code" and not cell.get("outputs"), f"cell {i}: only code that shows nothing " \
                                                                         "goes to the notes"


def test_every_notebook_has_slides_and_sub_slides_and_puts_long_code_in_the_notes():
    kinds = [slide_type(c) for nb in COURSE for c in nbformat.read(nb, as_version=4).cells]
    assert len(COURSE) == 16
    assert {"slide", "subslide", "-", "notes"} <= set(kinds)
    assert kinds.count("slide") >= 4 * len(COURSE)


def _cell(kind, source="x", outputs=None):
    if kind == "markdown":
        return nbformat.v4.new_markdown_cell(source)
    cell = nbformat.v4.new_code_cell(source)
    cell.outputs = outputs or []
    return cell


def test_a_markdown_cell_opens_a_slide_its_code_follows_until_the_slide_is_full():
    printed = [nbformat.v4.new_output("stream", text="1\n")]
    cells = [_cell("markdown", "# Title"), _cell("code"), _cell("markdown", "Words"), _cell("code"),
             _cell("code", outputs=printed), _cell("markdown", "## Section"), _cell("code"), _cell("code", outputs=printed)]
    heights = [100, 200, 100, 300, 300, 100, BUDGET + 1, BUDGET + 1]
    types = choose_slide_types(cells, heights)
    # The second code cell of "Words" does not fit (100 + 300 + 300 > BUDGET): a sub-slide of its own;
    # the tall cell that shows nothing goes to the notes, the tall one with output gets its own sub-slide.
    assert types == ["slide", "-", "subslide", "-", "subslide", "slide", "notes", "subslide"]


def test_tall_cells_are_shortened_markdown_cut_and_code_with_output_tagged():
    long_text = "\n\n".join(f"Paragraph {i}." for i in range(8))
    printed = [nbformat.v4.new_output("stream", text="1\n")]
    nb = nbformat.v4.new_notebook(cells=[_cell("markdown", long_text), _cell("code", "f()", printed), _cell("code")])
    changed = shorten_tall_cells(nb, [3 * BUDGET, 2 * BUDGET, 2 * BUDGET])
    assert changed == 2
    assert [c.cell_type for c in nb.cells] == ["markdown"] * 4 + ["code", "code"]
    assert "\n\n".join(c.source for c in nb.cells[:4]) == long_text
    assert nb.cells[4].metadata["tags"] == [CODE_IN_NOTES]
    assert "tags" not in nb.cells[5].metadata  # shows nothing: the layout sends it to the notes instead


def test_split_markdown_repeats_a_tables_header_and_never_cuts_math_or_code():
    table = "| a | b |\n|---|---|\n" + "\n".join(f"| {i} | {i * i} |" for i in range(10))
    pieces = split_markdown("Intro.\n\n" + table, 3)
    assert len(pieces) == 3
    for piece in pieces[1:]:
        assert piece.startswith("| a | b |\n|---|---|\n| "), piece
    rows = [line for piece in pieces for line in piece.splitlines() if re.match(r"\| \d", line)]
    assert rows == [f"| {i} | {i * i} |" for i in range(10)]
    math = "Before.\n\n$$\na\n\nb\n$$\n\n```\nx\n\ny\n```\n\nAfter."
    for parts in (2, 3, 5):
        for piece in split_markdown(math, parts):
            assert piece.count("$$") % 2 == 0 and piece.count("```") % 2 == 0, piece


def test_split_markdown_cuts_a_list_between_its_items():
    items = "\n".join(f"* item {i}\n  continued" for i in range(6))
    pieces = split_markdown(items, 2)
    assert len(pieces) == 2 and all(p.startswith("* item") for p in pieces)
    assert "\n".join(pieces) == items


@pytest.fixture(scope="module")
def deck_of_masking():
    return export_deck(NOTEBOOKS / "03_masking.ipynb", "../assets")


def test_the_deck_loads_nothing_from_a_cdn_and_uses_the_build_folder(deck_of_masking):
    assert not CDN.findall(deck_of_masking), CDN.findall(deck_of_masking)[:3]
    assert '<script src="../assets/reveal.js/dist/reveal.js"></script>' in deck_of_masking
    assert '<script src="../assets/mathjax/es5/tex-svg-full.js"></script>' in deck_of_masking
    assert "width: 1280" in deck_of_masking and "height: 720" in deck_of_masking


def test_code_in_notes_puts_the_code_in_the_speaker_notes_and_keeps_the_figure_on_the_slide(tmp_path):
    figure = nbformat.v4.new_output("display_data", data={"image/png": "iVBORw0KGgo=", "text/plain": "<Figure>"})
    cell = _cell("code", "draw_the_long_figure_code()", [figure])
    cell.metadata = {"tags": [CODE_IN_NOTES], "slideshow": {"slide_type": "slide"}}
    nb = nbformat.v4.new_notebook(cells=[cell])
    path = tmp_path / "fig.ipynb"
    nbformat.write(nb, path)
    deck = export_deck(path, "assets")
    notes = re.findall(r'<aside class="notes">(.*?)</aside>', deck, flags=re.S)
    assert notes and "draw_the_long_figure_code" in notes[0]
    assert deck.count("draw_the_long_figure_code") == 1, "the code shows in the notes only"
    assert "data:image/png;base64,iVBORw0KGgo=" in deck


def test_a_slide_shows_an_errors_message_not_its_traceback(tmp_path):
    error = nbformat.v4.new_output("error", ename="ValueError", evalue="d_model=10 is not divisible by h=3",
                                   traceback=["Traceback line one", "deep_frame()", "ValueError: d_model=10 ..."])
    cell = _cell("code", "bad()", [error])
    cell.metadata["slideshow"] = {"slide_type": "slide"}
    path = tmp_path / "error.ipynb"
    nbformat.write(nbformat.v4.new_notebook(cells=[cell]), path)
    deck = export_deck(path, "assets")
    assert "d_model=10 is not divisible by h=3" in deck
    assert "deep_frame" not in deck and "Traceback line one" not in deck


def test_a_notebook_without_slide_types_is_refused_with_the_fix(tmp_path):
    path = tmp_path / "bare.ipynb"
    nbformat.write(nbformat.v4.new_notebook(cells=[_cell("markdown", "# Bare")]), path)
    with pytest.raises(CourseError, match=r"no slide type.*annotated\.support\.slide_layout"):
        export_deck(path, "assets")


def test_a_decks_relative_links_point_at_the_files_from_its_folder(tmp_path):
    html = '<a href="../exercises/03_masking.ipynb#Ex">x</a> <a href="https://arxiv.org">p</a> <a href="#top">t</a>'
    out = NOTEBOOKS.parent / "build" / "slides"
    rewritten = links_to_files(html, NOTEBOOKS / "03_masking.ipynb", out)
    assert 'href="../../exercises/03_masking.ipynb#Ex"' in rewritten
    assert 'href="https://arxiv.org"' in rewritten and 'href="#top"' in rewritten


def test_a_damaged_or_missing_asset_tarball_is_named_with_the_fix(tmp_path, monkeypatch):
    monkeypatch.setenv(web_assets.ENV_VAR, str(tmp_path))
    with pytest.raises(web_assets.AssetError, match=r"has no reveal\.js-5\.2\.1\.tgz.*npm pack reveal\.js@5\.2\.1"):
        web_assets.tarball(web_assets.REVEAL)
    (tmp_path / web_assets.MATHJAX.tarball).write_bytes(b"not a tarball")
    with pytest.raises(web_assets.AssetError, match=r"is not mathjax 3\.2\.2: its SHA-256 is .*delete it"):
        web_assets.tarball(web_assets.MATHJAX)


def test_without_network_the_download_error_says_how_to_give_a_local_copy(tmp_path, monkeypatch):
    monkeypatch.delenv(web_assets.ENV_VAR, raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))

    def unreachable(url, dest, sha256, timeout):
        raise DownloadError(f"{url}: network is unreachable")

    monkeypatch.setattr(web_assets, "fetch", unreachable)
    with pytest.raises(web_assets.AssetError, match=r"could not get reveal\.js 5\.2\.1.*set ANNOTATED_WEB_ASSETS"):
        web_assets.tarball(web_assets.REVEAL)


def test_the_command_lines_refuse_bad_arguments_with_exit_code_2(tmp_path):
    for argv in (["-m", "annotated.support.slides", str(tmp_path / "missing.ipynb")],
                 ["-m", "annotated.support.site", "--bogus"],
                 ["-m", "annotated.support.site_check", "--bogus"]):
        run = subprocess.run([sys.executable, *argv], capture_output=True, text=True)
        assert run.returncode == 2, (argv, run.stderr)
        assert "error:" in run.stderr and "Traceback" not in run.stderr, run.stderr


# ---------------------------------------------------------------- the command line: nothing of the user's lost


def slides_main(*argv):
    from annotated.support.slides import main

    try:
        return main(list(argv))
    except SystemExit as exit_:
        return exit_.code


def small_notebook(path, text="# A slide"):
    cell = _cell("markdown", text)
    cell.metadata["slideshow"] = {"slide_type": "slide"}
    nbformat.write(nbformat.v4.new_notebook(cells=[cell]), path)
    return path


def test_a_notebook_that_is_not_json_is_one_line_with_exit_code_2(tmp_path, capsys):
    (tmp_path / "broken.ipynb").write_text('{"cells": [', encoding="utf-8")
    assert slides_main(str(tmp_path / "broken.ipynb"), "--out", str(tmp_path / "decks")) == 2
    err = capsys.readouterr().err
    assert "broken.ipynb is not a valid notebook (NotJSONError" in err and "Traceback" not in err
    assert not (tmp_path / "decks").exists()


def test_decks_are_added_to_the_commands_own_folder_and_a_users_folder_is_refused(tmp_path, capsys):
    one, two = small_notebook(tmp_path / "one.ipynb"), small_notebook(tmp_path / "two.ipynb", "# Two")
    out = tmp_path / "decks"
    assert slides_main(str(one), "--out", str(out)) == 0
    assert slides_main(str(two), "--out", str(out)) == 0
    assert {p.name for p in out.glob("*.slides.html")} == {"one.slides.html", "two.slides.html"}
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "thesis.txt").write_text("mine")
    capsys.readouterr()
    assert slides_main(str(one), "--out", str(mine)) == 2
    assert "was not written by this command" in capsys.readouterr().err
    assert sorted(p.name for p in mine.iterdir()) == ["thesis.txt"]
    assert slides_main(str(one), "--out", str(tmp_path), "--force") == 2  # it holds the notebook it reads
    assert "(the input)" in capsys.readouterr().err and one.is_file()


def test_a_rebuild_replaces_a_link_left_in_its_folder_and_never_writes_through_it(tmp_path):
    one = small_notebook(tmp_path / "one.ipynb")
    out, outside = tmp_path / "decks", tmp_path / "outside"
    assert slides_main(str(one), "--out", str(out)) == 0
    outside.mkdir()
    (outside / "mine.html").write_text("mine")
    (outside / "course.css").write_text("my css")
    (out / "one.slides.html").unlink()
    (out / "one.slides.html").symlink_to(outside / "mine.html")
    (out / "assets" / "course.css").unlink()
    (out / "assets" / "course.css").symlink_to(outside / "course.css")
    assert slides_main(str(one), "--out", str(out)) == 0
    assert (outside / "mine.html").read_text() == "mine" and (outside / "course.css").read_text() == "my css"
    assert not (out / "one.slides.html").is_symlink() and "reveal" in (out / "one.slides.html").read_text()
    assert not (out / "assets" / "course.css").is_symlink()


def test_a_ctrl_c_during_a_build_keeps_the_earlier_decks(tmp_path, capsys, monkeypatch):
    import annotated.support.slides as slides

    one = small_notebook(tmp_path / "one.ipynb")
    out = tmp_path / "decks"
    assert slides_main(str(one), "--out", str(out)) == 0
    before = (out / "one.slides.html").read_text(encoding="utf-8")

    def interrupted(notebook, assets):
        raise KeyboardInterrupt

    monkeypatch.setattr(slides, "export_deck", interrupted)
    assert slides_main(str(one), "--out", str(out)) == 130
    assert "is as it was before" in capsys.readouterr().err
    assert (out / "one.slides.html").read_text(encoding="utf-8") == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["decks", "one.ipynb"]


def test_a_read_only_output_is_one_line_before_any_deck_is_built(tmp_path, capsys, monkeypatch):
    import errno

    import annotated.support.files as files
    import annotated.support.slides as slides

    def read_only(path, *args, **kwargs):
        raise OSError(errno.EROFS, "Read-only file system", str(path))

    monkeypatch.setattr(files.os, "mkdir", read_only)
    monkeypatch.setattr(slides, "export_deck", lambda *a: pytest.fail("a deck was built"))
    assert slides_main(str(small_notebook(tmp_path / "one.ipynb")), "--out", str(tmp_path / "decks")) == 1
    err = capsys.readouterr().err
    assert "Read-only file system; that file system is read-only" in err and err.count("\n") == 1


def test_a_cut_cell_keeps_its_id_on_its_first_part_so_lecture_plans_still_find_it():
    from annotated.support.slide_layout import shorten_tall_cells

    nb = nbformat.v4.new_notebook()
    cell = nbformat.v4.new_markdown_cell("\n\n".join(f"Paragraph {i} " + "word " * 40 for i in range(6)))
    cell.id = "c0ffee01"
    nb.cells = [cell]
    assert shorten_tall_cells(nb, [3_000.0], budget=700.0) == 1
    assert len(nb.cells) > 1 and nb.cells[0].id == "c0ffee01"
    assert len({c.id for c in nb.cells}) == len(nb.cells)
