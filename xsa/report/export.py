"""
The paper's export: the executed 05_paper notebook -> paper.html, paper.md and paper.pdf.

paper.html is self-contained and loads nothing from the network: figures are embedded, and every
formula ($...$ and $$...$$ in Markdown, cells and outputs alike, which nbconvert leaves as TeX for
MathJax) is converted to MathML at build time (latex2mathml), which browsers draw natively, so it
reads the same offline and in print. Its
template (xsa/templates/paper) keeps headings with what follows them and wraps wide tables in
print. paper.pdf is Chromium's print of paper.html (or pandoc + XeLaTeX where only they exist);
paper.md keeps the TeX, which Markdown viewers render.

Every output is a function of the records alone, so a rebuild that changes nothing leaves
`git status` clean: executed notebooks are stored without run times and with repository-relative
paths (`stable_notebook`), papermill's injected cell gets a fixed id, and the PDF's dates are the
date of the newest run record (or $SOURCE_DATE_EPOCH), not the time of the build.
"""

from __future__ import annotations

import copy
import datetime
import json
import os
import re
import shutil
import subprocess
from html import unescape
from pathlib import Path

from xsa.base.records import REPO_ROOT, atomic_write_bytes, atomic_write_text
from xsa.studies.registry import get_study

TEMPLATES = Path(__file__).resolve().parents[1] / "templates"  # xsa/templates
# $$...$$ (display) first, then $...$ (inline, no space just inside the dollars, as TeX writers do)
_DISPLAY = re.compile(r"\$\$(.+?)\$\$", re.S)
_INLINE = re.compile(r"(?<![\\$\w])\$(?!\s)([^$\n]+?)(?<!\s)\$(?![\w$])")


def to_mathml(text: str) -> str:
    """Every TeX formula of a text as MathML; the TeX may be HTML-escaped (as nbconvert leaves it
    for MathJax), so it is unescaped before conversion."""

    from latex2mathml.converter import convert  # lazy: optional dependency
    text = _DISPLAY.sub(lambda m: convert(unescape(m.group(1)).strip(), display="block"), text)
    return _INLINE.sub(lambda m: convert(unescape(m.group(1))), text)


def html_with_mathml(html: str) -> str:
    """The exported page with the TeX of its body (never its head: styles) as MathML."""
    head, sep, body = html.partition("<body")
    return head + sep + to_mathml(body)


# a table and its caption ("**Table N.** ...", the paragraph just above it) as one block: the print then never
# ends a page with a caption whose table begins on the next (Chromium does not keep a paragraph's break-after:
# avoid where the table's first rows do not fit); a long table flows on, its caption with its first rows
_TABLE_CAPTION = re.compile(r"(<p><strong>Table [A-Z]?\d+\.</strong>.*?</p>\s*<table>.*?</table>)", re.S)
_CAPTION_PARAGRAPH = re.compile(r"<p>(<strong>Table .*?)</p>\s*<table>", re.S)
LONG_TABLE = 7  # rows: a table this long may flow across pages (a shorter one never breaks: see the style)


def tables_with_captions(html: str) -> str:
    """The page with each table and its caption paragraph wrapped in one <div class="paper-table">, marked
    `long` where the table has at least LONG_TABLE rows. A long table takes its caption in as its <caption>:
    the print breaks a table's rows but never between its caption and its first row (a paragraph's
    break-after: avoid, Chromium drops where the rows do not fit)."""
    def wrap(m):
        block = m.group(1)
        if long := block.count("<tr") - 1 >= LONG_TABLE:
            block = _CAPTION_PARAGRAPH.sub(r"<table>\n<caption>\1</caption>", block, count=1)
        return f'<div class="paper-table{" long" if long else ""}">{block}</div>'
    return _TABLE_CAPTION.sub(wrap, html)


# what papermill and the kernel stamp on a run that says nothing about its results
_VOLATILE_PAPERMILL = ("start_time", "end_time", "duration")


def stable_notebook(nb, root: Path = REPO_ROOT) -> str:
    """An executed notebook as text that depends on its inputs and outputs only: no execution
    timestamps or durations, the injected-parameters cell with a fixed id (papermill draws one at
    random), and paths under `root` written relative to it."""
    import nbformat  # lazy: start-up time
    for cell in nb.cells:
        cell.metadata.pop("execution", None)
        for key in _VOLATILE_PAPERMILL:
            cell.metadata.get("papermill", {}).pop(key, None)
        if "injected-parameters" in cell.metadata.get("tags", []):
            cell["id"] = "injected-parameters"
    for key in _VOLATILE_PAPERMILL:
        nb.metadata.get("papermill", {}).pop(key, None)
    text = nbformat.writes(nb)
    prefix = json.dumps(str(Path(root).resolve()))[1:-1]
    return text.replace(prefix + "/", "").replace(prefix, ".")


def source_date(results_dir: Path | None, run_ids=None) -> datetime.datetime:
    """The paper's date: $SOURCE_DATE_EPOCH, else the newest provenance date of the runs the paper
    reads (run_ids; every run folder where None), else a fixed date (never the time of the build).
    Runs of other studies (an ignored smoke run, say) never move it."""
    if os.environ.get("SOURCE_DATE_EPOCH", "").isdigit():
        return datetime.datetime.fromtimestamp(int(os.environ["SOURCE_DATE_EPOCH"]), datetime.timezone.utc)
    dates = []
    folders = ([Path(results_dir) / "runs" / r for r in run_ids] if run_ids is not None
               else sorted(Path(results_dir).glob("runs/*"))) if results_dir else []
    for prov in (f / "provenance.json" for f in folders):
        try:
            dates.append(datetime.datetime.fromisoformat(json.loads(prov.read_text())["date"]))
        except (KeyError, ValueError, OSError):
            continue
    return max(dates) if dates else datetime.datetime(2026, 1, 1, tzinfo=datetime.timezone.utc)


_PDF_DATE = re.compile(rb"/(CreationDate|ModDate) \(D:\d{14}[^)]*\)")


def date_pdf(data: bytes, when: datetime.datetime) -> bytes:
    """The PDF with its creation and modification dates set to `when` (same length, so the
    cross-reference offsets stay valid)."""
    stamp = when.astimezone(datetime.timezone.utc).strftime("D:%Y%m%d%H%M%S+00'00'").encode()

    def sub(m):
        new = b"/" + m.group(1) + b" (" + stamp + b")"
        return new if len(new) == len(m.group(0)) else m.group(0)
    return _PDF_DATE.sub(sub, data)


_PDF_NODE = re.compile(rb"\(node(\d{8})\)")


def renumber_nodes(data: bytes) -> bytes:
    """The PDF with chromium's tagged-structure ids (node00000180, ...) renumbered from 0 in order of
    first appearance: chromium's counter starts at a number that varies between runs, the order does
    not (same length, so the cross-reference offsets stay valid)."""
    seen: dict[bytes, int] = {}
    return _PDF_NODE.sub(lambda m: b"(node%08d)" % seen.setdefault(m.group(1), len(seen)), data)


def _results_dir(nb) -> Path | None:
    """The results folder the paper notebook read (its papermill parameter), absolute."""
    value = (nb.metadata.get("papermill", {}).get("parameters") or {}).get("results_dir")
    return (REPO_ROOT / value).resolve() if value else REPO_ROOT / "results"


def paper_title(nb) -> str:
    """The paper's title: the first level-1 heading the executed notebook shows."""
    for cell in nb.cells:
        for out in cell.get("outputs", []):
            text = out.get("data", {}).get("text/markdown", "")
            m = re.search(r"^# (.+)$", text if isinstance(text, str) else "".join(text), re.M)
            if m:
                return m.group(1).strip()
    return "XSA under Muon"


def paper_runs(study) -> list[str]:
    """The run ids a study's paper reads: its own, and those of the study its robustness table carries."""
    ids = [r.run_id for r in study.runs]
    return ids + ([r.run_id for r in get_study(study.robustness).runs] if study.robustness else [])


def pdf_engine() -> str | None:
    if shutil.which("chromium"):
        return "chromium"
    if shutil.which("pandoc") and shutil.which("xelatex"):
        return "xelatex"
    return None


def _text(value) -> str:
    return "".join(value) if isinstance(value, list) else value or ""


def figures_with_captions(nb):
    """A copy of the notebook for the HTML in which each figure and the caption shown after it
    ("**Figure N.** ...") are one output, an HTML <figure> (the image embedded, its displayed width kept):
    the print then moves a figure with its caption, as one float, to the next page where it does not fit."""
    import nbformat  # lazy: start-up time
    from nbconvert.filters import markdown2html  # lazy: start-up time
    nb = copy.deepcopy(nb)
    for cell in nb.cells:
        outs, merged, i = cell.get("outputs", []), [], 0
        while i < len(outs):
            data = outs[i].get("data", {})
            caption = _text(outs[i + 1].get("data", {}).get("text/markdown")) if i + 1 < len(outs) else ""
            if "image/png" in data and caption.lstrip().startswith("**Figure"):
                width = outs[i].get("metadata", {}).get("image/png", {}).get("width")
                img = (f'<img src="data:image/png;base64,{_text(data["image/png"]).strip()}"'
                       + (f' width="{width}"' if width else "") + ' alt="">')
                html = f'<figure class="paper-figure">{img}<figcaption>{markdown2html(caption)}</figcaption></figure>'
                merged.append(nbformat.v4.new_output("display_data", data={"text/html": html}))
                i += 2
            else:
                merged.append(outs[i])
                i += 1
        if outs:
            cell.outputs = merged
    return nb


def export_paper(executed: Path, paper_dir: Path, run_ids=None) -> dict:
    """paper.html (self-contained: figures embedded, math as MathML), paper.md (figures in
    paper_files/, math as TeX), and paper.pdf where an engine exists; where none does, an older
    paper.pdf is removed (it would not be this paper). run_ids: the runs the paper reads (its date)."""
    import nbformat  # lazy: start-up time
    from nbconvert import HTMLExporter, MarkdownExporter  # lazy: start-up time

    nb = nbformat.read(str(executed), as_version=4)
    paper_dir.mkdir(parents=True, exist_ok=True)
    opts = dict(exclude_input=True, exclude_input_prompt=True, exclude_output_prompt=True)
    meta = {"metadata": {"name": paper_title(nb)}}  # the HTML's <title>, which the PDF keeps as its title
    html, _ = HTMLExporter(embed_images=True, template_name="paper", extra_template_basedirs=[str(TEMPLATES)],
                           **opts).from_notebook_node(figures_with_captions(nb), resources=meta)
    atomic_write_text(paper_dir / "paper.html", html_with_mathml(tables_with_captions(html)))
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
        if ok:
            atomic_write_bytes(pdf, date_pdf(renumber_nodes(pdf.read_bytes()), source_date(_results_dir(nb), run_ids)))
        out.update(pdf=pdf if ok else None, pdf_engine="chromium (headless print)" if ok else None)
    elif engine == "xelatex":
        from nbconvert import PDFExporter  # lazy: start-up time
        data, _ = PDFExporter(**opts).from_notebook_node(nb)
        atomic_write_bytes(paper_dir / "paper.pdf", data)
        out.update(pdf=paper_dir / "paper.pdf", pdf_engine="pandoc + xelatex")
    if out["pdf"] is None and not tracked(paper_dir / "paper.pdf"):
        (paper_dir / "paper.pdf").unlink(missing_ok=True)  # never a PDF older than the HTML beside it
    out["kept"] = out["pdf"] is None and (paper_dir / "paper.pdf").exists()  # git's copy, never deleted here
    return out


def tracked(path: Path) -> bool:
    """Whether git tracks the file (a command never deletes a committed file)."""
    try:
        r = subprocess.run(["git", "ls-files", "--error-unmatch", path.name], cwd=path.parent, capture_output=True)
    except OSError:  # no git, or no such folder
        return False
    return r.returncode == 0
