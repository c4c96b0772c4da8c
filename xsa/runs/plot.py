"""
The figure style and its saver: matplotlib + seaborn, drawn outside pyplot, saved byte-stable.

`new_figure` makes a figure with no backend and no global state; `save_figure` writes it as PNG and
SVG without dates or software stamps (and SVG ids from a fixed salt), so the same records give the
same bytes. Every figure of the package (the report's, the diagnostics', the throughput
benchmark's) goes through these two.
"""

from __future__ import annotations

import io
from pathlib import Path

from xsa.base.records import atomic_write_bytes

# Print sizes: the paper shows every figure at its own size (DPI pixels per inch; see show_figure),
# so a font of 8 pt here is 8 pt on the page. FULL is the text width of the PDF (A4, 12 mm margins).
DPI = 150
FULL, HALF = 6.9, 3.4
FONT = dict(size=8, title=8.5, tick=7.5, legend=7.5)  # nothing under 7 pt


def new_figure(*, nrows=1, ncols=1, figsize, **subplot_kw):
    """(fig, axes[nrows][ncols]): a figure outside pyplot (nothing left open, thread-safe)."""
    import matplotlib  # lazy: optional dependency
    import seaborn as sns  # lazy: optional dependency
    from matplotlib.figure import Figure  # lazy: optional dependency
    sns.set_theme(style="whitegrid", context="paper")
    matplotlib.rcParams.update({
        "svg.hashsalt": "xsa",  # fixed SVG ids: identical figures give identical bytes
        "font.size": FONT["size"], "axes.titlesize": FONT["title"], "axes.labelsize": FONT["size"],
        "xtick.labelsize": FONT["tick"], "ytick.labelsize": FONT["tick"], "legend.fontsize": FONT["legend"],
        "legend.title_fontsize": FONT["legend"]})
    fig = Figure(figsize=figsize, layout="constrained")
    return fig, fig.subplots(nrows, ncols, squeeze=False, **subplot_kw)


def _render(fig, ext: str, meta: dict, dpi: int) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format=ext, dpi=dpi, bbox_inches="tight", metadata=meta)
    return buf.getvalue()


def save_figure(fig, out_dir, name: str, dpi: int = DPI):
    """Write OUT_DIR/NAME.png and NAME.svg and return the PNG path; with out_dir None, return the
    PNG as an image a notebook displays."""
    png = _render(fig, "png", {"Software": None}, dpi)
    if out_dir is None:
        from IPython.display import Image  # lazy: optional dependency
        return Image(data=png)
    out_dir = Path(out_dir)
    atomic_write_bytes(out_dir / f"{name}.png", png)
    atomic_write_bytes(out_dir / f"{name}.svg", _render(fig, "svg", {"Date": None, "Creator": None}, dpi))
    return out_dir / f"{name}.png"
