"""One idea, written once: the relative difference of b against a baseline a, (b - a) / |a|, is
xsa/base/stats.py's `relative` (and `relative_differences`, per seed and paired by seed); no other module
writes the formula, in either of its spellings, (b - a) / a or b / a - 1, except the registered analysis
code of a pre-registered study (frozen as registered) and the known places below. The status word of
an estimate's records is xsa/books/estimates.py's `records_status`, and the words and numbers a table
decides are xsa/books/verdicts.py's. Each rule is also run on a planted module that breaks it.
"""

from __future__ import annotations

import ast
from collections import Counter
from pathlib import Path

from xsa.books.estimates import Estimate, records_status
from xsa.books.verdicts import seed_paper_change, side
from xsa.base.records import REPO_ROOT
from xsa.base.stats import relative, relative_differences
from xsa.studies.registry import SEED_PAPER

THE_ONE = "xsa/base/stats.py"
# Known other copies, by module and expression (an entry that is gone fails the test, so the list only
# shrinks; a further copy of an expression listed here is a new copy, and fails too).
KNOWN = Counter({
    # the published effects beside ours, as their sources compute them; (b - a) / |a| differs from
    # b / a - 1 in the last bits, which the cross-scale table and figure would carry
    ("xsa/report/crossscale.py", "p['bpb_xsa'] / p['bpb_base'] - 1"): 1,
    ("xsa/report/crossscale.py", "base / none - 1"): 1,
    # the seed paper's effect, which the studies' claims and estimates carry (the same last-bits reason)
    ("xsa/studies/registry.py", "SEED_PAPER[depth]['xsa1']['val_bpb'] / SEED_PAPER[depth]['base']['val_bpb'] - 1"): 1,
    ("xsa/studies/registry.py", "b / a - 1"): 1,
    # the precision rule of the pre-registered studies, as registered ((b - a) / a of each seed's pair)
    ("xsa/studies/rules.py", "(y - x) / x"): 1,
    # a registration's ratio of two means (the selection seeds' optimism), as its document states it
    ("xsa/studies/prereg_check.py", "m_est / m_sel - 1"): 1,
    # XSA's step-time overhead: a ratio of medians over timing rounds (numpy arrays, a bootstrap over
    # them), not a paired difference of two runs; the stage writes it into its records as it is
    ("xsa/throughput.py", "np.median(x[idx], axis=1) / np.median(b[idx], axis=1) - 1"): 1,
    ("xsa/throughput.py", "x / b - 1"): 1,
    ("xsa/throughput.py", "np.median(x) / np.median(b) - 1"): 1,
    ("xsa/gpu/parts.py", "med['xsa'] / med['baseline'] - 1"): 1,
})


def registered_analysis(module: str) -> bool:
    """Registered analysis code of a pre-registered study, left as registered: the scale study's model
    (predict), the factorial's analysis (its folder but its design and its registration's text), and
    the sink and optimizer studies' analyses (`<name>_analysis`)."""
    factorial = module.startswith("xsa.studies.factorial.") and module.rsplit(".", 1)[1] not in ("design", "prereg")
    return module == "xsa.studies.predict" or module.endswith("_analysis") or factorial


def _bare(node):
    """The operand inside abs(...) or float(...)."""
    while (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("abs", "float")
           and len(node.args) == 1):
        node = node.args[0]
    return node


def _same(a, b) -> bool:
    return ast.dump(_bare(a)) == ast.dump(_bare(b))


def relative_formulas(path: Path) -> list[str]:
    """Each expression of the module that writes the relative difference: (b - a) / a (or / abs(a)), a
    difference divided by one of its own operands, or b / a - 1 (a ratio of two values, less one)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if not isinstance(node, ast.BinOp):
            continue
        if (isinstance(node.op, ast.Div) and isinstance(node.left, ast.BinOp) and isinstance(node.left.op, ast.Sub)
                and (_same(node.right, node.left.left) or _same(node.right, node.left.right))):
            found.append(ast.unparse(node))
        elif (isinstance(node.op, ast.Sub) and isinstance(node.right, ast.Constant) and node.right.value == 1
              and isinstance(node.left, ast.BinOp) and isinstance(node.left.op, ast.Div)
              and not any(isinstance(x, ast.Constant) for x in (node.left.left, node.left.right))):
            found.append(ast.unparse(node))
    return found


def copies(root: Path) -> Counter:
    """{(path, expression): count} of every copy of the formula under root/xsa outside xsa/base/stats.py and the
    registered analysis modules."""
    out = Counter()
    for path in sorted((root / "xsa").rglob("*.py")):
        rel = path.relative_to(root).as_posix()
        module = rel.removesuffix(".py").removesuffix("/__init__").replace("/", ".")
        if rel != THE_ONE and not registered_analysis(module):
            out.update((rel, e) for e in relative_formulas(path))
    return out


def test_the_relative_difference_is_written_once():
    found = copies(REPO_ROOT)
    new = found - KNOWN
    gone = KNOWN - found
    assert not new, f"a new copy of (b - a) / a: call xsa.base.stats.relative or relative_differences instead: {dict(new)}"
    assert not gone, f"no longer copies (remove them from KNOWN): {dict(gone)}"
    assert relative_formulas(REPO_ROOT / THE_ONE) == ["(b - a) / abs(a)"]  # the one copy


def test_planted_copies_of_the_relative_difference_are_found(tmp_path):
    (tmp_path / "xsa" / "report").mkdir(parents=True)
    (tmp_path / "xsa" / "report" / "t.py").write_text(
        "def f(a, b, n, s, alpha):\n"
        "    x = (b[s] - a[s]) / abs(a[s])\n"    # a copy
        "    y = b / a - 1\n"                    # the other spelling
        "    z = (b - a) / n + n / 2 - 1\n"      # a difference over a count, half a count less one: no copy
        "    return 1 - alpha / 2, x, y, z\n")   # a quantile: not a copy
    (tmp_path / "xsa" / "base").mkdir()
    (tmp_path / "xsa" / "base" / "stats.py").write_text("def relative(a, b):\n    return (b - a) / abs(a)\n")
    (tmp_path / "xsa" / "studies" / "factorial").mkdir(parents=True)
    (tmp_path / "xsa" / "studies" / "factorial" / "analysis.py").write_text("def g(a, b):\n    return (b - a) / a\n")
    assert copies(tmp_path) == Counter({("xsa/report/t.py", e): 1 for e in
                                        ("(b[s] - a[s]) / abs(a[s])", "b / a - 1")})


def test_the_one_relative_difference():
    assert relative(2.0, 1.9) == (1.9 - 2.0) / 2.0
    assert relative(-0.03, -0.015) == 0.5  # |a|: higher is positive where the baseline is negative
    assert relative(None, 1.0) is None and relative(1.0, None) is None and relative(0.0, 1.0) is None
    assert relative_differences({2: 1.0, 1: 2.0, 3: 0.0, 4: None}, {1: 1.9, 2: 1.1, 3: 1.0, 4: 1.0, 5: 1.0}) == \
        {1: relative(2.0, 1.9), 2: relative(1.0, 1.1)}  # in seed order, pairs only, no 0 or missing baseline


def test_one_status_word_for_every_table():
    """records_status keeps each table's words: the scale study's (no records is "not run", or the
    estimate's reason) and the robustness table's (a declared step with no records is "interim 0/N")."""
    assert records_status(8, 8) == "complete" and records_status(3, 8) == "interim 3/8"
    assert records_status(0, 8) == "not run" and records_status(0, 0) == "not run"
    assert records_status(0, 8, "not declared yet") == "not declared yet"
    assert records_status(0, 6, count_none=True) == "interim 0/6"
    assert records_status(0, 0, count_none=True) == "not run" and records_status(4, 0, count_none=True) == "complete"
    assert Estimate("k", None, n=0, declared=8, reason="fewer than two pairs").status == "fewer than two pairs"
    assert Estimate("k", 0.1, n=5, declared=8).status == "interim 5/8"
    assert Estimate("k", 0.1, n=8, declared=8).status == "complete"


def test_no_other_report_module_writes_a_status_word():
    """The status words are written in xsa/books/estimates.py alone: no other report module makes an
    f-string that starts "interim " (a planted one is found)."""
    def interim_strings(source: str) -> int:
        return sum(isinstance(n, ast.JoinedStr) and n.values and isinstance(n.values[0], ast.Constant)
                   and str(n.values[0].value).startswith("interim ") for n in ast.walk(ast.parse(source)))

    for path in sorted((REPO_ROOT / "xsa" / "report").glob("*.py")):
        if path.name != "estimates.py":
            assert not interim_strings(path.read_text()), path
    assert interim_strings("s = f\"interim {n}/{declared}\"\n") == 1


def test_the_tables_decisions_are_verdicts():
    up, down = Estimate("k", 0.2, 0.1, 0.3), Estimate("k", -0.2, -0.3, -0.1)
    assert [side(e) for e in (up, down, Estimate("k", 0.0, -0.1, 0.1), Estimate("k", None))] == \
        ["higher", "lower", "includes 0", "n/a"]
    base, xsa = SEED_PAPER["d12"]["base"]["val_bpb"], SEED_PAPER["d12"]["xsa1"]["val_bpb"]
    assert seed_paper_change("d12", "val_bpb") == (xsa - base) / abs(base)
    assert seed_paper_change("d12", "chatcore") is None  # the paper reports no ChatCORE at d12
