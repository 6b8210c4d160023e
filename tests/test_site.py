"""The static course site: what ``python -m annotated.support.site`` writes, read as files
(``tests/test_browser.py`` opens it in Chromium)."""

import re
from pathlib import PurePosixPath

import pytest

from annotated.support.course import ROOT
from annotated.support.site import Site, notebooks, site_path

CDN = re.compile(r'<(?:script|link|img)\b[^>]*\b(?:src|href)="(?:https?:)?//', re.I)


def test_repository_files_map_to_pages_that_mirror_the_repository():
    assert site_path(PurePosixPath("README.md")) == PurePosixPath("index.html")
    assert site_path(PurePosixPath("guide/README.md")) == PurePosixPath("guide/index.html")
    assert site_path(PurePosixPath("guide/03_masking.md")) == PurePosixPath("guide/03_masking.html")
    assert site_path(PurePosixPath("notebooks/03_masking.ipynb")) == PurePosixPath("notebooks/03_masking.html")
    assert site_path(PurePosixPath("annotated/masks.py")) == PurePosixPath("annotated/masks.py.html")


def test_links_between_files_become_links_between_pages(tmp_path):
    site = Site(tmp_path)
    html = ('<a href="../exercises/03_masking.ipynb#Exercise-3.1">e</a> <a href="../annotated/masks.py">m</a> '
            '<a href="../README.md">r</a> <a href="https://arxiv.org/abs/1706.03762">p</a> <a href="#top">t</a> '
            '<a href="../no/such/file.ipynb">x</a>')
    out = site.rewrite_links(html, PurePosixPath("notebooks/03_masking.ipynb"))
    assert 'href="../exercises/03_masking.html#Exercise-3.1"' in out
    assert 'href="../annotated/masks.py.html"' in out and PurePosixPath("annotated/masks.py") in site.sources
    assert 'href="../index.html"' in out
    assert 'href="https://arxiv.org/abs/1706.03762"' in out and 'href="#top"' in out
    assert 'href="../no/such/file.ipynb"' in out  # left as it is, for the browser test to report
    # The same file seen from a deck in slides/:
    deck = site.rewrite_links(html, PurePosixPath("notebooks/03_masking.ipynb"), PurePosixPath("slides/x.html"))
    assert 'href="../exercises/03_masking.html#Exercise-3.1"' in deck


def test_code_spans_naming_a_file_of_the_repository_become_links(tmp_path):
    site = Site(tmp_path)
    html = "<td><code>notebooks/03_masking.ipynb</code></td> <code>no/such.py</code> <code>x</code>"
    linked = site.link_code_spans(html, PurePosixPath("guide/03_masking.md"))
    assert '<a href="../notebooks/03_masking.ipynb"><code>notebooks/03_masking.ipynb</code></a>' in linked
    assert "<code>no/such.py</code> <code>x</code>" in linked
    assert site.link_code_spans(linked, PurePosixPath("guide/x.md")) == linked  # not linked twice


def test_every_notebook_solution_exercise_and_guide_has_its_page_and_every_deck_is_built(built_site):
    out = built_site.out
    for nb in notebooks():
        assert (out / nb.folder / f"{nb.path.stem}.html").is_file(), nb.path
    for md in (ROOT / "guide").glob("*.md"):
        assert (out / site_path(PurePosixPath("guide", md.name))).is_file(), md
    course = sorted((ROOT / "notebooks").glob("*.ipynb"))
    assert sorted(p.name for p in (out / "slides").glob("*.slides.html")) == [f"{p.stem}.slides.html" for p in course]
    assert (out / "index.html").is_file() and (out / "benchmarks" / "RESULTS.html").is_file()


def test_no_page_loads_anything_from_another_site(built_site):
    pages = [p for p in built_site.out.rglob("*.html") if "assets" not in p.parts]
    assert len(pages) > 60
    offenders = {p.relative_to(built_site.out).as_posix(): CDN.findall(p.read_text(encoding="utf-8"))[:2]
                 for p in pages if CDN.search(p.read_text(encoding="utf-8"))}
    assert not offenders, offenders


def test_the_index_has_the_course_map_and_the_readmes_tables(built_site):
    index = (built_site.out / "index.html").read_text(encoding="utf-8")
    for nb in sorted((ROOT / "notebooks").glob("*.ipynb")):
        assert f'href="notebooks/{nb.stem}.html"' in index and f'href="slides/{nb.stem}.slides.html"' in index
        assert f'href="lectures/{nb.stem}.html"' in index
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    headers = re.findall(r"^\| *(.+?) *\|.*\n\|[-| :]+\|$", readme, flags=re.M)
    assert len(headers) >= 2, "the README's tables"
    for first_header in headers:
        assert f"<th>{first_header}</th>" in index.replace("<th style=\"text-align:left\">", "<th>"), first_header
    assert index.count("<table>") == len(headers) + 1  # the README's tables and the course map


def test_a_notebook_page_keeps_its_outputs_figures_and_the_course_bar(built_site):
    page = (built_site.out / "notebooks" / "02_scaled_dot_product_attention.html").read_text(encoding="utf-8")
    assert page.count('src="data:image/png;base64,') >= 2
    assert '<nav class="course-nav">' in page and 'href="03_masking.html"' in page
    assert 'href="../guide/02_scaled_dot_product_attention.html"' in page
    assert '<script src="../assets/mathjax/es5/tex-svg-full.js"></script>' in page


def test_a_lecture_deck_of_the_site_links_the_sites_pages_and_the_guide_only_in_its_notes(built_site):
    for deck in sorted((built_site.out / "lectures").glob("*.html")):
        text = deck.read_text(encoding="utf-8")
        shown = re.sub(r'<aside class="notes">.*?</aside>|<script\b.*?</script>', "", text, flags=re.S)
        stem = deck.stem
        assert 'href="../index.html"' in shown and f'href="../notebooks/{stem}.html"' in shown, stem
        assert "guide" not in shown.lower(), stem  # the audience sees no link to the instructor guide
        assert f'href="../guide/{stem}.html"' in text, stem  # the speaker does, in the notes
        targets = {t.split("#")[0] for t in re.findall(r'href="([^"]+)"', text)} - {""}
        assert not [t for t in targets if PurePosixPath(t).suffix in (".md", ".ipynb", ".toml")], (stem, targets)
        assert not [t for t in targets if not re.match(r"[a-z]+:", t) and not (deck.parent / t).exists()], stem


# ---------------------------------------------------------------- nothing of the user's is lost or published


def test_a_link_to_a_built_deck_goes_to_the_sites_deck_not_a_page_of_its_source(tmp_path):
    site = Site(tmp_path)
    guide = PurePosixPath("guide/04_multi_head_attention.md")
    out = site.rewrite_links('<a href="../build/lectures/04_multi_head_attention.html">l</a>', guide)
    assert 'href="../lectures/04_multi_head_attention.html"' in out
    spans = site.link_code_spans("<p><code>build/slides/04_multi_head_attention.slides.html</code></p>", guide)
    assert 'href="../slides/04_multi_head_attention.slides.html"' in spans and ".html.html" not in spans
    assert not site.sources  # no page of a deck's HTML source is made
    pattern = site.link_code_spans("<p><code>build/lectures/NN_name.html</code></p>", PurePosixPath("README.md"))
    assert "<a " not in pattern  # a name pattern, not a deck: no link to a page that does not exist


def test_a_link_to_a_file_git_does_not_own_is_not_published(tmp_path):
    site = Site(tmp_path)
    html = '<a href="../.git/config">c</a> <a href="../annotated/masks.py">m</a>'
    out = site.rewrite_links(html, PurePosixPath("guide/03_masking.md"))
    assert 'href="../.git/config"' in out and not any(".git" in p.parts for p in site.sources)
    assert 'href="../annotated/masks.py.html"' in out


def test_without_git_hidden_and_built_files_are_not_the_courses(tmp_path):
    from annotated.support.course import is_course_file

    assert not is_course_file(PurePosixPath(".git/config"), tmp_path)  # tmp_path: no .git, the fallback rule
    assert not is_course_file(PurePosixPath(".env"), tmp_path)
    assert not is_course_file(PurePosixPath("build/site/index.html"), tmp_path)
    assert is_course_file(PurePosixPath("annotated/masks.py"), tmp_path)
    assert not is_course_file(PurePosixPath(".git/config")) and is_course_file(PurePosixPath("annotated/masks.py"))


def site_main(*argv):
    from annotated.support.site import main

    try:
        return main(list(argv))
    except SystemExit as exit_:
        return exit_.code


def test_the_site_refuses_a_folder_it_did_not_build_before_reading_anything(tmp_path, capsys, monkeypatch):
    import annotated.support.site as site_module

    mine = tmp_path / "mine"
    (mine / "photos").mkdir(parents=True)
    (mine / "thesis.txt").write_text("mine")
    monkeypatch.setattr(site_module, "notebooks", lambda: pytest.fail("the notebooks were read"))
    assert site_main("--out", str(mine)) == 2
    err = capsys.readouterr().err
    assert "was not written by this command" in err and "--force" in err and err.count("\n") == 1
    assert (mine / "thesis.txt").read_text() == "mine" and (mine / "photos").is_dir()
    monkeypatch.chdir(mine)
    assert site_main("--out", ".", "--force") == 2  # the folder one stands in: never, even with --force
    assert "the folder this command runs in" in capsys.readouterr().err and (mine / "thesis.txt").exists()
    assert site_main("--out", str(ROOT), "--force") == 2
    assert (ROOT / "README.md").is_file()


def test_a_ctrl_c_during_a_rebuild_keeps_the_earlier_site(tmp_path, capsys, monkeypatch):
    out = tmp_path / "site"

    def first(self, with_slides):
        (self.out / "index.html").write_text("the complete site")

    def interrupted(self, with_slides):
        (self.out / "index.html").write_text("half")
        raise KeyboardInterrupt

    monkeypatch.setattr(Site, "_build", first)
    assert site_main("--out", str(out), "--no-slides") == 0
    monkeypatch.setattr(Site, "_build", interrupted)
    assert site_main("--out", str(out), "--no-slides") == 130
    assert f"interrupted; {out} is as it was before" in capsys.readouterr().err
    assert (out / "index.html").read_text() == "the complete site"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["site"]
