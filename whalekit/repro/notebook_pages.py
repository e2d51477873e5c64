"""The executed analysis notebooks as pages a reader of the repository sees without Jupyter:
Markdown with their figures beside them (nbconvert's Markdown exporter), under docs/notebooks/,
rewritten by `make reproduce` for the repository's figures preset. The `.ipynb` sources under
notebooks/ stay output-free.

Why this shape: the same records must give the same bytes wherever the repository is checked
out, so the checkout's own path is cut from the outputs (a notebook prints where it wrote a
figure), and the trace viewer's HTML (megabytes of trajectories) is left to the notebook itself.

    render_pages(sorted(Path("runs/cpu/notebooks").glob("0*.ipynb")), Path("docs/notebooks"))
"""

from __future__ import annotations

import re
import shutil
from collections.abc import Sequence
from pathlib import Path

import nbformat
from nbconvert import MarkdownExporter

from whalekit.infra.runs import atomic_write

PAGES = Path("docs") / "notebooks"
LARGEST_HTML = 20_000  # characters: a larger HTML output (the trace viewer) is not copied into a page
VIEWER_NOTE = "(an interactive output: open the notebook in JupyterLab, `make lab`, to browse it)"


def _trimmed(notebook: nbformat.NotebookNode, checkout: Path) -> nbformat.NotebookNode:
    """The notebook without the checkout's own path in its cells and outputs, and without
    outputs too large for a page."""
    root = str(checkout.resolve()) + "/"
    for cell in notebook.cells:
        cell["source"] = "".join(cell["source"]).replace(root, "")  # papermill's parameters cell names paths
        for output in cell.get("outputs", []):
            if "text" in output:
                output["text"] = "".join(output["text"]).replace(root, "")
            data = output.get("data", {})
            for kind in ("text/plain", "text/markdown", "text/html"):
                if kind in data:
                    data[kind] = "".join(data[kind]).replace(root, "")
            if len("".join(data.get("text/html", ""))) > LARGEST_HTML:
                data.pop("text/html")
                data["text/plain"] = VIEWER_NOTE
    return notebook


def render_pages(notebooks: Sequence[Path], out: Path = PAGES, checkout: Path | None = None) -> list[Path]:
    """One `<notebook>.md` per executed notebook under `out`, its images in `<notebook>_files/`;
    returns the pages written. A notebook's old images go first, so none outlives its page."""
    checkout = checkout or Path.cwd()
    written = []
    out.mkdir(parents=True, exist_ok=True)
    for path in notebooks:
        notebook = _trimmed(nbformat.read(path, as_version=4), checkout)
        files = f"{path.stem}_files"
        body, resources = MarkdownExporter().from_notebook_node(notebook, resources={"output_files_dir": files})
        shutil.rmtree(out / files, ignore_errors=True)
        for name, data in sorted(resources.get("outputs", {}).items()):
            target = out / name
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(data)
        page = out / f"{path.stem}.md"
        header = (f"<!-- rendered from the executed notebooks/{path.name} by `make reproduce`; "
                  "do not edit: edit the notebook -->\n\n")
        atomic_write(page, header + re.sub(r"\n{3,}", "\n\n", body).strip() + "\n")
        written.append(page)
    return written
