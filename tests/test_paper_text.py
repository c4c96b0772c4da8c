"""The estimates layer and the written text: estimates recomputed independently from the raw records,
a verdict that its data no longer supports stops the build naming its sentence, the paper's own
template renders from the committed estimates, and a new metric is one entry of the metric table
(and, as a column of the paper's main table, three lines beside it)."""

import json
import math
import re
import statistics

import numpy as np
import pytest

from xsa import report
from xsa.base.records import REPO_ROOT, atomic_write_json
from xsa.books.estimates import Book, read_estimates
from xsa.report.writing import StaleClaim, render, template_for
from xsa.studies.registry import Study, get_study

from test_robustness import rob, robust_records, whole


@pytest.fixture
def robust_results(tmp_path):
    """The robust study's made-up records of tests/test_robustness.py."""
    return robust_records(tmp_path)


def _val(results, run_id):
    return json.loads((results / "runs" / run_id / "summary.json").read_text())["val_bpb"]


def test_estimates_agree_with_an_independent_computation(robust_results, tmp_path):
    """The robust study's primary, its T = 256 pair and its Holm-adjusted family, recomputed with numpy and
    statistics from the summary.json files alone (not through the report's code)."""
    rob(robust_results)  # builds the robust estimates
    from xsa.books.declared import robust_estimates
    from xsa.checks.records import load_runs
    robust = get_study("robust", robust_results)
    runs = load_runs(robust_results, [r.run_id for r in robust.runs
                                      if (robust_results / "runs" / r.run_id / "summary.json").exists()])
    est = robust_estimates(robust, [r for r in runs if r["spec"].seed >= 100],
                           [r for r in runs if r["spec"].seed < 100], -0.0032)
    from xsa.books.estimates import write_estimates
    write_estimates(est, tmp_path, "robust")
    written = {r["key"]: r for r in json.loads((tmp_path / "robust.json").read_text())["estimates"]}

    def check(key, pair, seeds):
        d = np.array([_val(robust_results, pair.b.run(s).run_id) / _val(robust_results, pair.a.run(s).run_id) - 1
                      for s in seeds])
        n, mean, sd = len(d), float(d.mean()), statistics.stdev(d.tolist())
        t = {5: 2.570582, 11: 2.200985}[n - 1]  # Student's t, 97.5% quantile, from the tables
        row = written[key]
        assert row["n"] == n and row["value"] == pytest.approx(mean, abs=1e-9)
        assert row["lo"] == pytest.approx(mean - t * sd / math.sqrt(n), abs=1e-8)
        assert row["hi"] == pytest.approx(mean + t * sd / math.sqrt(n), abs=1e-8)
        assert sorted(row["runs"]) == sorted(x.run(s).run_id for s in seeds for x in pair.arms())
        return abs(mean) / (sd / math.sqrt(n))

    t = check("primary", robust.comparison(robust.primary), range(100, 112))
    assert written["primary"]["p"] == pytest.approx(2 * _t_tail(t, 11), rel=1e-4)
    t256 = check("t256", robust.comparison("cpu-w64-d4 tuned T=256"), range(100, 106))
    # Holm over a family of 7 where only T = 256 ran: its p times 7 (the others count as p = 1)
    p = 2 * _t_tail(t256, 5)
    assert written["t256"]["p"] == pytest.approx(p, abs=1e-9)
    assert written["t256"]["p_holm"] == pytest.approx(min(1.0, 7 * p), abs=1e-9)
    assert written["two_heads"]["value"] is None and written["two_heads"]["reason"].startswith("not declared")


def _t_tail(t, df):
    """P(T > t) for Student's t by numerical integration of its density (independent of xsa.base.stats)."""
    x = np.linspace(t, t + 2000, 2_000_001)
    c = math.gamma((df + 1) / 2) / (math.sqrt(df * math.pi) * math.gamma(df / 2))
    return float(np.trapezoid(c * (1 + x ** 2 / df) ** (-(df + 1) / 2), x))


TEXT = ("At tuned rates XSA {{ claim('robust.primary', 'lowers') }} val bpb by {{ e.robust.primary | est }}. "
        "At T = 256 it {{ claim('robust.t256', 'lowers') }} it too, by {{ e.robust.t256 | size }}.\n")


def _render(results, text=TEXT):
    out = rob(results)
    book = Book({"robust": out["estimates"]})
    return render(text, book, {}, lambda name, **kw: "", {})


def test_a_claim_its_data_no_longer_supports_stops_the_build_naming_the_sentence(robust_results):
    (kind, text), = _render(robust_results)
    assert kind == "markdown" and "XSA lowers val bpb by -0.30% [" in text and "it lowers it too, by 0.99%" in text
    # T = 256 retrained: XSA's effect there is now lost in its noise, so "lowers" no longer holds
    robust = get_study("robust", robust_results)
    t256 = robust.comparison("cpu-w64-d4 tuned T=256")
    for s in range(100, 106):
        (robust_results / "runs" / t256.b.run(s).run_id / "metrics.jsonl").unlink()
        whole(robust_results, t256.b.run(s), 2.1 * (1 + 0.01 * (-1) ** s))
    with pytest.raises(StaleClaim) as err:
        _render(robust_results)
    said = str(err.value)
    assert "At T = 256 it [?] it too, by" in said and "claim('robust.t256', 'lowers')" in said
    assert "Holm p" in said and "tuned rates" not in said  # the sentence that still holds is not named


def test_every_figure_and_table_is_referred_to(robust_results):
    placed = TEXT + "{{ table('robustness', 'The table.') }}"
    with pytest.raises(ValueError, match=r"never refers to Table 1 \(tab:robustness\)"):
        _render(robust_results, placed)
    blocks = _render(robust_results, placed + "See {{ ref('tab:robustness') }}.")
    assert [b[1].strip() for b in blocks][1:] == ["**Table 1.** The table.", "See Table 1."]
    with pytest.raises(ValueError, match="which it never shows"):
        _render(robust_results, TEXT + "See {{ ref('fig:gap') }}.")


def test_a_missing_key_names_it(robust_results):
    with pytest.raises(KeyError, match="robust.nonsense"):
        _render(robust_results, "{{ e.robust.nonsense | est }}")


def test_large_percentages_keep_two_significant_digits():
    from xsa.report.writing import pct
    assert pct(2.8581) == "+290%" and pct(-0.0061) == "-0.61%" and pct(0.1234) == "+12%" and pct(None) == "n/a"
    assert pct(-0.0000312) == "-0.003%" and pct(0.0000049) == "+0.0005%" and pct(0.0) == "+0.00%"


def test_an_interval_reads_at_one_precision():
    from xsa.report.writing import pct_interval
    assert pct_interval(-0.11036, 0.0804) == "[-11.04%, +8.04%]"
    assert pct_interval(1.9337, 3.4001) == "[+190%, +340%]" and pct_interval(-0.0078, -0.0043) == "[-0.78%, -0.43%]"


ESTIMATES = REPO_ROOT / "results" / "estimates"


@pytest.mark.skipif(not (ESTIMATES / "default.json").exists(), reason="no committed estimates")
def test_the_paper_renders_from_the_committed_estimates_with_a_short_abstract():
    """The paper's template against the committed estimates: every claim holds, every key exists, the
    abstract is at most 150 words with at most three intervals, and no number is typed into the prose."""
    book = Book({f.stem: read_estimates(f) for f in ESTIMATES.glob("*.json") if f.stem != "smoke"})
    figures = {n: "x.png" for n in ("robustness", "paired", "diagnostics_effects", "cross_scale", "scale", "factorial",
                                      "gates", "learning", "optimizer_lr")}
    blocks = render(template_for("default").read_text(), book, figures, lambda name, **kw: "", dict(
        study=get_study("default"), left_out="", machine_warnings=[], runs=[], scale_study=get_study("scale"),
        scale_checks={"scale-check": get_study("scale-check")}))
    text = "".join(v for k, v in blocks if k == "markdown")
    abstract = text.split("**Abstract.**")[1].split("\n## ")[0]
    assert len(abstract.split()) <= 150
    assert abstract.count("[") <= 3, "at most three intervals in the abstract"
    # the scale study is final (every declared run recorded; tests/test_verdicts.py): its section states the
    # model's d12 number whole, with no interim reading
    assert "4. Scale: what CPU scale says about d12" in text
    assert "does not fit its own\ndata" in text  # the registered model fails its heterogeneity test
    assert book.scale.model_fit.verdict == "fails" and book.scale.final.value == 1
    # every d12 or d24 number sits in the appendix's table of registered conditional extrapolations: the main text
    # (to the references) prints none of them, and says why CPU data cannot determine d12
    main = text.split("## References")[0]
    from xsa.report.writing import est as stated
    numbers = [stated(book.scale[k], False) for k in ("prediction_d12", "prediction_d24", "check_prediction_d12")]
    numbers += [stated(e, False) for k, e in book.factorial.est.items() if k.startswith("d12_conditional")]
    assert [n for n in numbers if n in main] == []
    assert "CPU data cannot determine d12" in main and "not a prediction" in main
    assert "Registered conditional extrapolations, not predictions" in text
    # no size set against the seed paper's across scales, and the title says what was tested
    assert "understated" not in text and "larger than its single" not in text and "nanochat's loss" not in text
    assert "models built from nanochat's code at CPU scale" in text.splitlines()[0]
    assert "an interim reading" not in text and "interim fit" not in text and "The study is in progress" not in text
    # the prose outside {{ ... }} and {# ... #}, before the references: no decimal and no percentage typed in

    source = template_for("default").read_text().split("## References")[0]
    prose = re.sub(r"\{\{.*?\}\}|\{#.*?#\}", " ", source, flags=re.S)
    prose = "\n".join(line for line in prose.splitlines() if not line.startswith("#"))  # headings: section numbers
    typed = re.findall(r"(?<![\w.§])[-+±]?\d+(?:\.\d+)?%|(?<![\w.:§])\d+\.\d+(?![\w.])", prose)
    typed = [t for t in typed if t not in ("95%", "5%")]  # the interval's level and Holm's family-wise rate
    assert typed == [], f"numbers typed into the prose: {typed}"


def test_an_interval_that_alone_excludes_zero_says_holm_does_not_hold_it():
    """Wherever the committed paper's prose prints the interval of an estimate whose raw interval excludes zero
    but whose Holm-adjusted p is 5% or more, its sentence says it is not significant after Holm's correction
    (an interval alone read as a finding is the overreach a reader makes first). An estimate printed with the same
    numbers under another name says it too, or that it is in no Holm family (each arm at its better rate, chosen on
    the seeds it is estimated on, is both at XSA's rate here)."""
    from xsa.report.writing import pct_interval
    prose = " ".join(line for line in (REPO_ROOT / "paper" / "paper.md").read_text().splitlines()
                     if not line.lstrip().startswith("|"))  # tables carry their Holm p in a column of their own
    sentences = re.split(r"(?<=[.;])\s+(?=[A-Z(])", re.sub(r"\s+", " ", prose))
    unheld = {pct_interval(e.lo, e.hi): f"{f.stem}.{e.key}" for f in ESTIMATES.glob("*.json")
              for e in read_estimates(f).values() if e.unit == "relative" and e.ci.defined
              and e.p_holm is not None and e.p_holm >= 0.05 and e.ci.excludes(0.0)}
    assert len(unheld) >= 4, unheld  # the check sees the estimates it is about
    found = [f"{key}: {s[:120]}" for iv, key in unheld.items()
             for s in sentences if iv in s and "significant after Holm" not in s and "in no Holm family" not in s]
    assert found == [], "intervals printed without their Holm reading:\n" + "\n".join(found)


def test_the_run_table_lists_every_run_folder():
    """results/tables/runs.csv lists every run folder under results/runs that git holds (the factorial's
    included), each once."""
    import csv
    import subprocess
    tracked = subprocess.run(["git", "-C", str(REPO_ROOT), "ls-files", "results/runs/*/summary.json"],
                             capture_output=True, text=True).stdout.split()
    folders = {p.split("/")[2] for p in tracked} or {d.name for d in (REPO_ROOT / "results" / "runs").iterdir()
                                                      if (d / "summary.json").exists()}
    listed = [r["run"] for r in csv.DictReader((REPO_ROOT / "results" / "tables" / "runs.csv").open())]
    assert len(listed) == len(set(listed)), "a run listed twice"
    assert sorted(folders - set(listed)) == []


def test_the_readme_states_the_answer_as_the_estimates_file_has_it():
    """The README's first screen states the robust study's answer, each number as the estimates file says."""
    est = read_estimates(ESTIMATES / "robust.json")
    head = " ".join((REPO_ROOT / "README.md").read_text().splitlines()[:40])  # the first screen, as one line
    from xsa.report.writing import size
    for key in ("primary", "two_heads"):
        assert size(est[key]) in head, f"README: robust.{key} is {size(est[key])}"
    assert f"{est['primary'].n} paired seeds" in head
    from xsa.report.writing import num, pct
    assert f"single-run {pct(est['primary'].seed_paper)} at d12" in head
    assert (f"{num(est['cpu_w64_d4_params'].value / 1e6, 1)}-{num(est['cpu_w128_d4_params'].value / 1e6, 1)} M "
            "parameters") in head
    assert (f"{num(est['cpu_w128_d4_tokens_per_param'].value, 1)}-{num(est['cpu_w64_d4_tokens_per_param'].value, 1)} "
            "training tokens per parameter") in head
    assert "(in progress)" not in (REPO_ROOT / "README.md").read_text()


def test_the_readme_states_each_studys_status_as_the_records_have_it():
    """The README's first screen says of each study what its records say: finished only when every
    declared run has a finished record, with the counts of the estimates file."""
    from xsa.studies.jobs import trained
    from xsa.studies.registry import get_study
    head = " ".join((REPO_ROOT / "README.md").read_text().splitlines()[:40])
    s = read_estimates(ESTIMATES / "scale.json")
    done, declared = s["runs_done"].value, s["runs_declared"].value
    assert f"scale study is {'finished' if done == declared else 'training'} ({done} of {declared} declared runs" in head
    assert f"{s['check_runs_done'].value} of {s['check_runs_declared'].value} for its x4 check" in head
    from xsa.report.writing import est as stated
    x4, common = s["length_x4"], s["check_common_xsa_rate"]  # the registered x4 estimate first, its check beside it
    reading = {"holds": "its x4 check leaves the baseline's selection standing",
               "overstated": "its x4 check finds it overstated"}[s["check_selection"].verdict]
    assert (f"XSA's change at tuned rates is {stated(x4, False)} ({reading}; with both arms at one rate it is "
            f"{stated(common, False)})") in head
    assert ("slope with training length is not established" in head) == (not s["slope_tokens"].decided)
    for name in ("sink", "optimizer"):  # said to be training while a declared run has no record
        training = not all(trained(REPO_ROOT / "results" / "runs" / r.run_id) for r in get_study(name).runs)
        assert (f"{name} study, registered with its analysis code before its first record, is "
                + ("training" if training else "finished")) in head, f"README: the {name} study's status"
    runs = get_study("factorial").runs
    finished = all(trained(REPO_ROOT / "results" / "runs" / r.run_id) for r in runs)
    assert ("factorial study, registered with its analysis code before its first record, is "
            + ("finished" if finished else "training")) in head
    if finished:  # ... and, once finished, what its registered decision table gives d12
        f = read_estimates(ESTIMATES / "factorial.json")
        assert f"finished ({f['runs_done'].value} of {f['runs_declared'].value} declared runs)" in head
        axis = f["axis"].verdict
        said = {"steps": "the gain follows optimizer steps",
                "tokens per parameter": "the gain follows tokens per parameter"}
        otherwise = "no single account of training length, so the paper makes no d12 statement"
        assert said.get(axis, otherwise) in head


def test_a_new_metric_is_one_entry_of_the_metric_table(tmp_path, monkeypatch):
    """README, Extending: a metric recorded in summary.json becomes a row of the effects table, an estimate
    of the main comparison and, with `main`, a column of the main table (its mean, interval and change)
    under its header: one Metric entry."""
    from xsa.checks import metrics
    from test_report import SMOKE, write_run
    monkeypatch.setitem(metrics.METRICS, "train_loss_final", metrics.Metric(
        "train_loss_final", "final training loss", "train loss", "nats", True, "summary.json:train_loss_final",
        main=4))
    study = Study(name="t", scale="test scale", runs=tuple(a.run(s) for s in range(3) for a in SMOKE.arms()),
                  main=(SMOKE,))
    for run in study.runs:
        write_run(tmp_path, run, 1.5)
        path = tmp_path / "runs" / run.run_id / "summary.json"
        summary = json.loads(path.read_text())
        atomic_write_json(path, {**summary, "train_loss_final": 3.0 - 0.1 * bool(run.config().model.xsa_alpha)})
    built = report.build(study, tmp_path)
    rows = [r for r in built["tables"]["effects"] if r["metric"] == "train_loss_final"]
    assert len(rows) == 1 and rows[0]["rel"] == pytest.approx(-0.1 / 3.0)
    assert built["estimates"]["t"]["primary_train_loss_final"].value == pytest.approx(-0.1 / 3.0)
    # ... and, with its place among the main table's columns, a column of the paper under its header
    xsa_row = next(r for r in built["tables"]["main"] if r["arm"] == "XSA a=1" and r["source"] == "ours")
    assert xsa_row["train_loss_final"] == pytest.approx(2.9) and xsa_row["train_loss_final_rel"] == pytest.approx(-0.1 / 3)
    shown = report.table_markdown(built, "main")
    assert "train loss | 95% CI | vs baseline" in shown.splitlines()[0] and "-3.33%" in shown
    # a record that predates the metric: not recorded, with the reason
    assert metrics.missing_reason({"summary": {"val_bpb": 1.0}}, "train_loss_final") == \
        "not recorded: summary.json predates train_loss_final"



def test_a_metric_column_of_the_paper_has_its_header_and_its_format():
    """Every column a table shows in the paper has a reader's header (columns.column), and every relative
    column is a percentage; a metric's columns (its mean, interval and, for a relative metric, its paired
    change) come from its entry in the metric table, so a piece left out fails here rather than printing a
    raw key or a raw fraction in the paper."""
    from xsa.report.columns import COLUMNS, DISPLAY, DISPLAY_ARMS, cell, column, display
    from xsa.checks.metrics import METRICS
    shown = [c for cols in [*DISPLAY.values(), DISPLAY_ARMS, display("main")] for c in cols]
    assert [c for c in shown if column(c).header == c and c not in COLUMNS and c not in METRICS] == []
    assert [c for c in shown if (c.endswith("_rel") or c.startswith("rel")) and not column(c).kind] == []
    assert all(column(name).header == m.header for name, m in METRICS.items())  # one header a metric
    assert (cell("rel", -0.0061), cell("rel_sd", 0.004), cell("matrix_lr", 0.04)) == ("-0.61%", "0.40%", "0.040")


PDF = REPO_ROOT / "paper" / "paper.pdf"
needs_pdf = pytest.mark.skipif(not (__import__("shutil").which("pdftoppm") and __import__("shutil").which("pdftotext")
                                    and PDF.exists()), reason="needs poppler-utils (pdftoppm, pdftotext) and paper/paper.pdf")


def _pages() -> int:
    import subprocess
    return int(re.search(r"Pages:\s+(\d+)", subprocess.run(["pdfinfo", str(PDF)], capture_output=True,
                                                           text=True).stdout).group(1))


def _page_text(pages: int) -> list[str]:
    import subprocess
    return [subprocess.run(["pdftotext", "-f", str(i), "-l", str(i), "-layout", str(PDF), "-"], capture_output=True,
                           text=True).stdout for i in range(1, pages + 1)]


def _lines(pdf=PDF) -> list[list[tuple[float, float, str]]]:
    """Each page's lines of text as (top, height, text), top to bottom."""
    import subprocess
    from xml.etree import ElementTree as ET
    xml = subprocess.run(["pdftotext", "-bbox-layout", str(pdf), "-"], capture_output=True, text=True).stdout
    root = ET.fromstring(re.sub(r'xmlns="[^"]+"', "", xml))
    return [sorted((float(ln.get("yMin")), float(ln.get("yMax")) - float(ln.get("yMin")),
                    " ".join(w.text for w in ln.iter("word"))) for ln in page.iter("line")) for page in root.iter("page")]


def _ink_rows(tmp_path) -> list[tuple[np.ndarray, int]]:
    """Each page's printable area (A4, 14 mm margins top and bottom) at 50 dpi: which pixel rows carry ink,
    and the page's height in rows."""
    import subprocess
    from PIL import Image
    subprocess.run(["pdftoppm", "-png", "-r", "50", str(PDF), str(tmp_path / "pg")], check=True)
    out = []
    for f in sorted(tmp_path.glob("pg-*.png")):
        a = np.asarray(Image.open(f).convert("L"))
        top, bottom = int(a.shape[0] * 14 / 297), int(a.shape[0] * 283 / 297)
        out.append(((a[top:bottom] < 180).any(axis=1), a.shape[0]))
    return out


@needs_pdf
def test_the_pdf_reads_as_a_paper(tmp_path):
    """The committed PDF: its title is the paper's; the main text (to the references) is at most 8 pages and
    the whole at most 18 (the appendix holds every registered study's tables); no page is more than 40% blank (the longest run of empty rows in the printable
    area); no page but the last of the main text and the last of all has more than 15% of its printable
    height empty at its foot (a figure or table that moved on leaves no hole); the last page is not an orphan."""
    import subprocess
    info = subprocess.run(["pdfinfo", str(PDF)], capture_output=True, text=True).stdout
    assert "Title:           Exclusive Self-Attention under Muon" in info
    pages = int(re.search(r"Pages:\s+(\d+)", info).group(1))
    assert pages <= 18, f"{pages} pages"
    text = _page_text(pages)
    references = next(i for i, t in enumerate(text) if re.search(r"^\s*References\s*$", t, re.M))
    assert references + 1 <= 8, f"the main text runs to page {references + 1}"
    # the main text's last page: the references' own, unless they open it
    opens = not text[references].split("References")[0].strip()
    main_last = references - 1 if opens else references
    for i, (rows, _) in enumerate(_ink_rows(tmp_path)):
        run = longest = 0
        for dark in rows:
            run = 0 if dark else run + 1
            longest = max(longest, run)
        if i + 1 < pages:
            assert longest / len(rows) <= 0.40, f"page {i + 1} is {longest / len(rows):.0%} blank"
        else:
            assert rows.mean() > 0.1, f"the last page holds almost nothing ({rows.mean():.0%} of its rows)"
        foot = (len(rows) - 1 - np.flatnonzero(rows)[-1]) / len(rows)
        if i not in (main_last, pages - 1):
            assert foot <= 0.15, f"page {i + 1}: {foot:.0%} of its height empty at its foot"


@needs_pdf
def test_every_caption_is_on_its_table_or_figures_page():
    """A table's caption is above it and never ends a page without it (a block of the table follows the
    caption on its page); a figure's caption is on a page that holds at least as many images as captions."""
    import subprocess
    pages = _lines()
    stranded = []
    for i, lines in enumerate(pages):
        for j, (_, height, text) in enumerate(lines):
            # a table's rows are set smaller than the caption's text: one of them follows it on its page
            if re.match(r"Table A?\d+\. ", text) and not any(h < 0.9 * height for _, h, _ in lines[j + 1:]):
                stranded.append(f"page {i + 1}: {text[:40]}")
    assert stranded == [], f"table captions apart from their tables: {stranded}"
    listed = subprocess.run(["pdfimages", "-list", str(PDF)], capture_output=True, text=True).stdout.splitlines()[2:]
    images = [int(line.split()[0]) for line in listed if line.split()[2] == "image"]
    captions = [i + 1 for i, lines in enumerate(pages) for _, _, t in lines if re.match(r"Figure A?\d+\. ", t)]
    assert captions, "no figure caption found"
    apart = [p for p in set(captions) if images.count(p) < captions.count(p)]
    assert apart == [], f"pages with a figure's caption and not its figure: {apart}"


@needs_pdf
def test_no_table_runs_off_the_page():
    """Every table's caption is printed whole in the PDF: a table wider than the page is cut at its edge, and its
    caption (set at the table's width) with it, so a cut caption is a table cut (Table A9 once lost its last
    column and the end of every caption line)."""
    import subprocess
    md = (REPO_ROOT / "paper" / "paper.md").read_text()
    norm = lambda t: re.sub(r"[\s\u00ad]+", "", t.replace("\u2011", "-").replace("\u2019", "'"))
    pdf = norm(subprocess.run(["pdftotext", str(PDF), "-"], capture_output=True, text=True).stdout)
    captions = re.findall(r"\*\*(Table A?\d+\.)\*\* (.+)", md)
    assert len(captions) >= 8, captions
    cut = [name for name, caption in captions
           if norm(name + re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", re.sub(r"[*`]", "", caption))) not in pdf]
    assert cut == [], f"tables cut at the page's edge: {cut}"


@needs_pdf
def test_no_path_is_broken_across_lines():
    """Every path, file or command the paper sets in code font is printed whole on one line."""
    spans = set(re.findall(r"`([^`\n]*[/.][^`\n]*)`", (REPO_ROOT / "paper" / "paper.md").read_text()))
    spans = {s for s in spans if "/" in s or re.search(r"\.(md|csv|json|py)$", s)}
    assert len(spans) >= 5, spans
    lines = [ln.replace("\u2011", "-") for t in _page_text(_pages()) for ln in t.splitlines()]
    broken = sorted(s for s in spans if not any(s in ln for ln in lines))
    assert broken == [], f"paths broken across lines: {broken}"


def test_figure_titles_typeset_their_math():
    """Panel titles with a subscript or a relation are matplotlib mathtext ($...$), never ASCII (y_i, i != j)."""
    from xsa.diagnostics import METRIC_LABELS
    from xsa.report.figures import DIAG_TITLES
    for title in [*DIAG_TITLES.values(), *METRIC_LABELS.values()]:
        outside = re.sub(r"\$[^$]*\$", "", title)
        assert "_" not in outside and "!=" not in outside and "^" not in outside, title
    assert all("$" in DIAG_TITLES[k] for k in ("cos_y_v", "diag_mass", "first_mass", "cos_v_v"))


@needs_pdf
def test_each_appendix_table_has_its_own_caption_and_space():
    """Every appendix table's caption stands apart from whatever precedes it (the last table's rows ran
    into the next caption, 2 pt apart): at least 10 pt of white above it on its page."""
    import subprocess
    from xml.etree import ElementTree as ET
    xml = subprocess.run(["pdftotext", "-bbox-layout", str(PDF), "-"], capture_output=True, text=True).stdout
    root = ET.fromstring(re.sub(r'xmlns="[^"]+"', "", xml))
    captions, gaps = set(), {}
    for page in root.iter("page"):
        lines = sorted((float(ln.get("yMin")), float(ln.get("yMax")), " ".join(w.text for w in ln.iter("word")))
                       for ln in page.iter("line"))
        for i, (top, _, text) in enumerate(lines):
            if re.match(r"Table A\d+\.", text):
                captions.add(text.split(".")[0])
                above = max((ln[1] for ln in lines[:i] if ln[1] <= top + 0.5), default=None)
                if above is not None:  # a caption at the top of its page has the page's margin above it
                    gaps[text.split(".")[0]] = top - above
    assert len(captions) >= 5 and len(gaps) >= 3, (captions, gaps)
    assert all(g >= 10 for g in gaps.values()), gaps


@needs_pdf
def test_the_paper_has_no_stray_markup():
    """A line of prose that starts with ':' becomes a definition list in Markdown (the conclusion once
    did): the exported paper holds none, and no raw Jinja or Markdown marker leaks into it."""
    html = (REPO_ROOT / "paper" / "paper.html").read_text()
    assert "<dl>" not in html and "{{" not in html and "{%" not in html
    # one level-1 heading, the title: a line of prose that starts with '#' (an issue number) is none
    assert html.count("<h1") == 1, re.findall(r"<h1[^>]*>(.{0,60})", html)
    text = "\n".join(_page_text(int(re.search(r"Pages:\s+(\d+)", __import__("subprocess").run(
        ["pdfinfo", str(PDF)], capture_output=True, text=True).stdout).group(1))))
    assert "**" not in text and "a_ii" not in text


def _paper_to_export(tmp_path, pdf: bytes):
    """An executed paper notebook with a title, and a paper folder holding an earlier paper.pdf."""
    import nbformat
    nb = nbformat.v4.new_notebook()
    cell = nbformat.v4.new_code_cell("")
    cell.outputs = [nbformat.v4.new_output("display_data", data={"text/markdown": "# A title\n\nText."})]
    nb.cells = [cell]
    executed = tmp_path / "05_paper.ipynb"
    nbformat.write(nb, str(executed))
    out_dir = tmp_path / "paper"
    out_dir.mkdir()
    (out_dir / "paper.pdf").write_bytes(pdf)
    return executed, out_dir


def test_without_a_pdf_engine_no_older_pdf_is_left_and_the_date_is_the_papers_runs(tmp_path, monkeypatch):
    from xsa.report import export as paper
    executed, out_dir = _paper_to_export(tmp_path, b"%PDF- an older build")
    monkeypatch.setattr(paper, "pdf_engine", lambda: None)
    out = paper.export_paper(executed, out_dir)
    assert out["pdf"] is None and not (out_dir / "paper.pdf").exists()
    assert "<title>A title</title>" in (out_dir / "paper.html").read_text()  # the PDF's title, where one is printed
    # the paper's date: the newest record of the runs it reads, never another study's (an ignored smoke run)
    for run, date in (("mine_s0", "2026-01-02T00:00:00+00:00"), ("smoke_base_s0", "2026-12-31T00:00:00+00:00")):
        atomic_write_json(tmp_path / "runs" / run / "provenance.json", {"date": date})
    monkeypatch.delenv("SOURCE_DATE_EPOCH", raising=False)
    assert paper.source_date(tmp_path, ["mine_s0"]).isoformat() == "2026-01-02T00:00:00+00:00"
    assert paper.source_date(tmp_path).isoformat() == "2026-12-31T00:00:00+00:00"


def test_without_a_pdf_engine_a_committed_pdf_is_kept_and_said_so(tmp_path, monkeypatch):
    import subprocess

    from xsa.report import export as paper
    executed, out_dir = _paper_to_export(tmp_path, b"%PDF- the committed build")
    git = lambda *a: subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *a], cwd=tmp_path,
                                    check=True, capture_output=True)
    git("init", "-q")
    git("add", "paper/paper.pdf")
    git("commit", "-qm", "paper")
    monkeypatch.setattr(paper, "pdf_engine", lambda: None)
    out = paper.export_paper(executed, out_dir)
    assert out["pdf"] is None and out["kept"]
    assert (out_dir / "paper.pdf").read_bytes() == b"%PDF- the committed build"


def test_a_compound_statement_is_checked_whole():
    """"excludes zero and the seed paper's effect" is one claim against both values: an interval that
    excludes zero but contains the seed paper's effect fails it whole."""
    from xsa.books.estimates import Book, Estimate
    from xsa.report.writing import Paper
    e = Estimate("prediction_d12", -0.019, -0.0368, -0.0011, n=10, seed_paper=-0.0032)
    paper = Paper(Book({"scale": {"prediction_d12": e}}), {}, lambda *a, **k: "")
    assert paper.claim("scale.prediction_d12", "excludes", against=0.0) == "excludes"
    assert paper.claim("scale.prediction_d12", "excludes", against=[0.0, "seed paper"]) != "excludes"
    assert "against seed paper" in paper.stale[-1]
    assert paper.claim("scale.prediction_d12", "includes", against="seed paper") == "includes"
