"""The Results page (docs/results.md) is written by docs/build_results.py from the results docs: up to
date, one entry per results page in the site's Results section, each with its headline table (and
plot) copied from its doc; every image on the site opens at full size (docs/_mkdocs/hooks.py)."""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _load(name: str, path: Path):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def builder():
    return _load("build_results", ROOT / "docs" / "build_results.py")


def test_the_results_index_is_up_to_date(builder):
    assert builder.build(full=False) == (ROOT / "docs" / "results.md").read_text(encoding="utf-8"), \
        "docs/results.md is out of date: run python docs/build_results.py"


def test_every_results_page_has_an_entry(builder):
    nav = (ROOT / "mkdocs.yml").read_text()
    section = nav[nav.index("  - Results:"):].split("\n  - ", 1)[0]
    pages = set(re.findall(r": (\S+\.md)$", section, re.M)) - {"results.md", "rl_zoo.md"}  # zoo: a guide
    assert pages and pages == {r.doc for r in builder.RESULTS}, pages ^ {r.doc for r in builder.RESULTS}


def test_each_entry_copies_its_docs_table_and_plot(builder):
    page = builder.build(full=True)
    for r in builder.RESULTS:
        doc = (ROOT / "docs" / r.doc).read_text()
        assert f"]({r.doc})" in page, r.doc
        if r.header is not None:
            first = next(line for line in doc.splitlines() if line.startswith(r.header))
            assert first in page, r.doc
        if r.image is not None:
            assert (ROOT / "docs" / r.doc).parent.joinpath(r.image).resolve().is_file(), r.image


def test_a_table_or_plot_gone_from_its_doc_is_an_error(builder, monkeypatch):
    import dataclasses

    bad = dataclasses.replace(builder.RESULTS[0], header="| no such column |")
    with pytest.raises(ValueError, match=r"docs/rl_benchmark.md: no table whose header starts with '\| no such"):
        builder.section(bad)
    bad = dataclasses.replace(builder.RESULTS[0], image="gone.png")
    with pytest.raises(ValueError, match=r"docs/rl_benchmark.md: no image 'gone.png'"):
        builder.section(bad)


def test_a_long_table_is_cut_saying_so_and_tables_of_one_header_merge(builder):
    import dataclasses

    families = next(r for r in builder.RESULTS if r.doc == "critic_label_families.md")
    merged = builder.section(dataclasses.replace(families, max_rows=5))
    assert "(the first 5 of its 12 rows)" in merged
    assert merged.count("| task | label family |") == 1 and merged.count("| PointMaze_UMaze-v3 |") >= 4


def test_every_image_links_to_itself_at_full_size():
    hooks = _load("mkdocs_hooks", ROOT / "docs" / "_mkdocs" / "hooks.py")

    class Page:  # FAKE mkdocs page: only the source path is read
        class file:
            src_uri = "latency.md"

    md = "![a plot](latency.png)\n\n[![linked](x.png)](x.png)\n\n```\n![in code](y.png)\n```\n"
    out = hooks.on_page_markdown(md, Page, None, None)
    assert "[![a plot](latency.png)](latency.png)" in out
    assert out.count("[![linked](x.png)](x.png)") == 1 and "[[!" not in out
    assert "```\n![in code](y.png)\n```" in out


def test_the_sites_results_page_is_rendered_from_the_docs_as_they_are(builder):
    hooks = _load("mkdocs_hooks", ROOT / "docs" / "_mkdocs" / "hooks.py")

    class Page:  # FAKE mkdocs page: the source path and the front matter are used
        meta: dict = {}

        class file:
            src_uri = "results.md"

    out = hooks.on_page_markdown((ROOT / "docs" / "results.md").read_text(), Page, None, None)
    assert Page.meta["hide"] == ["toc"]
    assert out.count("\n## ") == len(builder.RESULTS) and "| task, budget | HER |" in out
    assert "[![learned vs spec potential, paired by seed](_repo/benchmarks/rl/results/learned_vs_spec.png)]" in out
