"""Decisions in the estimates, words in the template (xsa/books/verdicts.py): a study registered final
has every declared run recorded, so its text carries no interim branch; each verdict the paper's template
tests is a key of the estimates with that outcome among its kind's, and each verdict key the estimates
hold is read by the text; the rules themselves on made-up estimates; and a text that states a study
whole stops, naming what is missing, when its estimates are not."""

import re
from dataclasses import replace

import pytest

from xsa.books.estimates import Book, Estimate, read_estimates
from xsa.books.verdicts import (OUTCOMES, NotWhole, anchors, direction, fit, interval, missing, registered, trend,
                                 whole)
from xsa.report.writing import VERDICTS, render, template_for
from xsa.studies.jobs import trained
from xsa.base.records import REPO_ROOT
from xsa.studies.registry import STUDIES, get_study

ESTIMATES = REPO_ROOT / "results" / "estimates"
TEMPLATE = template_for("default")
# the estimates file each study's estimates are written to (a scale check's are the scale study's, check_*)
FILE_OF = {"default": "default", "robust": "robust", "scale": "scale", "scale-check": "scale",
           "factorial": "factorial", "gpu": "gpu"}
committed = pytest.mark.skipif(not (ESTIMATES / "scale.json").exists(), reason="no committed estimates")


def _book() -> dict:
    return {f.stem: read_estimates(f) for f in ESTIMATES.glob("*.json") if f.stem != "smoke"}


def _final_studies() -> list[str]:
    return [name for name in STUDIES if get_study(name).final]


def test_the_final_studies_are_the_ones_whose_records_are_whole():
    assert {"default", "robust", "scale", "scale-check", "factorial"} <= set(_final_studies())
    assert not get_study("gpu").final  # never run here


@committed
@pytest.mark.parametrize("name", _final_studies())
def test_a_study_marked_final_has_every_declared_run_recorded(name):
    """The flag cannot lie: every run its rules declare has a finished record, they declare nothing more,
    and its estimates file is whole and says it is final."""
    study = get_study(name)
    assert study.final and study.runs and not study.pending
    untrained = [r.run_id for r in study.runs if not trained(REPO_ROOT / "results" / "runs" / r.run_id)]
    assert untrained == [], f"{name} is marked final but these declared runs have no finished record: {untrained}"
    est = read_estimates(ESTIMATES / f"{FILE_OF[name]}.json")
    assert est["final"].value == 1 and missing(est) == []


def _variables(source: str) -> dict[str, str]:
    """{template variable: the study whose estimates it is} from `{% set x = e.<study> %}`."""
    return dict(re.findall(r"\{%-?\s*set (\w+) = e\.(\w+)\s*-?%\}", source))


def _tags(source: str) -> list[str]:
    """The text of every {% ... %} tag and {{ ... }} expression (comments left out)."""
    source = re.sub(r"\{#.*?#\}", " ", source, flags=re.S)
    return re.findall(r"\{%.*?%\}|\{\{.*?\}\}", source, flags=re.S)


def _branches(source: str) -> list[str]:
    """The tags that can choose what the text says: {% ... %} statements and {{ ... }} with an inline if."""
    return [t for t in _tags(source) if t.startswith("{%") or re.search(r"\bif\b", t)]


def test_the_template_has_no_interim_branch_on_a_final_studys_estimates():
    source = TEMPLATE.read_text()
    variables = _variables(source)
    final = {v for v, study in variables.items() if study in STUDIES and get_study(study).final}
    assert final == {"r", "d", "s", "f"} and variables["f"] == "factorial"
    # the text states the final studies whole, so the build checks them (and only them)
    called = re.search(r"\{\{-?\s*whole\(([^)]*)\)", source)
    assert called and {a.strip() for a in called.group(1).split(",")} == final
    interim = []
    for tag in _branches(source):
        for v in final:
            if re.search(rf"(?<![\w.]){v}\.(\w+\.n\b|runs_done|runs_declared|est\.get|levels_with_pairs)", tag):
                interim.append(tag)  # a presence or progress check on a final study
            if re.search(rf"\b(if|and|or)\s+{v}\b(?!\.)", tag):
                interim.append(tag)  # `if s`: a final study the default paper always has
        if re.search(r"\binterim\(|\.declared\b", tag):
            interim.append(tag)
    assert interim == [], f"interim branches on the final studies {sorted(final)}: {interim}"
    assert "not yet measured" not in source and "This is an interim fit" not in source


def test_the_template_compares_no_numbers_to_decide_what_it_says():
    """Every decision of what to say is a verdict key; the template compares no numbers."""
    source = TEMPLATE.read_text()
    decisions = [t for t in _branches(source)
                 if re.search(r"\.decided\b|\bexcludes\(|selectattr|\.value\s*(<|>|==)", t)]
    assert decisions == [], decisions
    numeric = [t for t in _tags(source) if re.match(r"\{%-?\s*(el)?if\b", t) and re.search(r"[<>]=?|==\s*\d", t)]
    assert numeric == [], numeric


def _tested(source: str) -> list[tuple[str, str, str]]:
    """(study variable, key, outcome) for every `<var>.<key>.verdict == "<outcome>"` of the template."""
    return re.findall(r"(\w+)\.(\w+)\.verdict\s*==\s*\"([^\"]+)\"", source)


@committed
def test_each_verdict_the_template_tests_is_a_key_with_that_outcome():
    source, book = TEMPLATE.read_text(), _book()
    variables = _variables(source)
    tested = _tested(source)
    assert len(tested) >= 5
    from xsa.books import optimizer, sink
    later = {"sink": sink.VERDICT_KINDS, "optimizer": optimizer.VERDICT_KINDS}  # held once the study is complete
    for var, key, outcome in tested:
        est = book[variables[var]]
        if key not in est and est.get("progress") and est["progress"].verdict == "training":
            kind = later[variables[var]].get(key)
            assert kind and outcome in OUTCOMES[kind], f"{var}.{key}: not a verdict its study's book makes"
            continue
        assert key in est and est[key].family == "verdict", f"{var}.{key}: no such verdict"
        assert outcome in OUTCOMES[est[key].unit], f"{var}.{key}: {outcome!r} is not a {est[key].unit} outcome"
    # direction(...) reads <key>_direction, and chooses a sentence for each of its outcomes
    for key in re.findall(r"direction\(\"scale\.(\w+)\"", source):
        assert book["scale"][f"{key}_direction"].unit == "direction"


class _Reads(dict):
    """An estimates dict that records the keys read from it."""

    def __init__(self, *a, read: set, study: str):
        super().__init__(*a)
        self.read, self.study = read, study

    def __getitem__(self, key):
        self.read.add(f"{self.study}.{key}")
        return super().__getitem__(key)


def _render(book: dict):
    figures = {n: "x.png" for n in ("robustness", "paired", "diagnostics_effects", "cross_scale", "scale", "factorial",
                                      "gates", "learning", "optimizer_lr", "sink")}
    return render(TEMPLATE.read_text(), Book(book), figures, lambda name, **kw: "", dict(
        study=get_study("default"), left_out="", machine_warnings=[], runs=[], scale_study=get_study("scale"),
        scale_checks={"scale-check": get_study("scale-check")}))


@committed
def test_every_verdict_key_of_the_estimates_is_read_by_the_text():
    read: set = set()
    book = {name: _Reads(est, read=read, study=name) for name, est in _book().items()}
    _render(book)
    verdicts = {f"{name}.{k}" for name, est in book.items() for k, e in est.items() if e.family == "verdict"}
    assert len(verdicts) >= 10
    assert sorted(verdicts - read) == [], "verdict keys the text never reads"


@committed
def test_a_text_that_states_a_study_whole_stops_when_it_is_not():
    book = _book()
    short = book["scale"]["width_256_384_steps"]
    book["scale"] = {**book["scale"], "width_256_384_steps": replace(short, n=2)}
    with pytest.raises(NotWhole, match=r"scale: width_256_384_steps \(2 of 6 pairs\)"):
        _render(book)
    book = _book()
    book["scale"] = {**book["scale"], "runs_done": replace(book["scale"]["runs_done"], value=3)}
    with pytest.raises(NotWhole, match=r"scale: runs_done \(3 of \d+ runs\)"):
        _render(book)
    book = _book()
    book["robust"] = {**book["robust"], "final": registered(False)}
    with pytest.raises(NotWhole, match="robust: its registration does not mark it final"):
        _render(book)


def _e(value, lo, hi, p_holm=None, n=8):
    return Estimate("x", value, lo, hi, n, p_holm=p_holm)


def test_the_rules_of_each_verdict():
    assert direction("x", _e(-0.01, -0.02, -0.001)).verdict == "lowers"
    assert direction("x", _e(0.01, 0.001, 0.02)).verdict == "raises"
    assert direction("x", _e(-0.01, -0.02, 0.001)).verdict == "does not measurably change"
    assert direction("x", _e(-0.01, -0.02, -0.001, p_holm=0.2)).verdict == "does not measurably change"  # Holm
    assert trend("x", _e(-0.01, -0.02, -0.001)).verdict == "grows with"  # a more negative effect: a larger gain
    assert trend("x", _e(0.01, 0.001, 0.02)).verdict == "shrinks with"
    assert trend("x", _e(0.01, -0.001, 0.02)).verdict == "does not measurably depend on"
    assert interval("x", _e(-0.01, -0.02, -0.001), 0.0, "zero").verdict == "excludes"
    assert interval("x", _e(-0.01, -0.02, -0.001), -0.005, "seed_paper").verdict == "includes"
    assert fit("model_fit", 0.01).verdict == "fails" and fit("model_fit", 0.2).verdict == "fits"
    d12 = _e(-0.01, -0.02, 0.0)
    assert anchors("a", d12, [-0.01, -0.015]).verdict == "inside"
    assert anchors("a", d12, [-0.01, 0.5]).verdict == "partly outside"
    assert anchors("a", d12, [0.4, 0.5]).verdict == "outside"
    e = direction("length_x1_3", Estimate("length_x1_3", -0.01, -0.02, -0.001, 8, runs=("a", "b")))
    assert (e.key, e.family, e.unit, e.value, e.runs) == ("length_x1_3_direction", "verdict", "direction", None, ("a", "b"))
    assert "lowers" in e.definition and "Holm" in e.definition


def test_a_verdict_that_is_a_claim_is_a_word_claim_checks():
    """The outcomes the text passes to claim() are claim()'s words, so the claim checks the verdict again."""
    for kind in ("direction", "trend", "interval"):
        assert set(OUTCOMES[kind]) <= set(VERDICTS), kind


def test_whole_names_a_study_without_a_final_flag():
    class S:
        name, est = "made_up", {"primary": Estimate("primary", -0.01)}
    with pytest.raises(NotWhole, match="made_up: its registration does not mark it final"):
        whole(S())
    S.est = {**S.est, "final": registered(True), "level": Estimate("level", -0.01, n=3, declared=8)}
    with pytest.raises(NotWhole, match=r"made_up: level \(3 of 8 pairs\)"):
        whole(S())
    S.est = {**S.est, "level": Estimate("level", -0.01, n=8, declared=8)}
    assert whole(S()) == ""


def test_the_estimates_schema_holds_a_verdict_to_its_outcome():
    from xsa.checks.schemas import problems
    ok = {"study": "x", "estimates": [{"key": "a_direction", "value": None, "runs": [], "family": "verdict",
                                       "verdict": "lowers"}]}
    assert problems("estimates", ok, "x.json") == []
    ok["estimates"][0]["verdict"] = ""
    assert problems("estimates", ok, "x.json") != []


@committed
def test_the_factorial_section_says_what_each_registered_outcome_says():
    """Each outcome of the factorial's registered decision table chooses its sentences: a conditional d12
    number for the account named, or the candidates' numbers side by side and no statement (in the section,
    the abstract and the conclusion)."""
    from xsa.books.verdicts import axis, model
    book = _book()
    text = lambda blocks: " ".join(" ".join(c for kind, c in blocks if kind == "markdown").split())
    f = book["factorial"]
    judged = f["equal_tokens_per_param"]
    for outcome in OUTCOMES["axis"]:
        for chosen in (["steps", "tokens seen"], ["tokens per parameter"]):
            for p in (0.01, 0.5):
                said = text(_render({**book, "factorial": {**f, "axis": axis("axis", outcome, judged),
                                                          "model_chosen": model("model_chosen", chosen),
                                                          "model_fit": fit("model_fit", p)}}))
                assert "Its runs are in progress" not in said and "Table A" in said
                if outcome in ("steps", "tokens per parameter"):
                    axis_words = "optimizer steps" if outcome == "steps" else "tokens per parameter"
                    assert f"the gain follows {axis_words}" in said and f"the gain following {axis_words}" in said
                    assert "no statement about d12" not in said
                    assert "makes no d12 statement" not in said and "only a run there can settle it" not in said
                else:
                    assert f"no single account (its outcome: {outcome})" in said and "makes no d12 statement" in said
                    assert "no statement about d12" in said and "only a run there can settle it" in said
                assert ("even the chosen model does not fit" in said) == (p < 0.05)
                assert ("criterion chooses steps" in said) == ("steps" in chosen)
    assert model("m", ["tokens per parameter + parameters", "steps + parameters"]).verdict == "with parameters"
    from xsa.books.factorial import VERDICTS, factorial_verdicts, model_book
    from xsa.base.records import REPO_ROOT as root
    made = factorial_verdicts(root / "results", book["factorial"], model_book(root / "results")[1])
    assert {k: e.unit for k, e in made.items()} == VERDICTS  # the kinds the check above reads are the ones made


@committed
@pytest.mark.parametrize("keep, outcome, says", [
    (0.1, "sink", "takes at least half of XSA's gain, so at this scale the gain is largely a sink effect"),
    (0.7, "partly", "takes part of XSA's gain, less than half"),
    (1.0, "not sink", "takes less than half of XSA's gain, and no decided part of it")])
def test_the_sink_study_once_complete_says_its_registered_outcome(tmp_path, keep, outcome, says):
    """With every record of the sink study (planted: with a mechanism XSA keeps `keep` of its gain), its book
    holds the decision and the text states each mechanism's registered outcome, reading every verdict key;
    while it trains, the book holds no effect and the text states none."""
    from test_sink_study import _plant
    from xsa.books.sink import sink_book
    committed_book = _book()
    _plant(tmp_path, keep, factorial_only=True)  # the factorial's records alone: the study under way
    training = sink_book(tmp_path)
    assert training["progress"].verdict == "training"
    assert not any(k.endswith("_outcome") or k.startswith("xsa_") for k in training)
    said = " ".join(" ".join(c for kind, c in _render({**committed_book, "sink": training}) if kind == "markdown").split())
    assert "registration decides its outcome on its last record" in said and says not in said
    _plant(tmp_path, keep)
    sink = sink_book(tmp_path)
    assert sink["progress"].verdict == "complete"
    from xsa.books.sink import VERDICT_KINDS
    assert {k: e.unit for k, e in sink.items() if e.family == "verdict" and k != "progress"} == VERDICT_KINDS
    assert {sink["gate_outcome"].verdict, sink["sink_outcome"].verdict} == {outcome}
    read: set = set()
    book = {name: _Reads(est, read=read, study=name) for name, est in {**committed_book, "sink": sink}.items()}
    said = " ".join(" ".join(c for kind, c in _render(book) if kind == "markdown").split())
    assert said.count(says) == 2 and "registration decides its outcome on its last record" not in said
    assert "the output gate on both arms" in said and "the learned sink on both arms" in said
    assert {"sink.gate_outcome", "sink.sink_outcome", "sink.progress"} <= read


@committed
@pytest.mark.parametrize("effects, noise, reading, says", [
    ({"muon": -0.006, "adamw": -0.006}, 0.0002, "carries over", "XSA's result carries over from AdamW to Muon here"),
    ({"muon": -0.006, "adamw": 0.004}, 0.0002, "larger under Muon", "XSA's gain differs between the optimizers, larger under Muon"),
    ({"muon": 0.0, "adamw": 0.0}, 0.02, "cannot tell", "CPU scale cannot tell whether XSA's gain depends on the optimizer")])
def test_the_optimizer_study_once_complete_says_its_registered_readings(tmp_path, effects, noise, reading, says):
    """With every record the optimizer study declares (planted round by round), its book holds the registered
    endpoints and the text states the interaction's registered reading and AdamW's, reading every verdict key."""
    from test_optimizer_study import plant_study
    from xsa.books.optimizer import optimizer_book
    plant_study(tmp_path, effects, noise)
    book_o = optimizer_book(tmp_path)
    assert book_o["progress"].verdict == "complete" and book_o["interaction_reading"].verdict == reading
    from xsa.books.optimizer import VERDICT_KINDS
    assert {k: e.unit for k, e in book_o.items() if e.family == "verdict" and k != "progress"} == VERDICT_KINDS
    read: set = set()
    book = {name: _Reads(est, read=read, study=name) for name, est in {**_book(), "optimizer": book_o}.items()}
    said = " ".join(" ".join(c for kind, c in _render(book) if kind == "markdown").split())
    assert says in said and "Beyond AdamW." in said and "(interim, no estimate read from them)" not in said
    adamw = {"lowers": "XSA lowers final val bpb under AdamW", "raises": "XSA raises final val bpb under AdamW",
             "does not measurably change": "no effect is detected under AdamW"}[book_o["adamw_tuned_direction"].verdict]
    assert adamw in said
    verdicts = {f"optimizer.{k}" for k, e in book_o.items() if e.family == "verdict"}
    assert verdicts <= read, sorted(verdicts - read)
    # the claims table states the title's claims with this study's registered readings
    from xsa.report.claims import claims_table
    rows = {r["key"]: r for r in claims_table(get_study("default"), {**_book(), "optimizer": book_o})}
    carries = {"carries over": "supported", "cannot tell": "not decided"}.get(reading, "contradicted")
    assert rows["optimizer.interaction"]["verdict"] == carries
    for w in ("cpu_w64_d4", "cpu_w128_d4"):
        e = book_o[f"sensitivity_change_muon_{w}"]
        stable = "contradicted" if e.decided and e.value > 0 else "supported"
        assert rows[f"optimizer.sensitivity_change_muon_{w}"]["verdict"] == stable
        assert rows[f"optimizer.sensitivity_change_muon_{w}"]["their_scale"] == "not tested"
