"""The wings as floors (issue 58): the folder-level import graph of `xsa/`, read with `ast` by the house
rules' own reader (tests/test_house_rules.py; imports inside functions count). A wing is a sub-package
of `xsa/` (stack, runs, studies, ...), a top-level module (`xsa/train.py`) or a folder's command line
(`xsa/data/__main__.py`), as xsa/layers.py: wing_of says. The house rules hold that no wing imports one on
its floor or above; here, that the wings' graph has no cycle at all and that no wing outgrows a folder.
"""

from __future__ import annotations

from collections import defaultdict

from xsa.base.records import REPO_ROOT
from xsa.layers import wing_of

from test_house_rules import Import, _plant, circles, imports, package_modules

MAX_WING_FILES = 25


def wing_edges(edges: list[Import]) -> dict[tuple[str, str], list[Import]]:
    """{(wing, wing): the module imports that make the edge} for every import between two wings."""
    out = defaultdict(list)
    for e in edges:
        a, b = wing_of(e.source), wing_of(e.target)
        if a != b:
            out[a, b].append(e)
    return dict(out)


def wing_circles(wedges) -> set[tuple[str, ...]]:
    """The strongly connected sets of more than one wing."""
    return circles([Import(a, b, 0, False, False) for a, b in wedges])


def cycle_edges(wedges) -> set[tuple[str, str]]:
    """The wing-level edges that take part in a cycle: both ends in the same strongly connected set."""
    group = {w: knot for knot in wing_circles(wedges) for w in knot}
    return {(a, b) for a, b in wedges if a in group and group[a] == group.get(b)}


def _made_by(es: list[Import]) -> str:
    return ", ".join(sorted({f"{e.source} -> {e.target} (line {e.line}{', in a function' if e.lazy else ''})"
                             for e in es})[:4])


WEDGES = wing_edges(imports(package_modules(REPO_ROOT / "xsa")))


def test_the_wings_form_no_cycle():
    knots = wing_circles(WEDGES)
    assert not knots, "wings in one cycle: " + "; ".join(
        f"{a} -> {b} by {_made_by(WEDGES[a, b])}" for a, b in sorted(cycle_edges(WEDGES)))


def wing_files(root) -> dict[str, int]:
    """{wing folder: its Python files, sub-folders included}."""
    return {p.name: len(list(p.rglob("*.py"))) for p in sorted(root.iterdir()) if (p / "__init__.py").exists()}


def test_no_wing_holds_more_than_25_files():
    big = {w: n for w, n in wing_files(REPO_ROOT / "xsa").items() if n > MAX_WING_FILES}
    assert not big, f"split these wings by what they do: {big}"


# --- the check fires on a planted violation ----------------------------------------------------------

def test_planted_wings_importing_each_other_are_a_cycle(tmp_path):
    mods = _plant(tmp_path, {"__init__.py": "", "top.py": "from pkg.a import x\n",
                             "a/__init__.py": "", "a/x.py": "from pkg.b import y\n",
                             "b/__init__.py": "", "b/y.py": "def f():\n    from pkg.a import x  # lazy: start-up time\n",
                             "c/__init__.py": "", "c/z.py": "from pkg.a.x import *\n"})
    wedges = wing_edges(imports(mods))
    assert wing_circles(wedges) == {("a", "b")}
    assert cycle_edges(wedges) == {("a", "b"), ("b", "a")}  # c -> a and top -> a are one-way


def test_planted_command_importing_its_own_wings_reader_is_no_cycle(tmp_path):
    mods = _plant(tmp_path, {"__init__.py": "", "a/__init__.py": "", "a/x.py": "from pkg.b import y\n",
                             "a/__main__.py": "from pkg.a import x\n", "b/__init__.py": "",
                             "b/y.py": "", "b/__main__.py": "from pkg.a import x\n"})
    wedges = wing_edges(imports(mods))
    assert set(wedges) == {("a", "b"), ("a.__main__", "a"), ("b.__main__", "a")} and not wing_circles(wedges)


def test_planted_wing_over_the_limit_is_found(tmp_path):
    for i in range(MAX_WING_FILES + 1):
        (tmp_path / "big" / f"m{i}.py").parent.mkdir(exist_ok=True)
        (tmp_path / "big" / f"m{i}.py").write_text("")
    (tmp_path / "big" / "__init__.py").write_text("")
    (tmp_path / "small").mkdir()
    (tmp_path / "small" / "__init__.py").write_text("")
    assert wing_files(tmp_path) == {"big": MAX_WING_FILES + 2, "small": 1}
