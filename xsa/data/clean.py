"""Text cleaning: turn the markup found in registry packages into plain running text.

Each function takes a string and returns a string. They are rough on purpose: the goal is text a
small language model can learn English from, not a faithful rendering of the markup.
"""

from __future__ import annotations

import html
import re

_BLANK = re.compile(r"\n[ \t]*\n")
_UNDERLINE = re.compile(r"^\s*([=\-~^*#+`'\".:_])\1{2,}\s*$")  # reST / asciidoc heading rules
_BULLET = re.compile(r"^\s*([-*+•]|\d+[.)]|[a-z][.)])\s")


def tidy(text: str) -> str:
    """Common last step: unify newlines, drop trailing spaces, at most one blank line in a row."""
    text = text.replace("\r\n", "\n").replace("\r", "\n").replace("\x00", "")
    text = re.sub(r"[ \t]+\n", "\n", text)
    text = re.sub(r"\n{3,}", "\n\n", text)
    return text.strip()


def _is_wrapped(lines: list[str]) -> bool:
    """True if a paragraph looks like hard-wrapped prose: long, even lines, no bullets or columns.

    Code, tables, verse and quoted mail have short or ragged lines, bullets, or aligned columns;
    their line breaks carry meaning, so they are kept.
    """
    if len(lines) < 2:
        return False
    if any(_BULLET.match(l) or l.lstrip().startswith((">", "|", "$ ", "# ")) for l in lines[1:]):
        return False
    body = [l.strip() for l in lines]
    if any("\t" in b or "   " in b for b in body):
        return False
    widths = [len(b) for b in body[:-1]]
    return min(widths) >= 30 and min(widths) >= 0.5 * max(widths)


def join_wrapped(text: str) -> str:
    """Join hard-wrapped lines inside each paragraph (paragraphs are separated by blank lines)."""
    out = []
    for para in _BLANK.split(tidy(text)):
        lines = para.split("\n")
        out.append(" ".join(l.strip() for l in lines) if _is_wrapped(lines) else para)
    return "\n\n".join(out)


def strip_html(text: str) -> str:
    """Visible text of an HTML page: drop scripts, styles, headers and navigation, keep block breaks."""
    text = re.sub(r"(?is)<(script|style|head|nav|footer)\b.*?</\1\s*>", " ", text)
    text = re.sub(r"(?s)<!--.*?-->", " ", text)
    text = re.sub(r"(?i)<br\s*/?>", "\n", text)
    text = re.sub(r"(?i)</?(p|div|h[1-6]|li|ul|ol|tr|table|pre|dt|dd|dl|blockquote|section)\b[^>]*>", "\n\n", text)
    text = re.sub(r"<[^>]+>", "", text)
    text = html.unescape(text)
    text = re.sub(r"[ \t\xa0]+", " ", text)
    return tidy(re.sub(r"\n +", "\n", text))


def strip_rst(text: str) -> str:
    """reStructuredText (Sphinx _sources): drop directives' option lines, heading rules, role markup."""
    lines = []
    for line in text.split("\n"):
        if _UNDERLINE.match(line):
            continue
        if re.match(r"^\s*\.\. [\w:-]+::", line) or re.match(r"^\s*:[\w -]+:( |$)", line):
            continue  # ".. note::", ".. code-block:: c", ":maxdepth: 2"
        if re.match(r"^\.\.( |$)", line):
            continue  # comments (".. SPDX-License-Identifier: ...") and link targets
        lines.append(line)
    text = "\n".join(lines)
    text = re.sub(r":[\w:+-]+:`~?([^`<]*?)(?:\s*<[^>]*>)?`", r"\1", text)  # :func:`name <target>`
    text = re.sub(r"`([^`<]+?)\s*<[^>]*>`__?", r"\1", text)  # `text <url>`_
    text = re.sub(r"``([^`]+)``", r"\1", text)
    text = re.sub(r"`([^`]+)`_?_?", r"\1", text)
    text = re.sub(r"\*\*([^*]+)\*\*", r"\1", text)
    text = re.sub(r"(?m)::$", ":", text)
    return join_wrapped(text)


def strip_pod(text: str) -> str:
    """Perl POD: commands become headings or vanish, formatting codes keep their text."""
    out = []
    for line in text.split("\n"):
        m = re.match(r"^=(head\d|item)\s*(.*)$", line)
        if m:
            out.append(m.group(2))
        elif line.startswith("="):
            continue  # =pod =cut =over =back =begin =end =for =encoding
        else:
            out.append(line)
    text = "\n".join(out)
    text = re.sub(r"[XZ]<[^<>]*>", "", text)
    text = re.sub(r"E<gt>", ">", text)
    text = re.sub(r"E<lt>", "<", text)
    text = re.sub(r"L<([^|<>]*)\|[^<>]*>", r"\1", text)
    for _ in range(3):  # nested B<C<...>> and the C<< ... >> form
        text = re.sub(r"[BICFLSE]<<+\s(.*?)\s>>+", r"\1", text)
        text = re.sub(r"[BICFLSE]<([^<>]*)>", r"\1", text)
    return join_wrapped(text)


def strip_vimhelp(text: str) -> str:
    """Vim help: drop *tag* anchors, rule lines and the modeline; |link| keeps its text."""
    text = re.sub(r"(?m)^\s*vim:.*$", "", text)
    text = re.sub(r"\*[^*\s]+\*", "", text)
    text = re.sub(r"\|([^|\s]+)\|", r"\1", text)
    text = "\n".join(l for l in text.split("\n") if not _UNDERLINE.match(l))
    return join_wrapped(text)


def strip_asciidoc(text: str) -> str:
    """Git's asciidoc manuals: drop heading rules and block markers, linkgit:x[1] -> x."""
    text = re.sub(r"linkgit:([\w-]+)\[\d\]", r"\1", text)
    text = re.sub(r"(?m)^\[(verse|literal|listing|source[^\]]*)\]\s*$", "", text)
    text = re.sub(r"(?m)^(include|ifdef|endif|ifndef)::.*$", "", text)
    text = re.sub(r"\$\$", "", text)
    text = "\n".join(l for l in text.split("\n") if not _UNDERLINE.match(l))
    return join_wrapped(text)


def brown_detag(text: str) -> str:
    """Brown corpus: blank-line separated paragraphs of one-sentence lines of 'word/tag' tokens."""
    paras = []
    for para in _BLANK.split(text):
        toks = [t.rsplit("/", 1)[0] for t in para.split()]
        if not toks:
            continue
        s = " ".join(toks).replace("``", '"').replace("''", '"')
        s = re.sub(r" ([.,;:?!)])", r"\1", s)
        s = re.sub(r"([(]) ", r"\1", s)
        s = re.sub(r'"\s([^"]*?)\s"', r'"\1"', s)
        paras.append(s)
    return "\n\n".join(paras)


def strip_email_headers(text: str) -> str:
    """A raw email: drop the header block (everything before the first blank line) and HTML parts."""
    parts = text.split("\n\n", 1)
    body = parts[1] if len(parts) == 2 else parts[0]
    if re.search(r"(?i)<html|<body|<p>", body):
        body = strip_html(body)
    return tidy(body)


def gcide_entry(text: str) -> str:
    """One GCIDE dictionary entry: `Abjure \\Ab*jure"\\, v. t.` -> `Abjure, v. t.`, {links} -> text."""
    text = re.sub(r"\\[^\\\n]*\\", "", text)  # pronunciation between backslashes
    text = re.sub(r"[{}]", "", text)
    text = re.sub(r"\[(1913 Webster|PJC|WordNet[^\]]*|Webster 1913 Suppl\.|Century Dict\.)\]", "", text)
    text = re.sub(r"\s+,", ",", text)
    return join_wrapped(text)


def strip_gutenberg(text: str) -> str:
    """Remove a Project Gutenberg licence header/footer if present."""
    m = re.search(r"\*\*\* ?START OF (THE|THIS) PROJECT GUTENBERG.*?\*\*\*", text)
    if m:
        text = text[m.end():]
    m = re.search(r"\*\*\* ?END OF (THE|THIS) PROJECT GUTENBERG", text)
    if m:
        text = text[: m.start()]
    return tidy(text)
