"""The course as a static site that opens from disk: ``python -m annotated.support.site``.

    python -m annotated.support.site                  # -> build/site/index.html
    python -m annotated.support.site --out /tmp/site

The site mirrors the repository, so a link that works between the files works between the
pages: ``notebooks/*.ipynb``, ``solutions/*.ipynb`` and ``exercises/*.ipynb`` become ``.html``
pages with their outputs (nbconvert, with the course's template: no script from a CDN),
``README.md`` becomes ``index.html`` under a course map, ``guide/*.md`` and
``benchmarks/RESULTS.md`` become pages, every other file of the repository a page links to
becomes a page of its source, and every notebook's slide deck is built into ``slides/``.
MathJax and reveal.js are served from ``assets/`` (:mod:`annotated.support.web_assets`).
``python -m annotated.support.site_check`` opens every page in headless Chromium.

Only the course's own files are published: those git tracks or would track (not ``.git/``, not
what ``.gitignore`` leaves out), so a link to ``../.git/config`` or to a local secret stays a
plain link. The site is built into a temporary folder beside ``--out`` and swapped in at the
end: a Ctrl-C midway leaves the earlier site whole. A folder the command did not build is not
replaced without ``--force`` (see :func:`annotated.support.files.build_folder`).
"""

import argparse
import html
import os
import re
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath


from annotated.support.course import ROOT, course_paths, is_course_file
from annotated.support.errors import run_command
from annotated.support.files import build_folder, check_output_folder, signals_as_interrupt, write_text
from annotated.support.explorer import WidgetToExplorer, build as build_explorer
from annotated.support.lecture import LECTURES, Links, build as build_lectures, is_raw, plans as lecture_plans
from annotated.support.slides import (TEMPLATES, build as build_decks, deck_name, install_assets, map_links,
                                      read_notebook, title_of)
from annotated.support.web_assets import mathjax_html

DEFAULT_OUT = ROOT / "build" / "site"
NOTEBOOK_FOLDERS = ("notebooks", "solutions", "exercises")
# Markdown files of the repository that are pages of the site, and where they go.
MARKDOWN_PAGES = {"README.md": "index.html", "guide/README.md": "guide/index.html"}
CODE_SPAN = re.compile(r"<code>([\w./-]+)</code>")
# A deck as the commands build it in the repository; the site holds it at the same path without build/.
BUILT_DECK = re.compile(r"^build/((?:slides|lectures)/[\w.-]+\.html)$")
BUILT_DECK_LINK = re.compile(r'(href|src)="((?:\.\./)*)build/((?:slides|lectures)/)')


@dataclass(frozen=True)
class Notebook:
    folder: str  # notebooks, solutions or exercises
    path: Path
    title: str


def github_slug(heading_html: str) -> str:
    """The anchor GitHub gives a Markdown heading (lower case, punctuation dropped, spaces to
    hyphens), so that ``README.md#in-the-classroom-...`` works on GitHub and on the site alike."""
    text = html.unescape(re.sub(r"<[^>]+>", "", heading_html)).strip().lower()
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def _heading_with_anchor(match: re.Match) -> str:
    level, inner = match.groups()
    inner = re.sub(r'<a class="anchor-link".*?</a>', "", inner, flags=re.S)  # nbconvert's own, with its id
    slug = github_slug(inner)
    return f'<h{level} id="{slug}">{inner}<a class="anchor-link" href="#{slug}">¶</a></h{level}>'


def notebooks() -> list[Notebook]:
    return [Notebook(folder, path, title_of(path)) for folder in NOTEBOOK_FOLDERS
            for path in sorted((ROOT / folder).glob("*.ipynb"))]


def site_path(repo_path: PurePosixPath) -> PurePosixPath:
    """Where the page of a repository file lies in the site."""
    text = repo_path.as_posix()
    if text in MARKDOWN_PAGES:
        return PurePosixPath(MARKDOWN_PAGES[text])
    if repo_path.suffix in (".ipynb", ".md"):
        return repo_path.with_suffix(".html")
    return PurePosixPath(text + ".html")  # a source file, shown as a page


class Site:
    """Builds the pages; remembers the source files that pages link to, to write them last."""

    def __init__(self, out: Path):
        self.out = out
        self.sources: set[PurePosixPath] = set()
        self.course = [nb for nb in notebooks() if nb.folder == "notebooks"]

    # ------------------------------------------------------------ links

    def rewrite_links(self, text: str, repo_file: PurePosixPath, page: PurePosixPath | None = None) -> str:
        """Point every relative link of a page made from ``repo_file`` (at ``page``, by default
        the file's own page) at the page of its target. A link to no file of the repository (the
        bar, the decks) is left as it is; if it is broken, the site check tells."""
        here = (page or site_path(repo_file)).parent.as_posix()
        # A link from a page to ../build/lectures/X.html goes to the site's lectures/X.html (a page lies as
        # deep in the site as its file in the repository), never to a page of the deck's HTML source.
        text = BUILT_DECK_LINK.sub(r'\1="\2\3', text)

        def url_for(file: Path) -> str | None:
            if not file.is_relative_to(ROOT):
                return None
            repo_target = PurePosixPath(file.relative_to(ROOT).as_posix())
            if not is_course_file(repo_target):
                return None  # not the course's (.git/config, a local secret): never published
            if repo_target.suffix not in (".ipynb", ".md"):
                self.sources.add(repo_target)
            return os.path.relpath(site_path(repo_target).as_posix(), here)

        return map_links(text, ROOT / repo_file.parent, url_for)

    def link_code_spans(self, text: str, repo_file: PurePosixPath) -> str:
        """``<code>notebooks/03_masking.ipynb</code>`` -> a link to that file's page, for every code
        span that names a file of the repository by its path from the top (as the README does)."""
        def one(match: re.Match) -> str:
            name = match.group(1)
            built = BUILT_DECK.match(name)
            stem = PurePosixPath(name).name.removesuffix(".html").removesuffix(".slides")
            if built and (ROOT / "notebooks" / f"{stem}.ipynb").is_file():  # the site's own copy of that deck
                return f'<a href="{os.path.relpath(built.group(1), repo_file.parent.as_posix())}">{match.group(0)}</a>'
            if "/" not in name or not (ROOT / name).is_file():
                return match.group(0)
            return f'<a href="{os.path.relpath(name, repo_file.parent.as_posix())}">{match.group(0)}</a>'
        # Not inside a link already: split the text at <a ...>...</a> and link the rest.
        parts = re.split(r"(<a\b.*?</a>|<pre\b.*?</pre>)", text, flags=re.S)
        return "".join(part if i % 2 else CODE_SPAN.sub(one, part) for i, part in enumerate(parts))

    def relative(self, page: PurePosixPath, target: str) -> str:
        return os.path.relpath(target, page.parent.as_posix())

    def nav(self, page: PurePosixPath, notebook: Notebook | None = None) -> str:
        """The bar above every page: the course, and around a notebook its neighbours and its
        exercises, solutions, guide and deck."""
        links = [("Course", "index.html"), ("Instructor guide", "guide/index.html"),
                 ("Results", "benchmarks/RESULTS.html"), ("Attention explorer", "explorer/index.html")]
        if notebook is not None:
            stem = notebook.path.stem
            names = [nb.path.stem for nb in self.course]
            if stem in names:
                i = names.index(stem)
                if i > 0:
                    links.append((f"← {self.course[i - 1].title}", f"notebooks/{names[i - 1]}.html"))
                if i + 1 < len(names):
                    links.append((f"{self.course[i + 1].title} →", f"notebooks/{names[i + 1]}.html"))
            for label, folder in (("Notebook", "notebooks"), ("Exercises", "exercises"), ("Solutions", "solutions")):
                if folder != notebook.folder and (ROOT / folder / notebook.path.name).is_file():
                    links.append((label, f"{folder}/{stem}.html"))
            if (ROOT / "guide" / f"{stem}.md").is_file():
                links.append(("Guide", f"guide/{stem}.html"))
            if (LECTURES / f"{stem}.toml").is_file():
                links.append(("Lecture", f"lectures/{stem}.html"))
            links.append(("Every cell as slides", f"slides/{deck_name(notebook.path)}"))
        items = "".join(f'<a href="{html.escape(self.relative(page, target))}">{html.escape(label)}</a>'
                        for label, target in links)
        return f'<nav class="course-nav">{items}</nav>'

    # ------------------------------------------------------------ pages

    def write(self, page: PurePosixPath, text: str) -> None:
        path = self.out / page
        path.parent.mkdir(parents=True, exist_ok=True)
        write_text(path, text)

    def notebook_page(self, notebook: Notebook) -> None:
        from nbconvert import HTMLExporter

        repo_file = PurePosixPath(notebook.folder, notebook.path.name)
        page = site_path(repo_file)
        assets = self.relative(page, "assets")
        exporter = HTMLExporter(template_name="course_page", extra_template_basedirs=[str(TEMPLATES)])
        # A widget (notebook 12's interactive view) shows nothing on a static page: a link to the explorer instead.
        exporter.register_preprocessor(WidgetToExplorer(self.relative(page, "explorer/index.html")), enabled=True)
        resources = {"metadata": {"name": notebook.title}, "course_css": f"{assets}/course.css",
                     "course_mathjax": mathjax_html(assets), "course_nav": self.nav(page, notebook)}
        body, _ = exporter.from_notebook_node(read_notebook(notebook.path), resources=resources)
        self.write(page, self.rewrite_links(body, repo_file))

    def text_page(self, page: PurePosixPath, title: str, body_html: str) -> None:
        """A page of prose (Markdown rendered, or source code) in the site's frame."""
        assets = self.relative(page, "assets")
        self.write(page, f"""<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1.0">
<title>{html.escape(title)}</title>
<link rel="stylesheet" href="{assets}/course.css">
<link rel="stylesheet" href="{assets}/pygments.css">
{mathjax_html(assets)}
</head>
<body class="course-text">
{self.nav(page)}
<main>
{body_html}
</main>
</body>
</html>
""")

    def markdown_page(self, repo_file: PurePosixPath, before: str = "") -> None:
        from nbconvert.filters.markdown_mistune import markdown2html_mistune

        text = (ROOT / repo_file).read_text(encoding="utf-8")
        body = markdown2html_mistune(text)
        body = re.sub(r"<h([1-6])\b[^>]*>(.*?)</h\1>", _heading_with_anchor, body, flags=re.S)
        if before:  # after the title and the opening paragraphs, before the first section
            at = body.find("<h2")
            body = body[:at] + before + body[at:] if at >= 0 else before + body
        body = self.rewrite_links(self.link_code_spans(body, repo_file), repo_file)
        title = next((line.lstrip("# ").strip() for line in text.splitlines() if line.startswith("#")), repo_file.name)
        self.text_page(site_path(repo_file), title, body)

    def source_page(self, repo_file: PurePosixPath) -> None:
        from pygments import highlight
        from pygments.formatters import HtmlFormatter
        from pygments.lexers import TextLexer, get_lexer_for_filename
        from pygments.util import ClassNotFound

        text = (ROOT / repo_file).read_text(encoding="utf-8", errors="replace")
        try:
            lexer = get_lexer_for_filename(repo_file.name)
        except ClassNotFound:
            lexer = TextLexer()
        code = highlight(text, lexer, HtmlFormatter(linenos="table", cssclass="highlight"))
        self.text_page(site_path(repo_file), repo_file.as_posix(),
                       f"<h1><code>{html.escape(repo_file.as_posix())}</code></h1>\n{code}")

    def course_map(self) -> str:
        """The index's table: every notebook with its page, deck, exercises, solutions and guide."""
        rows = []
        for nb in self.course:
            stem = nb.path.stem
            cells = [f'<a href="notebooks/{stem}.html">{html.escape(nb.title)}</a>',
                     f'<a href="lectures/{stem}.html">lecture</a>' if (LECTURES / f"{stem}.toml").is_file() else "",
                     f'<a href="slides/{deck_name(nb.path)}">every cell</a>']
            for folder in ("exercises", "solutions"):
                cells.append(f'<a href="{folder}/{stem}.html">{folder}</a>'
                             if (ROOT / folder / nb.path.name).is_file() else "")
            cells.append(f'<a href="guide/{stem}.html">guide</a>' if (ROOT / "guide" / f"{stem}.md").is_file() else "")
            rows.append("<tr>" + "".join(f"<td>{c}</td>" for c in cells) + "</tr>")
        return ('<h2 id="course-map">Course map</h2>\n<table>\n<thead><tr><th>notebook</th><th>lecture</th><th>slides</th>'
                '<th>exercises</th><th>solutions</th><th>instructor guide</th></tr></thead>\n<tbody>\n'
                + "\n".join(rows) + "\n</tbody>\n</table>\n")

    def lecture_links(self, plan, out: Path, next_plan) -> Links:
        """Where a lecture deck of the site points: on its slides the index, its notebook's page, its full
        deck and the next lecture; in its speaker notes the guide's page (the audience sees no guide link)."""
        stem = plan.name
        guide = ROOT / "guide" / f"{stem}.md"
        return Links(course="../index.html", guide=f"../guide/{stem}.html" if guide.is_file() else None,
                     notebook=f"../notebooks/{stem}.html", full_deck=f"../slides/{deck_name(plan.notebook)}",
                     next_deck=f"{next_plan.name}.html" if next_plan else None,
                     next_title=title_of(next_plan.notebook) if next_plan else None)

    def build(self, with_slides: bool = True, force: bool = False) -> list[Path]:
        """Write the site into a temporary folder beside ``self.out`` and swap it in at the end; a
        folder this command did not build is replaced only with ``force``. Returns the pages."""
        final = self.out
        with build_folder(final, "python -m annotated.support.site", force=force, protected=course_paths()) as tmp:
            self.out = tmp
            try:
                self._build(with_slides)
            finally:
                self.out = final
        return sorted(self.out.rglob("*.html"))

    def _build(self, with_slides: bool) -> None:
        from pygments.formatters import HtmlFormatter

        install_assets(self.out / "assets")
        write_text(self.out / "assets" / "pygments.css", HtmlFormatter().get_style_defs(".highlight"))
        for notebook in notebooks():
            self.notebook_page(notebook)
        build_explorer(self.out / "explorer", links={"Course": "../index.html",
                                                    "Notebook 12": "../notebooks/12_what_the_heads_learned.html"})
        self.markdown_page(PurePosixPath("README.md"), before=self.course_map())
        for md in sorted((ROOT / "guide").glob("*.md")):
            self.markdown_page(PurePosixPath("guide", md.name))
        self.markdown_page(PurePosixPath("benchmarks", "RESULTS.md"))
        for repo_file in sorted(self.sources):  # the files the pages above link to
            self.source_page(repo_file)
        if with_slides:
            # A deck's links go to the site's pages; one that would still open a raw file (Markdown, a notebook's
            # JSON, a plan) is left as its text.
            build_lectures(lecture_plans(), self.out / "lectures", self.out / "assets", links=self.lecture_links,
                           rewrite=lambda text, plan, _: self.rewrite_links(
                               text, PurePosixPath("notebooks", plan.notebook.name),
                               PurePosixPath("lectures", f"{plan.name}.html")),
                           keep_link=lambda path: not is_raw(path))
            build_decks([nb.path for nb in self.course], self.out / "slides", self.out / "assets",
                        links=lambda text, notebook, _: self.rewrite_links(
                            text, PurePosixPath("notebooks", notebook.name), PurePosixPath("slides", deck_name(notebook))))
            for repo_file in sorted(self.sources):  # the source files that only a deck links to
                if not (self.out / site_path(repo_file)).is_file():
                    self.source_page(repo_file)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m annotated.support.site",
                                     description="Build the course site (notebooks, solutions, exercises, guide, "
                                                 "decks) as static pages that open from disk.")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help=f"folder of the site (default: {DEFAULT_OUT})")
    parser.add_argument("--no-slides", action="store_true", help="skip the slide decks")
    parser.add_argument("--force", action="store_true",
                        help="replace --out even if this command did not build it (everything in it is lost)")
    args = parser.parse_args(argv)

    def body() -> int:
        check_output_folder(args.out, args.force, protected=course_paths())  # before the notebooks are read
        try:
            # SIGTERM (timeout, a cancelled CI job) and SIGHUP stop the build as Ctrl-C does: the temporary
            # folder is removed and the earlier site kept.
            with signals_as_interrupt():
                pages = Site(args.out).build(with_slides=not args.no_slides, force=args.force)
        except KeyboardInterrupt:
            print(f"{parser.prog}: interrupted; {args.out} is as it was before", file=sys.stderr)
            return 130
        print(f"{len(pages)} pages in {args.out}; open {args.out / 'index.html'} in a browser (no network needed)")
        return 0

    return run_command(body, parser.prog)


if __name__ == "__main__":
    sys.exit(main())
