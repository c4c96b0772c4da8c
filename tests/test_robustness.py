"""The robustness table (xsa/report/robust.py) on records made up for the test: the robust study's
rows estimate on their own seeds only (never the LR-selection seeds), a run still training is not a
record yet, a damaged one stops the table, and the secondary family is Holm-adjusted."""

import math

import pytest

from xsa.base.records import append_jsonl, atomic_write_json
from xsa.checks.integrity import RecordError
from xsa.report.robust import robustness
from xsa.base.stats import holm, t_pvalue
from xsa.stack.spec import Arm
from xsa.studies.registry import PICK, Study, get_study, xsa_pair

D4 = [Arm.of("cpu-w64-d4", cpu_compile=True), Arm.of("cpu-w64-d4", cpu_compile=True, xsa_alpha=1.0)]


def test_t_pvalue_and_holm_by_hand():
    assert t_pvalue(2.262157, 1.0 * math.sqrt(10), 10) == pytest.approx(0.05, abs=1e-5)  # t = 2.262, df 9
    assert t_pvalue(None, 1.0, 5) is None and t_pvalue(1.0, 1.0, 1) is None
    # sorted 0.01, 0.03, 0.04 and one not run (p = 1): 4 x 0.01, 3 x 0.03, max(0.09, 2 x 0.04)
    adjusted = holm([0.04, 0.01, None, 0.03])
    assert adjusted[1] == pytest.approx(0.04) and adjusted[3] == pytest.approx(0.09)
    assert adjusted[0] == pytest.approx(0.09) and adjusted[2] is None


def whole(results, run, bpb, date="2026-12-02T01:00:00+00:00"):
    """A run's record as the pipeline leaves it once trained (diagnostics aside)."""
    d, cfg = results / "runs" / run.run_id, run.config()
    n = cfg.num_iterations
    atomic_write_json(d / "config.json", cfg.to_dict())
    for step in sorted({*range(0, n, cfg.eval_every), n}):  # every scheduled evaluation
        append_jsonl(d / "metrics.jsonl", {"step": step, "val_bpb": bpb})
    atomic_write_json(d / "summary.json", dict(complete=True, val_bpb=bpb, steps=n, num_iterations=n,
                                               config_hash=cfg.config_hash()))
    atomic_write_json(d / "provenance.json", dict(date=date, seed=run.seed, config_hash=cfg.config_hash()))


@pytest.fixture
def results(tmp_path):
    return robust_records(tmp_path)


def robust_records(tmp_path):
    """Grids whose bowls put the baseline at 0.04 and XSA at 0.08; 12 primary pairs at -0.2/-0.3/-0.4%;
    6 pairs at T = 256 at -1%."""
    for arm, best in zip(D4, (0.045, 0.09)):
        for run in PICK.runs(tmp_path, arm):
            whole(tmp_path, run, 2.0 + 0.1 * math.log2(run.config().matrix_lr / best) ** 2 + 0.001 * run.seed,
                  date="2026-12-02T00:20:00+00:00")
    robust = get_study("robust", tmp_path)
    p = robust.comparison(robust.primary)
    for s in range(100, 112):
        base = 2.0 + 0.001 * s
        whole(tmp_path, p.a.run(s), base)
        whole(tmp_path, p.b.run(s), base * (1 - 0.003 - 0.001 * (s % 3 - 1)))
    t256 = robust.comparison("cpu-w64-d4 tuned T=256")
    for s in range(100, 106):
        whole(tmp_path, t256.a.run(s), 2.1)
        whole(tmp_path, t256.b.run(s), 2.1 * (0.99 + 0.0001 * (s % 2)))
    return tmp_path


def the_study(results):
    """A recipe-LR study with no records of its own, whose robustness table is the robust study's."""
    pair = xsa_pair("cpu-w64-d4")
    return Study(name="t", scale="test scale", runs=(), main=(pair,), primary=pair.name, robustness="robust",
                 claims=get_study("default").claims)  # the seed paper's -0.32% beside cpu-w64-d4


def rob(results, interim: bool = True):
    """The robustness table of the_study beside the robust study's records under `results` (interim:
    the robust study declares runs these records do not have)."""
    from xsa.books.declared import study_estimates
    study = the_study(results)
    return robustness(study, [], results, study_estimates(study, [], [], {}), interim=interim)


def test_rows_estimate_on_their_own_seeds_and_holm_adjusts_the_family(results):
    out = rob(results)
    rows = {r["condition"]: r for r in out["rows"]}
    primary = next(r for r in out["rows"] if r["family"] == "primary")
    # the primary arms share seeds 0-2 with the grid; only seeds 100-111 enter the estimate
    assert primary["n"] == 12 and primary["declared"] == 12 and primary["status"] == "complete"
    assert primary["rel"] == pytest.approx(-0.003, abs=2e-5) and primary["matrix_lr"] == "0.04 / 0.08"
    assert primary["excludes_zero"] and not primary["excludes_seed_paper"]  # -0.3% +/- 0.05%: includes -0.318%
    assert primary["tokens_per_param"] == pytest.approx(3.428, abs=1e-3)  # nanochat's unit
    t256 = rows["tuned, T = 256"]
    assert t256["n"] == 6 and t256["seq_len"] == 256 and t256["excludes_zero"]
    assert t256["p_holm"] is not None and t256["p_holm"] >= t256["p"]
    family = [r for r in out["rows"] if r["family"] == "secondary"]
    assert len(family) == 7 and sum(r["p_holm"] is not None for r in family) == 1
    assert rows["tuned, 2 heads (width 128)"]["status"].startswith("not run")
    assert rows["last 2 layers vs baseline"]["status"] == "interim 0/6"
    chosen = {(r["grid"], r["matrix_lr"]) for r in out["selection"] if r["selected"]}
    assert chosen == {("lr_grid_base", 0.04), ("lr_grid_xsa", 0.08)}
    primary_grid = [r for r in out["selection"] if r["preset"] == "cpu-w64-d4"]
    assert primary_grid and all(r["n"] == len(PICK.seeds) for r in primary_grid)  # selection seeds only
    # the heads preset's grids are declared once the primary's LRs are chosen; none trained here
    assert {r["grid"] for r in out["selection"]} - {r["grid"] for r in primary_grid} == {
        "heads_lr_grid_base", "heads_lr_grid_xsa"}
    assert all(r["n"] == 0 for r in out["selection"] if r["preset"] == "cpu-w128-d4")


def test_a_run_still_training_is_not_a_record_but_a_damaged_one_stops_the_table(results):
    robust = get_study("robust", results)
    last = robust.comparison("last half vs baseline").b
    d = results / "runs" / last.run(100).run_id  # training: config and a first metrics line only
    atomic_write_json(d / "config.json", last.run(100).config().to_dict())
    append_jsonl(d / "metrics.jsonl", {"step": 0, "val_bpb": 3.0})
    assert rob(results)["rows"]  # counted as not trained yet
    t256 = robust.comparison("cpu-w64-d4 tuned T=256").b.run(103)
    summary = results / "runs" / t256.run_id / "summary.json"
    atomic_write_json(summary, dict(complete=True, val_bpb=float("nan"), steps=1, num_iterations=1))
    with pytest.raises(RecordError, match=t256.run_id):
        rob(results)


def test_a_declared_run_without_a_record_stops_the_table_unless_interim(results):
    """The robust study declares runs that have no record here: by default the table stops naming
    them; an interim table is built only when asked, and its open rows say so."""
    robust = get_study("robust", results)
    missing = robust.comparison("last half vs baseline").b.run(100).run_id
    with pytest.raises(RecordError, match=f"{missing}: no summary.json"):
        rob(results, interim=False)
    assert any(r["status"].startswith("interim") for r in rob(results)["rows"])


def test_the_default_study_reports_the_robust_study():
    assert get_study("default").robustness == "robust"
    assert get_study("smoke").robustness == ""  # a study without one reports none


def test_the_adamw_group_check_says_whether_the_optimum_moved(results):
    from xsa.studies.registry import GROUP_SEEDS, group_arms
    robust = get_study("robust", results)
    tuned = robust.comparison(robust.primary).a
    arms = group_arms(D4[0], tuned, PICK.grid)
    for scale, best in ((0.5, 0.02), (2.0, 0.04)):  # at x0.5 the bowl's minimum moves below 0.04
        for arm in arms[scale]:
            for s in GROUP_SEEDS:
                whole(results, arm.run(s), 2.0 + 0.1 * math.log2(arm.get("matrix_lr") / best) ** 2)
    est = rob(results)["estimates"]
    # the baseline's two scales are recorded whole: at x0.5 the optimum moved, at x2 it did not; XSA's
    # arms are not trained, so they are not counted (no verdict)
    assert (est["group_checked"].value, est["group_moved"].value) == (2, 1)
    assert len(est["group_moved"].runs) == 2 * len(GROUP_SEEDS) * len(arms[0.5])


def test_an_archived_study_is_restored_byte_for_byte_and_read_as_rows(tmp_path):
    import subprocess

    from xsa.archive import ARCHIVE, restore
    from xsa.base.records import REPO_ROOT
    from xsa.report.rows import archived_rows
    from xsa.studies.registry import EARLIER
    if subprocess.run(["git", "cat-file", "-e", EARLIER.commit], cwd=REPO_ROOT).returncode != 0:
        pytest.skip(f"this checkout's history does not hold {EARLIER.commit}")
    written = restore(EARLIER.commit, tmp_path)
    root = tmp_path / ARCHIVE / EARLIER.commit
    committed = REPO_ROOT / "results" / ARCHIVE / EARLIER.commit
    assert written and all(p.read_bytes() == (committed / p.relative_to(root)).read_bytes() for p in written)
    assert restore(EARLIER.commit, tmp_path) == []  # again: nothing to write
    victim = written[0]
    victim.write_text("{}")
    with pytest.raises(SystemExit, match=victim.name):
        restore(EARLIER.commit, tmp_path)  # a different file is never overwritten
    from xsa.books.declared import archive_estimates
    est = archive_estimates(Study(name="t", scale="", runs=(), main=(), archived=(EARLIER,)), REPO_ROOT / "results")
    rows = archived_rows(committed, EARLIER, est, -0.0032)
    assert [r["heads"] for r in rows] == [4, 6, 4] and all(r["n"] == 3 for r in rows)
    assert all(r["rel"] > 0 and not r["excludes_zero"] for r in rows)  # worse on average, no interval decides
    assert rows[2]["matrix_lr"].endswith("(AdamW)")
    missing = archived_rows(tmp_path / "nowhere", EARLIER, {}, -0.0032)
    assert missing[0]["status"] == "not restored" and "xsa.archive" in missing[0]["condition"]


@pytest.mark.parametrize("commit", ["HEAD", "--help", "-x", "main", "30bc3ae~1", "1234567"])
def test_the_archive_takes_only_a_declared_commit_hash(commit, tmp_path):
    import subprocess
    import sys

    from xsa.base.records import REPO_ROOT
    out = subprocess.run([sys.executable, "-m", "xsa.archive", f"--commit={commit}", "--results", str(tmp_path)],
                         cwd=REPO_ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 2 and "--commit" in out.stderr and "Traceback" not in out.stderr, out.stderr
    assert not (tmp_path / "archive").exists()


def test_the_archive_reads_git_without_replace_objects_and_never_leaves_a_partial_one(tmp_path, monkeypatch):
    import subprocess

    import xsa.archive as archive
    from xsa.base.records import REPO_ROOT
    from xsa.studies.registry import EARLIER
    if subprocess.run(["git", "cat-file", "-e", EARLIER.commit], cwd=REPO_ROOT).returncode != 0:
        pytest.skip(f"this checkout's history does not hold {EARLIER.commit}")
    clone = tmp_path / "clone"
    subprocess.run(["git", "clone", "-q", "--shared", "--no-checkout", str(REPO_ROOT), str(clone)], check=True)
    git = lambda *a: subprocess.run(["git", *a], cwd=clone, check=True, capture_output=True, text=True).stdout.strip()
    rel = sorted(archive.manifest(EARLIER.commit))[0]
    blob = git("rev-parse", f"{EARLIER.commit}:results/{rel}")
    forged = subprocess.run(["git", "hash-object", "-w", "--stdin"], cwd=clone, input='{"forged": 1}\n',
                            capture_output=True, text=True, check=True).stdout.strip()
    git("replace", blob, forged)
    assert git("show", f"{EARLIER.commit}:results/{rel}") == '{"forged": 1}'  # what a plain git read gives
    monkeypatch.setattr(archive, "REPO_ROOT", clone)
    archive.restore(EARLIER.commit, tmp_path / "results")
    root = tmp_path / "results" / archive.ARCHIVE / EARLIER.commit
    assert (root / rel).read_bytes() == (REPO_ROOT / "results" / archive.ARCHIVE / EARLIER.commit / rel).read_bytes()
    # a read that fails half-way (a corrupt object, say) leaves no archive at all
    calls = iter(range(10**6))
    real = archive._git
    monkeypatch.setattr(archive, "_git", lambda *a: real(*a) if next(calls) < 5 else (_ for _ in ()).throw(
        SystemExit("git show: fatal: corrupt object")))
    with pytest.raises(SystemExit, match="corrupt object"):
        archive.restore(EARLIER.commit, tmp_path / "again")
    assert not (tmp_path / "again" / archive.ARCHIVE / EARLIER.commit).exists()
    assert not list((tmp_path / "again" / archive.ARCHIVE).glob(".*"))


@pytest.mark.parametrize("name", ["robust", "scale", "scale-check", "factorial", "d12-test", "sink", "optimizer"])
def test_the_preregistration_commit_is_the_one_that_added_it_before_the_first_run(name):
    import subprocess

    from xsa.prereg import FILENAME
    from xsa.base.records import REPO_ROOT, read_json
    study = get_study(name)
    commit, date = study.preregistered
    path = f"results/{study.name}/{FILENAME}"
    git = lambda *a: subprocess.run(["git", *a], cwd=REPO_ROOT, capture_output=True, text=True).stdout.strip()
    if git("rev-parse", "--is-shallow-repository") != "false" or not git("cat-file", "-t", commit):
        pytest.skip("this checkout's history cannot tell which commit added the pre-registration")
    added = git("log", "--diff-filter=A", "--format=%h %cI", "--", path).split()
    assert added[-2].startswith(commit[:7]) and added[-1][:16].replace("T", " ") == date
    runs = REPO_ROOT / "results" / "runs"
    # the records a study reuses by value from the study it builds on (registered knowing them)
    reuses = {"scale": "robust", "factorial": "robust", "sink": "factorial", "optimizer": "robust"}
    reused = {r.run_id for r in get_study(reuses[name]).runs} if name in reuses else set()
    dates = [read_json(runs / r.run_id / "provenance.json")["date"] for r in study.runs
             if r.run_id not in reused and (runs / r.run_id / "provenance.json").exists()]
    if name != "robust" and not dates:
        pytest.skip(f"no record of the {name} study's own runs yet")
    assert dates and min(dates)[:16].replace("T", " ") > date  # committed before every run's record


def test_the_logged_diagonal_is_the_last_evaluation_that_recorded_one():
    from xsa.checks.records import metric
    run = dict(metrics=[{"step": 1, "diag": {"diag_mass": [0.5, 0.5]}}, {"step": 2, "diag": {"diag_mass": [0.1, 0.3]}},
                        {"step": 3, "val_bpb": 2.0}])
    assert metric(run, "log:diag_mass") == pytest.approx(0.2)
    assert metric(dict(metrics=[{"step": 1, "val_bpb": 2.0}]), "log:diag_mass") is None
