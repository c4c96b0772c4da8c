"""
The paper's text: a Jinja2 template written as a paper (paper/text/<study>.md.j2, or
paper/text/study.md.j2 for a study without its own), with every number placed by key from the
estimates files and every verdict written through a checked form:

    XSA {{ claim("robust.primary", "lowers") }} final val bpb by {{ e.robust.primary | est }}.

`claim` fails the build, naming the sentence, when the estimate no longer supports the word; a
figure or table is placed with `figure(name, caption)` / `table(name, caption)` and referred to with
`ref(name)` ("Figure 2", "Table A3"), numbered in the order the paper shows them; one shown and
never referred to, or referred to and never shown, fails the build too.

    blocks = render(study, built, estimates)   # [("markdown", text) | ("figure", name)]
"""

from __future__ import annotations

import math
import re
from pathlib import Path

import jinja2

from xsa.base.records import REPO_ROOT
from xsa.books.estimates import Book, Estimate
from xsa.books.published import PUBLISHED
from xsa.books.verdicts import whole

TEXT = REPO_ROOT / "paper" / "text"
_MARK = "\x00STALE{}\x00"
_FIGURE = re.compile(r"^@@figure (\S+)@@$", re.M)


class StaleClaim(Exception):
    """A verdict word of the text that its estimate no longer supports (the sentence is named)."""


# -----------------------------------------------------------------------------
# Numbers as text

def _finite(x) -> bool:
    return x is not None and not (isinstance(x, float) and not math.isfinite(x))


def pct(x, signed: bool = True) -> str:
    """A fraction as a percentage: two decimals below 10%, two significant digits above ('+270%'), and one
    significant digit below 0.005% ('-0.003%'), so a bound near zero keeps its side of it."""
    if not _finite(x):
        return "n/a"
    v = 100 * x
    sign = "+" if signed else ""
    if abs(v) >= 10:
        digits = max(0, 1 - int(math.floor(math.log10(abs(v)))))
        return f"{float(f'{v:.2g}'):{sign}.{digits}f}%" if digits else f"{float(f'{v:.2g}'):{sign}.0f}%"
    if v != 0 and abs(v) < 0.005:  # "-0.00%" would hide which side of zero a bound is on: one digit more each
        return f"{v:{sign}.{-int(math.floor(math.log10(abs(v))))}f}%"
    return f"{v:{sign}.2f}%"


def pct_interval(lo: float, hi: float) -> str:
    """'[-0.78%, -0.43%]'; an interval with one end below 10% and one above keeps two decimals at both
    ('[-11.04%, +8.04%]', not '[-11%, +8.04%]'), so its ends read at one precision."""
    if min(abs(lo), abs(hi)) < 0.1 <= max(abs(lo), abs(hi)):
        return f"[{100 * lo:+.2f}%, {100 * hi:+.2f}%]"
    return f"[{pct(lo)}, {pct(hi)}]"


def pct_ci(e: Estimate) -> str:
    return "(no interval)" if not e.ci.defined else pct_interval(e.lo, e.hi)


def est(e: Estimate, n: bool = True, holm: bool = False) -> str:
    """'-0.61% [-0.78%, -0.43%], n = 20' of a relative estimate (a slope of one in percentage points,
    absolute ones at 4 decimals); with holm,
    its Holm-adjusted p after n. No brackets around n, so a sentence puts it in its own."""
    if e is None or e.value is None:
        return f"n/a ({e.reason})" if e is not None and e.reason else "n/a"
    if e.unit == "relative":
        text = f"{pct(e.value)} {pct_ci(e)}"
    elif e.unit == "relative per doubling":  # a slope of a relative effect: in percentage points
        text = f"{100 * e.value:+.2f}" + (f" [{100 * e.lo:+.2f}, {100 * e.hi:+.2f}]" if e.ci.defined else "")
        text += " percentage points"
    else:
        text = f"{e.value:+.4f}" + (f" [{e.lo:+.4f}, {e.hi:+.4f}]" if e.ci.defined else "")
    return text + (f", n = {e.n}" if n else "") + (f", Holm p {pvalue(e.p_holm)}" if holm else "")


def size(e: Estimate, n: bool = False, holm: bool = False) -> str:
    """The magnitude of a relative estimate, unsigned, for "lowers by ...": '0.61% [0.43%, 0.78%]' (with n:
    '..., n = 20'); the claim beside it says which way, and fails the build when that no longer holds."""
    lo, hi = sorted((abs(e.lo), abs(e.hi))) if e.ci.defined else (None, None)
    return (f"{pct(abs(e.value), False)}" + (f" [{pct(lo, False)}, {pct(hi, False)}]" if lo is not None else "")
            + (f", n = {e.n}" if n else "") + (f", Holm p {pvalue(e.p_holm)}" if holm else ""))


def pvalue(x) -> str:
    return "n/a" if not _finite(x) else ("< 0.001" if x < 0.001 else f"{x:.3f}")


def num(x, digits: int = 2) -> str:
    if not _finite(x):
        return "n/a"
    return f"{x:,.0f}" if digits == 0 else f"{x:,.{digits}f}"


def millions(x) -> str:
    return f"{x / 1e6:.1f} M"


def value(e: Estimate):
    return e.value


# -----------------------------------------------------------------------------
# Verdicts

VERDICTS = {
    "lowers": lambda e, x: e.decided and e.value < 0,
    "raises": lambda e, x: e.decided and e.value > 0,
    "does not measurably change": lambda e, x: e.n >= 2 and not e.decided,
    "depends on": lambda e, x: e.decided,
    "does not measurably depend on": lambda e, x: e.n >= 2 and not e.decided,
    "grows with": lambda e, x: e.decided and e.value < 0,  # a more negative effect per doubling: a larger gain
    "shrinks with": lambda e, x: e.decided and e.value > 0,
    "excludes": lambda e, x: e.ci.defined and e.ci.excludes(x),
    # the whole interval lies beyond x, on x's side of zero: a larger effect than x, not only another one
    "exceeds": lambda e, x: e.ci.defined and (e.hi < x if x < 0 else e.lo > x),
    "includes": lambda e, x: e.ci.defined and not e.ci.excludes(x),
    "supported": lambda e, x: e.decided and (e.value < 0) == (x == "lower"),
    "contradicted": lambda e, x: e.decided and (e.value < 0) != (x == "lower"),
    "not decided": lambda e, x: e.n >= 2 and not e.decided,
    "all of": lambda e, x: e.value == x,  # a count: every one of x
}


def verdict_of(e: Estimate, expect: str = "lower") -> str:
    """The seed-paper verdict an estimate supports: supported, contradicted or not decided."""
    return next(w for w in ("supported", "contradicted", "not decided", "cannot decide")
                if w == "cannot decide" or VERDICTS[w](e, expect))


class Paper:
    """One rendering of a study's text: the estimates, the figures and tables it may place, and what
    the text did with them (claims that failed, figures and tables shown and referred to)."""

    def __init__(self, book: Book, figures: dict, tables, numbering: dict | None = None):
        self.book, self.figures, self.tables = book, figures, tables
        self.numbering = numbering or {}
        self.shown, self.referred, self.stale = [], set(), []
        self.appendix_from = None  # how many figures and tables the main text shows

    def appendix(self) -> str:
        """Where the appendix starts: what is shown after it is numbered A1, A2, ..."""
        self.appendix_from = len(self.shown)
        return '\n<div class="appendix-start"></div>\n'

    def claim(self, key, word: str, against=None, say: str | None = None) -> str:
        """`word` (or `say`) if the estimate at `key` (or every one of a list of keys) supports it against
        `against` (or every one of a list of values: a compound statement such as "excludes zero and the
        seed paper's effect" is checked whole); else a mark that fails the build."""
        if word not in VERDICTS:
            raise ValueError(f"claim({key!r}, {word!r}): the word is not one of {', '.join(VERDICTS)}")
        failed = []
        for k in [key] if isinstance(key, str) else key:
            e = self.book.get(k)
            for a in against if isinstance(against, (list, tuple)) else [against]:
                x = e.seed_paper if a == "seed paper" else a
                if e.value is None or not VERDICTS[word](e, x):
                    failed.append(f"{k} = {est(e)} against {a}" + (f", Holm p {pvalue(e.p_holm)}"
                                                                    if e.p_holm is not None else ""))
        if not failed:
            return say or word
        self.stale.append(f"claim({key!r}, {word!r}) but {'; '.join(failed)}")
        return _MARK.format(len(self.stale) - 1)

    def figure(self, name: str, caption: str) -> str:
        if not self.figures.get(name):
            raise KeyError(f"figure({name!r}): the build drew no such figure (no records?)")
        self.shown.append(f"fig:{name}")  # its caption its own block: the figure and caption move as one
        return f"\n@@figure {name}@@\n@@block@@\n**{self.number('fig:' + name)}.** {caption}\n@@block@@\n"

    def table(self, name: str, caption: str, **kw) -> str:
        self.shown.append(f"tab:{name}")  # its own block: a table with its caption stays on one page
        return f"\n@@block@@\n**{self.number('tab:' + name)}.** {caption}\n\n{self.tables(name, **kw)}\n@@block@@\n"

    def number(self, name: str) -> str:
        """ "Figure 2", "Table A3" of "fig:gap", "tab:runs"."""
        return self.numbering.get(name, "Figure ?" if name.startswith("fig:") else "Table ?")

    def ref(self, name: str) -> str:
        if not name.startswith(("fig:", "tab:")):
            raise ValueError(f"ref({name!r}): say fig:<name> or tab:<name>")
        self.referred.add(name)
        return self.number(name)


def numbering(shown: list, figures: dict, appendix_from: int | None) -> dict:
    """Figure and table numbers in the order shown; those after the appendix starts are A1, A2, ..."""
    out, counts = {}, {"Figure": 0, "Table": 0, "A-Figure": 0, "A-Table": 0}
    for i, name in enumerate(shown):
        kind = "Figure" if name.startswith("fig:") else "Table"
        appendix = appendix_from is not None and i >= appendix_from
        counts[("A-" if appendix else "") + kind] += 1
        out[name] = f"{kind} {'A' if appendix else ''}{counts[('A-' if appendix else '') + kind]}"
    return out


def template_for(study_name: str) -> Path:
    own = TEXT / f"{study_name}.md.j2"
    return own if own.exists() else TEXT / "study.md.j2"


def _render_once(source: str, paper: Paper, context: dict) -> str:
    env = jinja2.Environment(undefined=jinja2.StrictUndefined, keep_trailing_newline=True, autoescape=False)
    env.filters.update(pct=pct, est=est, size=size, p=pvalue, num=num, millions=millions, value=value,
                       ci=pct_ci)
    env.globals.update(claim=paper.claim, figure=paper.figure, table=paper.table, ref=paper.ref,
                       verdict_of=verdict_of, appendix=paper.appendix, pub=PUBLISHED, whole=whole)
    return env.from_string(source).render(**context)


def _sentence(text: str, mark: str) -> str:
    """The sentence of `text` that holds `mark`, marks removed."""
    i = text.index(mark)
    start = max(text.rfind(". ", 0, i), text.rfind("\n", 0, i)) + 1
    end = min(j for j in (text.find(". ", i), text.find("\n", i), len(text)) if j >= 0)
    return re.sub("\x00STALE\\d+\x00", "[?]", text[start:end + 1]).strip()


def render(source: str, book: Book, figures: dict, tables, context: dict) -> list[tuple[str, str]]:
    """The template's text as blocks: ("markdown", text) and ("figure", name). Two passes: the first
    finds the order in which figures and tables are shown, the second numbers them. Raises StaleClaim
    naming each sentence whose verdict its estimate no longer supports, and ValueError for a figure or
    table shown and never referred to (or referred to and never shown)."""
    first = Paper(book, figures, tables)
    _render_once(source, first, {**context, "e": book})
    paper = Paper(book, figures, tables, numbering(first.shown, figures, first.appendix_from))
    text = _render_once(source, paper, {**context, "e": book})
    if paper.stale:
        raise StaleClaim("the text says what its estimates no longer support:\n" + "\n".join(
            f"  - \"{_sentence(text, _MARK.format(i))}\": {why}" for i, why in enumerate(paper.stale)))
    unreferred = [paper.number(n) + f" ({n})" for n in paper.shown if n not in paper.referred]
    unshown = sorted(paper.referred - set(paper.shown))
    if unreferred or unshown:
        raise ValueError("the text " + "; ".join(
            ([f"never refers to {', '.join(unreferred)}"] if unreferred else [])
            + ([f"refers to {', '.join(unshown)}, which it never shows"] if unshown else [])))
    blocks, last = [], 0
    for m in _FIGURE.finditer(text):
        blocks += [("markdown", text[last:m.start()]), ("figure", m.group(1))]
        last = m.end()
    blocks.append(("markdown", text[last:]))
    blocks = [(k, part) for k, v in blocks for part in ([v] if k == "figure" else v.split("@@block@@"))]
    return [(k, v) for k, v in blocks if k == "figure" or v.strip()]
