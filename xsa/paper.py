"""
The paper's export: the executed 05_paper notebook -> paper.html, paper.md and paper.pdf.

paper.html is self-contained and loads nothing from the network: figures are embedded, and every
formula ($...$ and $$...$$ in Markdown, cells and outputs alike, which nbconvert leaves as TeX for
MathJax) is converted to MathML at build time (latex2mathml), which browsers draw natively, so it
reads the same offline and in print. Its
template (xsa/templates/paper) keeps headings with what follows them and wraps wide tables in
print. paper.pdf is Chromium's print of paper.html (or pandoc + XeLaTeX where only they exist);
paper.md keeps the TeX, which Markdown viewers render.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

from xsa.records import atomic_write_bytes, atomic_write_text

TEMPLATES = Path(__file__).resolve().parent / "templates"
# $$...$$ (display) first, then $...$ (inline, no space just inside the dollars, as TeX writers do)
_DISPLAY = re.compile(r"\$\$(.+?)\$\$", re.S)
_INLINE = re.compile(r"(?<![\\$\w])\$(?!\s)([^$\n]+?)(?<!\s)\$(?![\w$])")


def to_mathml(text: str) -> str:
    """Every TeX formula of a text as MathML; the TeX may be HTML-escaped (as nbconvert leaves it
    for MathJax), so it is unescaped before conversion."""
    from html import unescape

    from latex2mathml.converter import convert
    text = _DISPLAY.sub(lambda m: convert(unescape(m.group(1)).strip(), display="block"), text)
    return _INLINE.sub(lambda m: convert(unescape(m.group(1))), text)


def html_with_mathml(html: str) -> str:
    """The exported page with the TeX of its body (never its head: styles) as MathML."""
    head, sep, body = html.partition("<body")
    return head + sep + to_mathml(body)


def pdf_engine() -> str | None:
    if shutil.which("chromium"):
        return "chromium"
    if shutil.which("pandoc") and shutil.which("xelatex"):
        return "xelatex"
    return None


def export_paper(executed: Path, paper_dir: Path) -> dict:
    """paper.html (self-contained: figures embedded, math as MathML), paper.md (figures in
    paper_files/, math as TeX), and paper.pdf where an engine exists."""
    import nbformat
    from nbconvert import HTMLExporter, MarkdownExporter

    nb = nbformat.read(str(executed), as_version=4)
    paper_dir.mkdir(parents=True, exist_ok=True)
    opts = dict(exclude_input=True, exclude_input_prompt=True, exclude_output_prompt=True)
    html, _ = HTMLExporter(embed_images=True, template_name="paper", extra_template_basedirs=[str(TEMPLATES)],
                           **opts).from_notebook_node(nb)
    atomic_write_text(paper_dir / "paper.html", html_with_mathml(html))
    md, res = MarkdownExporter(**opts).from_notebook_node(nb, resources={"output_files_dir": "paper_files"})
    atomic_write_text(paper_dir / "paper.md", md)
    written = set()
    for name, data in res.get("outputs", {}).items():  # figures referenced by paper.md
        atomic_write_bytes(paper_dir / name, data)
        written.add((paper_dir / name).resolve())
    for old in (paper_dir / "paper_files").glob("*"):  # figures of an earlier build that this one no longer has
        if old.is_file() and old.resolve() not in written:
            old.unlink()
    out = {"html": paper_dir / "paper.html", "md": paper_dir / "paper.md", "pdf": None, "pdf_engine": None}
    engine = pdf_engine()
    if engine == "chromium":
        pdf = paper_dir / "paper.pdf"
        cmd = ["chromium", "--headless", "--no-sandbox", "--disable-gpu", "--no-pdf-header-footer",
               f"--print-to-pdf={pdf}", (paper_dir / "paper.html").resolve().as_uri()]
        ok = subprocess.run(cmd, capture_output=True, timeout=300).returncode == 0 and pdf.exists()
        out.update(pdf=pdf if ok else None, pdf_engine="chromium (headless print)" if ok else None)
    elif engine == "xelatex":
        from nbconvert import PDFExporter
        data, _ = PDFExporter(**opts).from_notebook_node(nb)
        atomic_write_bytes(paper_dir / "paper.pdf", data)
        out.update(pdf=paper_dir / "paper.pdf", pdf_engine="pandoc + xelatex")
    return out
