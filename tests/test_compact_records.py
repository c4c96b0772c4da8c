"""Executed notebooks are kept small: a progress bar's refreshes become its last state, a per-run
stage keeps no images (its record draws them again), and rewriting a kept notebook changes nothing."""

from __future__ import annotations

import nbformat
import pytest

from xsa.pipeline import compact, main


def _notebook(stage: str):
    nb = nbformat.v4.new_notebook()
    cell = nbformat.v4.new_code_cell("train()")
    bars = [nbformat.v4.new_output("stream", name="stderr", text=f"\rrun: {i}%|") for i in range(100)]
    cell.outputs = [nbformat.v4.new_output("stream", name="stdout", text="start\n"), *bars,
                    nbformat.v4.new_output("stream", name="stdout", text="step 96: val bpb 2.0\n"),
                    nbformat.v4.new_output("display_data", data={"image/png": "iVBOR", "text/plain": "<Figure>"})]
    nb.cells = [cell]
    nb.metadata["xsa"] = {"stage": stage, "job": "x", "inputs": "abc"}
    return nb


@pytest.mark.parametrize("stage", ["train", "paper"])
def test_progress_is_kept_at_its_last_state_and_a_run_keeps_no_image(stage):
    out = compact(_notebook(stage), stage).cells[0].outputs
    streams = [o for o in out if o.output_type == "stream"]
    assert [o.text for o in streams] == ["start\n", "run: 99%|", "step 96: val bpb 2.0\n"]
    images = [o for o in out if "image/png" in o.get("data", {})]
    assert len(images) == (0 if stage == "train" else 1)


def test_rewriting_the_kept_records_is_done_once(tmp_path, capsys):
    from xsa.report.export import stable_notebook
    path = tmp_path / "executed" / "default" / "01_train" / "run.ipynb"
    path.parent.mkdir(parents=True)
    path.write_text(stable_notebook(_notebook("train")))
    before = path.stat().st_size
    with pytest.raises(SystemExit):  # only the pipeline's own records
        main(["--compact-records", str(tmp_path)])
    args = ["--results", str(tmp_path), "--compact-records", str(tmp_path / "executed")]
    assert main(args) == 0
    once = path.read_text()
    assert len(once) < before and "run: 99%" in once and "run: 98%" not in once
    assert nbformat.reads(once, as_version=4).metadata["xsa"]["inputs"] == "abc"  # still up to date
    assert main(args) == 0
    assert path.read_text() == once
    with pytest.raises(SystemExit):
        main(["--results", str(tmp_path), "--compact-records", str(tmp_path / "executed" / "missing")])
