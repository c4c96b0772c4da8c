"""The wings as floors (issue 58): the folder-level import graph of `xsa/`, read with `ast` by the house
rules' own reader (tests/test_house_rules.py; imports inside functions count). A wing is a sub-package
of `xsa/` (stack, runs, studies, ...); each top-level module (`xsa/train.py`, ...) is a node of its own.

The graph is to have no cycle. Today it has one knot; KNOWN_BACK_EDGES lists exactly the wing-level
edges inside it, each with the import that makes it. A new edge inside a cycle fails the test, and so
does a listed edge that is no longer in one: the list only shrinks, until it is empty.
"""

from __future__ import annotations

from collections import defaultdict

from xsa.runs.records import REPO_ROOT

from test_house_rules import Import, _plant, circles, imports, package_modules

# (importing wing, imported wing): every wing-level edge of today's cycles, with an import that makes it
KNOWN_BACK_EDGES = {
    ("data", "runs"),          # xsa.data.shards (and bundle, sources) -> xsa.runs.records
    ("data", "stack"),         # xsa.data (and loader, build, ...) -> xsa.stack.config, xsa.stack.common
    ("data", "studies"),       # xsa.data.__main__ -> xsa.studies.registry
    ("evaluate", "data"),      # xsa.evaluate.core (and run, chat) -> xsa.data.bundle
    ("evaluate", "runs"),      # xsa.evaluate.run -> xsa.runs.load, records, runlock
    ("evaluate", "stack"),     # xsa.evaluate.run (and sft, chat, ...) -> xsa.stack.checkpoint, step, common
    ("evaluate", "validation"),  # xsa.evaluate.decode_speed -> xsa.validation
    ("factorial", "gpu"),      # xsa.factorial.prereg -> xsa.gpu.cost
    ("factorial", "runs"),     # xsa.factorial.prereg (and analysis) -> xsa.runs.records
    ("factorial", "stack"),    # xsa.factorial.prereg (and models) -> xsa.stack.presets
    ("factorial", "studies"),  # xsa.factorial.design -> xsa.studies.kinds (models, prereg -> predict, scale)
    ("gpu", "evaluate"),       # xsa.gpu.parts -> xsa.evaluate.decode_speed
    ("gpu", "runs"),           # xsa.gpu.parts -> xsa.runs.records
    ("gpu", "stack"),          # xsa.gpu.parts (and cost) -> xsa.stack.checkpoint, model, common
    ("gpu", "throughput"),     # xsa.gpu.parts -> xsa.throughput
    ("runs", "data"),          # xsa.runs.runlog -> xsa.data.shards; xsa.runs.load -> xsa.data.tokenizer
    ("runs", "stack"),         # xsa.runs.layout -> xsa.stack.spec (and jobs, runlog, load -> checkpoint, config)
    ("runs", "studies"),       # xsa.runs.jobs -> xsa.studies.registry
    ("stack", "runs"),         # xsa.stack.common -> xsa.runs.records; xsa.stack.checkpoint -> runs.layout, records
    ("studies", "factorial"),  # xsa.studies.registry (and sink, the optimizer and sink studies) -> xsa.factorial.*
    ("studies", "runs"),       # xsa.studies.registry (and rules, ...) -> xsa.runs.records
    ("studies", "stack"),      # xsa.studies.kinds (and scale, rules, ...) -> xsa.stack.spec, presets
    ("throughput", "runs"),    # xsa.throughput -> xsa.runs.records, plot
    ("throughput", "stack"),   # xsa.throughput -> xsa.stack.config, model, step, ...
    ("throughput", "studies"),  # xsa.throughput -> xsa.studies.registry
    ("validation", "stack"),   # xsa.validation -> xsa.stack.config, model, attention, ...
}


def wing_of(module: str) -> str:
    """The wing of a module: its sub-package under the root package, or the top-level module itself
    (the root package's own __init__ is the root's name)."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else parts[0]


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


def ratchet(found: set, known: set) -> tuple[set, set]:
    """(new cycle edges, listed edges no longer in a cycle)."""
    return found - known, known - found


def _made_by(es: list[Import]) -> str:
    return ", ".join(sorted({f"{e.source} -> {e.target} (line {e.line}{', in a function' if e.lazy else ''})"
                             for e in es})[:4])


WEDGES = wing_edges(imports(package_modules(REPO_ROOT / "xsa")))


def test_the_wings_form_no_new_cycle_and_the_known_list_only_shrinks():
    knots = wing_circles(WEDGES)
    for knot in sorted(knots):
        print("wings in one cycle:", ", ".join(knot))
    new, gone = ratchet(cycle_edges(WEDGES), KNOWN_BACK_EDGES)
    assert not new, "new wing-level edges inside a cycle: " + "; ".join(
        f"{a} -> {b} by {_made_by(WEDGES[a, b])}" for a, b in sorted(new))
    assert not gone, f"no longer in a cycle, strike them from KNOWN_BACK_EDGES: {sorted(gone)}"


# --- the check fires on a planted violation ----------------------------------------------------------

def test_planted_wings_importing_each_other_are_a_cycle(tmp_path):
    mods = _plant(tmp_path, {"__init__.py": "", "top.py": "from pkg.a import x\n",
                             "a/__init__.py": "", "a/x.py": "from pkg.b import y\n",
                             "b/__init__.py": "", "b/y.py": "def f():\n    from pkg.a import x  # lazy: start-up time\n",
                             "c/__init__.py": "", "c/z.py": "from pkg.a.x import *\n"})
    wedges = wing_edges(imports(mods))
    assert wing_circles(wedges) == {("a", "b")}
    assert cycle_edges(wedges) == {("a", "b"), ("b", "a")}  # c -> a and top -> a are one-way
    assert ratchet(cycle_edges(wedges), {("a", "b")}) == ({("b", "a")}, set())


def test_planted_known_edge_that_is_gone_is_found(tmp_path):
    mods = _plant(tmp_path, {"__init__.py": "", "a/__init__.py": "", "a/x.py": "from pkg.b import y\n",
                             "b/__init__.py": "", "b/y.py": ""})
    wedges = wing_edges(imports(mods))
    assert set(wedges) == {("a", "b")} and cycle_edges(wedges) == set()
    assert ratchet(cycle_edges(wedges), {("a", "b"), ("b", "a")}) == (set(), {("a", "b"), ("b", "a")})
