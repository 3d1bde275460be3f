"""python -m fusegrad.debug_view: one self-contained HTML page of a stages folder, checked
by parsing it (html.parser): what it holds, what it highlights, and that it fetches
nothing. The highlights' oracle is the stage texts themselves."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from html.parser import HTMLParser

import pytest

import fusegrad as fg
from fusegrad.debug_view import main, read_folder, render_html


class Page(HTMLParser):
    """Sections by id, with the classes of their table rows and their text; every
    attribute that could fetch something."""

    def __init__(self):
        super().__init__()
        self.sections: dict[str, dict] = {}
        self.current = None
        self.links: list[tuple[str, str, str]] = []  # (tag, attribute, value)
        self.tags: list[str] = []

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        self.tags.append(tag)
        for name in ("src", "href", "data"):
            if name in attrs:
                self.links.append((tag, name, attrs[name]))
        if tag == "section":
            self.current = self.sections.setdefault(attrs["id"], {"rows": [], "text": []})
        elif tag == "tr" and self.current is not None:
            self.current["rows"].append(attrs.get("class"))

    def handle_endtag(self, tag):
        if tag == "section":
            self.current = None

    def handle_data(self, data):
        if self.current is not None:
            self.current["text"].append(data)


def parse(page: str) -> Page:
    p = Page()
    p.feed(page)
    p.close()
    return p


def keys(text: str) -> set[str]:
    return set(re.findall(r"^(%\d+|kernel %\d+)", text, re.M))


@pytest.fixture
def folder(tmp_path):
    x = fg.randn(8, 4).realize()
    y = x.softmax(1) * 2  # the softmax line
    fg.debug.stages(y, dump_dir=str(tmp_path))
    return tmp_path


def test_the_page_holds_every_stage_and_kernel_and_fetches_nothing(folder):
    index, texts = read_folder(str(folder))
    page = parse(render_html(index, texts))
    listings = [s for s in index["stages"] if s["kind"] != "code"]
    assert {f"s-{s['name']}" for s in listings} | {
        f"k-{k}" for k in range(len(index["kernels"]))
    } == set(page.sections)
    assert {"style", "script"} <= set(page.tags) and "link" not in page.tags
    assert all(tag == "a" and value.startswith("#") for tag, _, value in page.links)
    for s in listings:  # a row per node or kernel, and one per one removed
        rows = page.sections[f"s-{s['name']}"]["rows"]
        assert len(rows) >= len(keys(texts[s["file"]]))


def test_added_and_removed_rows_are_the_stage_texts_differences(folder):
    index, texts = read_folder(str(folder))
    page = parse(render_html(index, texts))
    text = {s["name"]: texts[s["file"]] for s in index["stages"]}
    for before, after in (("autodiff", "expanded"), ("rule_store_for_reuse", "rule_row_fusion")):
        rows = page.sections[f"s-{after}"]["rows"]
        old, new = keys(text[before]), keys(text[after])
        assert rows.count("add") == len(new - old)
        assert rows.count("del") == len(old - new)
    assert rows.count("del") == 2  # row fusion: the softmax's max and sum kernels went
    first = page.sections["s-graph"]["rows"]
    assert set(first) == {"same"}  # nothing to compare the first stage with


def test_each_kernel_shows_its_source_lines_beside_its_code(folder):
    index, texts = read_folder(str(folder))
    page = parse(render_html(index, texts))
    (kernel,) = index["kernels"]
    text = "".join(page.sections["k-0"]["text"])
    assert "# the softmax line" in text
    for s in index["stages"]:
        if s["kind"] == "code":
            assert texts[s["file"]].splitlines()[1].strip() in text


def test_the_command_writes_the_page_and_refuses_a_folder_without_stages(folder, tmp_path, capsys):
    assert main([str(folder)]) == 0
    assert (folder / "index.html").read_text().startswith("<!DOCTYPE html>")
    out = tmp_path / "page.html"
    assert main([str(folder), "-o", str(out)]) == 0 and out.exists()
    empty = tmp_path / "empty"
    empty.mkdir()
    assert main([str(empty)]) == 1
    assert "has no stages.json" in capsys.readouterr().err


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("chromium") is None, reason="no chromium to open the page")
def test_a_headless_browser_draws_the_page(folder, tmp_path):
    subprocess.run([sys.executable, "-m", "fusegrad.debug_view", str(folder)], check=True)
    png = tmp_path / "view.png"
    subprocess.run(
        [
            "chromium",
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            f"--screenshot={png}",
            "--window-size=1400,1000",
            f"file://{folder / 'index.html'}",
        ],
        check=True,
        capture_output=True,
        timeout=120,
    )
    assert png.stat().st_size > 20_000  # a blank page is a few KB
