"""Anchors as the site renderers make them, each style checked against the renderer's own code.

``mkdocs`` against Python-Markdown's ``toc.slugify``/``toc.unique`` (the ``Markdown`` test
dependency), ``github`` against github-slugger 2.0.0 (vendored under ``tests/fixtures``, ISC,
run with ``node``), ``vitepress`` against the cases of ``@mdit-vue/shared``'s own tests. The
pages are the real-page fixtures, and the full real trees when ``../shared`` is beside the
clone.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import unicodedata
from pathlib import Path

import pytest

from rag_pg.config.citation import check_template, citation_url
from rag_pg.source.chunk import is_mdx
from rag_pg.source.frontmatter import split_front_matter
from rag_pg.source.markdown.outline import Heading, outline
from rag_pg.source.markdown.sites import detect_style
from rag_pg.source.markdown.slugs import (
    assign_anchors,
    check_style,
    github_slug,
    mkdocs_slug,
    vitepress_slug,
)

from .heading_texts import heading_texts

TESTS = Path(__file__).resolve().parent
FIXTURES = TESTS / "fixtures"
SHARED = TESTS.parent.parent / "shared" / "data" / "real-md"
TREES = [FIXTURES / "real-md"] + ([SHARED] if SHARED.is_dir() else [])


def pages(tree: Path) -> list[tuple[str, str]]:
    found = []
    for path in sorted(tree.rglob("*")):
        if path.suffix.lower() in (".md", ".mdx") and path.is_file():
            _, body, _ = split_front_matter(path.read_text(encoding="utf-8"))
            found.append((str(path.relative_to(tree)), body))
    return found


def tree_id(tree: Path) -> str:
    return "shared" if tree == SHARED else "fixtures"


# --- mkdocs: Python-Markdown's own functions -------------------------------------------


@pytest.mark.parametrize("tree", TREES, ids=tree_id)
def test_mkdocs_anchors_equal_python_markdown_on_every_heading(tree: Path) -> None:
    toc = pytest.importorskip("markdown.extensions.toc", reason="the Markdown test dependency")
    checked = 0
    for path, body in pages(tree):
        headings = heading_texts(body, is_mdx(path))
        used = {h.explicit for h in headings if h.explicit}
        expected = [
            h.explicit or toc.unique(toc.slugify(h.text, "-"), used) for h in headings
        ]
        assert assign_anchors([(h.explicit, h.text) for h in headings], "mkdocs") == expected, path
        for heading in headings:
            assert mkdocs_slug(heading.text) == toc.slugify(heading.text, "-")
        checked += len(headings)
    assert checked > 20


@pytest.mark.parametrize(
    ("text", "slug"),
    [("Élévation du thème !", "elevation-du-theme"), ("  a -- b  ", "a-b"), ("日本語", ""),
     ("C++ & C#", "c-c"), ("snake_case", "snake_case")],
)
def test_mkdocs_slug_table(text: str, slug: str) -> None:
    toc = pytest.importorskip("markdown.extensions.toc", reason="the Markdown test dependency")
    assert mkdocs_slug(text) == slug == toc.slugify(text, "-")


def test_mkdocs_repeats_take_underscore_numbers_and_avoid_explicit_ids() -> None:
    headings = [(None, "A"), (None, "A"), ("a_2", "X"), (None, "A"), (None, "!!!")]
    assert assign_anchors(headings, "mkdocs") == ["a", "a_1", "a_2", "a_3", "_1"]


# --- github: github-slugger itself ------------------------------------------------------


def node_slugs(pages_texts: list[list[str]]) -> list[list[str]]:
    node = shutil.which("node")
    if node is None:
        pytest.skip("node is not installed: github-slugger (JavaScript) is the reference")
    result = subprocess.run(
        [node, str(FIXTURES / "github_slugs.mjs")],
        input=json.dumps(pages_texts),
        capture_output=True,
        text=True,
        check=True,
    )
    slugs: list[list[str]] = json.loads(result.stdout)
    return slugs


@pytest.mark.parametrize("tree", TREES, ids=tree_id)
def test_github_anchors_equal_github_slugger_on_every_heading(tree: Path) -> None:
    per_page = [(path, heading_texts(body, is_mdx(path))) for path, body in pages(tree)]
    computed = [[h.text for h in headings if not h.explicit] for _, headings in per_page]
    expected = node_slugs(computed)
    checked = 0
    for (path, headings), slugs in zip(per_page, expected, strict=True):
        ours = assign_anchors([(h.explicit, h.text) for h in headings], "github")
        computed_ours = [a for a, h in zip(ours, headings, strict=True) if not h.explicit]
        assert computed_ours == slugs, path
        checked += len(slugs)
    assert checked > 20


def test_github_kept_characters_equal_the_package_on_every_code_point() -> None:
    """The generated table against the package's regex, over all of Unicode."""
    node = shutil.which("node")
    if node is None:
        pytest.skip("node is not installed: github-slugger (JavaScript) is the reference")
    script = (
        "import {slug} from './github-slugger/index.js';const k=[];"
        "for(let c=0;c<=0x10FFFF;c++){if(c>=0xD800&&c<=0xDFFF)continue;"
        "const s=String.fromCodePoint(c);if(slug('a'+s+'a',true)==='a'+s+'a')k.push(c)}"
        "process.stdout.write(JSON.stringify(k))"
    )
    helper = FIXTURES / "kept_code_points.mjs"
    helper.write_text(script, encoding="utf-8")
    try:
        result = subprocess.run([node, str(helper)], capture_output=True, text=True, check=True)
    finally:
        helper.unlink()
    kept = set(json.loads(result.stdout))
    ours = {
        code
        for code in range(0x110000)
        if not 0xD800 <= code <= 0xDFFF and github_slug("a" + chr(code) + "a") == "a" + chr(code).lower() + "a"
        and chr(code).lower() == chr(code)
    }
    lower_kept = {code for code in kept if chr(code).lower() == chr(code) and chr(code) != " "}
    assert ours == lower_kept


@pytest.mark.parametrize(
    ("text", "slug"),
    [
        ("Élévation du thème !", "élévation-du-thème-"),
        ("  padded  ", "--padded--"),
        ("C++ & C#", "c--c"),
        ("Version 2.0 (beta)", "version-20-beta"),
        ("emoji 🎉 party", "emoji--party"),
        ("Ⅻ Ⓐ ① ²", "ⅻ-ⓐ--"),  # letter numbers and circled letters kept, other numbers not
    ],
)
def test_github_slug_table(text: str, slug: str) -> None:
    assert github_slug(text) == slug


def test_github_repeats_follow_the_slugger_and_ignore_explicit_ids() -> None:
    headings = [(None, "A"), (None, "A"), (None, "A-1"), ("a-2", "X"), (None, "A")]
    assert assign_anchors(headings, "github") == ["a", "a-1", "a-1-1", "a-2", "a-2"]


# --- vitepress: @mdit-vue/shared's slugify, under markdown-it-anchor --------------------

VITEPRESS_CASES = [  # the cases of @mdit-vue/shared's slugify tests
    ("Привет", "привет"),
    ("Лед üäöß", "лед-uaoß"),
    ("hangul 가", "hangul-가"),
    ("ع", "ع"),
    ("ǆℍΩ", "dzhω"),
    ("ｶi⁹", "カi9"),
    ("¼", "_1⁄4"),
    ("ǆℍΩｶi⁹¼", "dzhωカi91⁄4"),
    ("ᴎᴑᴅᴇȷʂ", "ᴎᴑᴅᴇȷʂ"),
    ("hambúrguer", "hamburguer"),
    ("hŒllœ", "hœllœ"),
    ("Fußball", "fußball"),
    ("ABCDEFGHIJKLMNOPQRSTUVWXYZé", "abcdefghijklmnopqrstuvwxyze"),
    ("Déclaration de props", "declaration-de-props"),
    ("2. Étape -- finale ?", "_2-etape-finale"),
]


@pytest.mark.parametrize(("text", "slug"), VITEPRESS_CASES)
def test_vitepress_slug_matches_mdit_vue(text: str, slug: str) -> None:
    # Decomposed as JavaScript's normalize('NFKD') leaves them (Hangul into its jamo).
    assert vitepress_slug(text) == unicodedata.normalize("NFKD", slug)


def test_vitepress_repeats_count_explicit_ids_too() -> None:
    headings = [(None, "A"), ("a-1", "X"), (None, "A"), (None, "A")]
    assert assign_anchors(headings, "vitepress") == ["a", "a-1", "a-2", "a-3"]


def test_vitepress_text_counts_image_alt_but_not_html() -> None:
    (heading,) = heading_texts('## Logo ![Vue](v.png) <Badge text="3.5+" />')
    assert heading.vitepress.strip() == "Logo Vue"
    assert heading.text.strip() == "Logo"


def test_unknown_style_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown anchor style"):
        check_style("hugo")


# --- explicit ids -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("body", "title", "anchor"),
    [
        ("## Déclaration de props {#props-declaration}", "Déclaration de props", "props-declaration"),
        ("## Title { #custom-id .cls data-x=\"1\" }", "Title", "custom-id"),
        ("## Title {: #colon-id }", "Title", "colon-id"),
        ("## Installation {/*installation*/}", "Installation", "installation"),
        ("## Title { data-toc-label=\"T\" }", "Title", "title"),
        ('<a id="before"></a>\n\n## Title', "Title", "before"),
        ('<a name="inside"></a>\n## Title', "Title", "inside"),
        ('## <a id="in-heading"></a> Title', "Title", "in-heading"),
        ("## Title \\{#not-an-id}", "Title {#not-an-id}", "title-not-an-id"),
        ("Setext title {#setext}\n---", "Setext title", "setext"),
    ],
)
def test_explicit_ids_win(body: str, title: str, anchor: str) -> None:
    (heading,) = [item for item in outline(body).items if isinstance(item, Heading)]
    assert (heading.title, heading.anchor) == (title, anchor)


@pytest.mark.parametrize(
    ("body", "title"),
    [
        ("## \\<script setup>", "<script setup>"),
        ("## Utiliser `<script setup>`", "Utiliser <script setup>"),
        ("## **Gras** et *italique* et ~~barré~~", "Gras et italique et barré"),
        ('## Texte <sup class="vt-badge" data-text="3.5+" />', "Texte"),
        ("## Lien [vers](x.md) &amp; entité", "Lien vers & entité"),
        ("Deux\nlignes\n===", "Deux lignes"),
    ],
)
def test_titles_are_plain_text(body: str, title: str) -> None:
    (heading,) = [item for item in outline(body).items if isinstance(item, Heading)]
    assert heading.title == title


@pytest.mark.parametrize(
    "body",
    [
        "<div>\n## not a section\n</div>",
        "```\n## not a section\n```",
        "    ## indented code",
        "~~~\n# nor this",
    ],
)
def test_headings_inside_html_blocks_and_code_are_not_sections(body: str) -> None:
    assert not [item for item in outline(body).items if isinstance(item, Heading)]


# --- citation links -----------------------------------------------------------------------


def test_citation_url_fills_the_template() -> None:
    template = check_template("https://fr.vuejs.org/{path_noext}.html#{anchor}")
    assert citation_url(template, "guide/props.md", "props-declaration") == (
        "https://fr.vuejs.org/guide/props.html#props-declaration"
    )
    assert citation_url(template, "guide/élan.md", "élévation-du-thème-") == (
        "https://fr.vuejs.org/guide/%C3%A9lan.html#%C3%A9l%C3%A9vation-du-th%C3%A8me-"
    )
    assert citation_url(template, "index.md", "") == "https://fr.vuejs.org/index.html"
    assert citation_url("https://x/{path}", "a b.md", "s") == "https://x/a%20b.md"


@pytest.mark.parametrize("template", ["https://x/{pages}#{anchor}", "https://x/{path", "{0}"])
def test_citation_template_errors_name_the_field(template: str) -> None:
    with pytest.raises(ValueError, match="citation url template"):
        check_template(template)


# --- the site's style, from its configuration -----------------------------------------------


@pytest.mark.parametrize(
    ("files", "root", "style"),
    [
        (["mkdocs.yml", "docs/a.md"], "docs", "mkdocs"),
        (["site/mkdocs.yaml"], "site", "mkdocs"),
        ([".vitepress/config.ts", "guide/a.md"], ".", "vitepress"),
        (["docs/.vitepress/config.mts", "docs/a.md"], "docs", "vitepress"),
        (["astro.config.mjs", "src/content/docs/a.mdx"], "src/content/docs", "github"),
        (["a.md"], ".", "github"),
    ],
)
def test_detect_style_from_the_sites_configuration(
    tmp_path: Path, files: list[str], root: str, style: str
) -> None:
    project = tmp_path / "project"
    for name in files:
        (project / name).parent.mkdir(parents=True, exist_ok=True)
        (project / name).write_text("x", encoding="utf-8")
    assert detect_style(project / root) == style


def test_detect_style_on_the_real_fixture_trees() -> None:
    assert detect_style(FIXTURES / "real-md" / "astro-docs-fr") == "github"
    if SHARED.is_dir():  # its mkdocs.yml travels with the full tree only
        assert detect_style(SHARED / "mkdocs-material-docs") == "mkdocs"


@pytest.mark.parametrize("identifier", [
    "vue.js-privacy-policy", "api-v2.0", "a:b", "x.y.z", "ä.ö", "a/b", "step_1.2",
])
def test_an_explicit_id_is_kept_whole_as_the_renderers_keep_it(identifier):
    """``{#vue.js-privacy-policy}`` is that whole id for markdown-it-attrs (VitePress) and for
    Python-Markdown's attr_list: the anchor is the id, dots, colons and slashes included."""
    import markdown

    body = f"# Page\n\n## Politique de confidentialité {{#{identifier}}}\n\nTexte.\n"
    rendered = markdown.Markdown(extensions=["attr_list"]).convert(body)
    assert f'id="{identifier}"' in rendered  # the renderer's own reading
    headings = [item for item in outline(body).items if isinstance(item, Heading)]
    assert [h.anchor for h in headings if h.level == 2] == [identifier]
    assert [h.title for h in headings if h.level == 2] == ["Politique de confidentialité"]


def test_a_class_after_a_dotted_id_stays_a_class():
    headings = [item for item in outline("## Titre {#x.y .note}\n\nTexte.\n").items
                if isinstance(item, Heading)]
    assert [(h.anchor, h.title) for h in headings] == [("x.y", "Titre")]
