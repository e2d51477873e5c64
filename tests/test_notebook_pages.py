"""The executed notebooks as pages: Markdown with their images beside them, the checkout's own
path cut from every output (the same records give the same bytes in any clone), and no output too
large for a page (the trace viewer's HTML)."""

from __future__ import annotations

import base64

import nbformat
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook, new_output

from whalekit.repro.notebook_pages import VIEWER_NOTE, render_pages

PNG = base64.b64decode("iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8DwHwAFBQIAX8jx0gAA"
                       "AABJRU5ErkJggg==")  # one pixel


def _executed(path, checkout):
    notebook = new_notebook(cells=[
        new_markdown_cell("# Main comparison"),
        new_code_cell(f'# Parameters\nfigures = "{checkout}/figures"'),
        new_code_cell("save()", outputs=[
            new_output("stream", name="stdout", text=f"wrote {checkout}/figures/fig2.png\n"),
            new_output("display_data", data={"image/png": base64.b64encode(PNG).decode(), "text/plain": "<Figure>"}),
            new_output("display_data", data={"text/html": "<div>" + "x" * 30_000 + "</div>", "text/plain": "<HTML>"}),
        ])])
    nbformat.write(notebook, path)


def test_a_page_holds_the_text_the_figures_and_no_checkout_path(tmp_path):
    checkout = tmp_path / "clone"
    checkout.mkdir()
    _executed(tmp_path / "03_main_comparison.ipynb", checkout)
    (page,) = render_pages([tmp_path / "03_main_comparison.ipynb"], tmp_path / "pages", checkout)
    text = page.read_text()
    assert "# Main comparison" in text and "wrote figures/fig2.png" in text and str(checkout) not in text
    assert 'figures = "figures"' in text  # papermill's parameters, relative to the checkout
    images = sorted((tmp_path / "pages" / "03_main_comparison_files").iterdir())
    assert [p.read_bytes() for p in images] == [PNG] and f"]({images[0].parent.name}/{images[0].name})" in text
    assert "x" * 100 not in text and VIEWER_NOTE in text


def test_the_same_notebook_in_another_clone_gives_the_same_page(tmp_path):
    pages = []
    for clone in ("a", "b"):
        checkout = tmp_path / clone
        checkout.mkdir()
        _executed(checkout / "nb.ipynb", checkout)
        (page,) = render_pages([checkout / "nb.ipynb"], checkout / "pages", checkout)
        pages.append(page.read_bytes())
    assert pages[0] == pages[1]
