"""The interactive path: JupyterLab (headless) + Chromium (Playwright) runs 00_validation.ipynb and
05_paper.ipynb.

papermill checks the notebooks as scripts; this checks them as a reader uses them: open the
notebook in JupyterLab in a real browser (served from a folder of its own, as `jupyter lab
notebooks/` serves notebooks/), Run All Cells, and find no error output; the paper notebook must
find the repository's records (not an empty paper) and write nothing beside itself.
"""

import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
import uuid
from pathlib import Path

import nbformat
import pytest

from xsa.base.records import REPO_ROOT

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
                 "--no-first-run", "--disable-sync"]

pytestmark = pytest.mark.skipif(not Path(CHROMIUM).exists(),
                                reason=f"{CHROMIUM} not installed (`make test` installs Debian's chromium)")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(params=["00_validation.ipynb", "05_paper.ipynb"])
def jupyterlab(request, tmp_path):
    """A JupyterLab server on a random local port with a random token, serving a copy of the notebook
    (the browser saves it, so the repo's output-free notebook is never touched)."""
    notebook = request.param
    shutil.copy(REPO_ROOT / "notebooks" / notebook, tmp_path / notebook)
    port, token = free_port(), uuid.uuid4().hex
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO_ROOT), os.environ.get("PYTHONPATH")])),
           "JUPYTER_CONFIG_DIR": str(tmp_path / ".jupyter"), "JUPYTER_RUNTIME_DIR": str(tmp_path / ".runtime")}
    cmd = [sys.executable, "-m", "jupyterlab", "--no-browser", "--ip=127.0.0.1", f"--port={port}",
           f"--IdentityProvider.token={token}", f"--ServerApp.root_dir={tmp_path}",
           "--LabApp.news_url=", "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate"]
    if os.geteuid() == 0:  # containers and CI runners often run as root; JupyterLab refuses without this
        cmd.append("--allow-root")
    log = open(tmp_path / "jupyterlab.log", "w")
    proc = subprocess.Popen(cmd, cwd=tmp_path, env=env, stdout=log, stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"
    try:
        for _ in range(120):
            try:
                urllib.request.urlopen(f"{base}/api/status?token={token}", timeout=2)
                break
            except OSError:
                assert proc.poll() is None, (tmp_path / "jupyterlab.log").read_text()
                time.sleep(0.5)
        yield base, token, tmp_path, notebook
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.close()


def test_notebook_runs_in_browser(jupyterlab):
    from playwright.sync_api import TimeoutError as PlaywrightTimeout
    from playwright.sync_api import sync_playwright

    base, token, root, NOTEBOOK = jupyterlab
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
        try:
            page = browser.new_page()
            page.goto(f"{base}/lab/tree/{NOTEBOOK}?token={token}")
            page.wait_for_selector(".jp-Notebook .jp-Cell", timeout=60_000)
            # a fresh JupyterLab may ask which kernel to start: take the notebook's own (python3)
            accept = page.locator(".jp-Dialog .jp-mod-accept")
            try:
                accept.wait_for(timeout=10_000)
                accept.click()
            except PlaywrightTimeout:
                pass
            # wait for the kernel to be ready before running
            page.wait_for_selector(".jp-Notebook-ExecutionIndicator[data-status='idle']", timeout=60_000)
            page.locator(".lm-MenuBar-itemLabel", has_text="Run").first.click()
            page.locator(".lm-Menu-itemLabel", has_text="Run All Cells").first.click()
            # Run All marks every cell queued ("[*]:") at once; it is over when the first cell has a
            # count ("[1]:") and none is queued. An error stops the queue, leaving later cells "[ ]:".
            try:
                page.wait_for_function(
                    """() => {
                        const prompts = [...document.querySelectorAll('.jp-CodeCell .jp-InputPrompt')];
                        return prompts.length > 0 && /\\[\\d+\\]/.test(prompts[0].textContent)
                            && prompts.every(p => !p.textContent.includes('*'));
                    }""", timeout=300_000)
            except PlaywrightTimeout:
                page.screenshot(path=str(root / "timeout.png"), full_page=True)
                prompts = page.locator(".jp-CodeCell .jp-InputPrompt").all_text_contents()
                pytest.fail(f"cells did not finish within 300 s; prompts {prompts}; screenshot {root / 'timeout.png'}")
            dom_errors = page.locator(".jp-OutputArea-output[data-mime-type='application/vnd.jupyter.stderr']",
                                      has_text="Traceback").count()
            page.keyboard.press("Control+s")
            page.wait_for_function("() => !document.querySelector('.jp-mod-dirty')", timeout=30_000)
        finally:
            browser.close()

    nb = nbformat.read(root / NOTEBOOK, as_version=4)
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert all(c.execution_count for c in code), "not every cell ran"
    errors = [o for c in code for o in c.outputs if o.output_type == "error"]
    assert not errors and dom_errors == 0, errors
    text = "".join(o.get("text", "") for c in code for o in c.outputs)
    shown = "".join(o.get("data", {}).get("text/markdown", "") for c in code for o in c.outputs)
    if NOTEBOOK == "00_validation.ipynb":
        assert "checks passed" in text
    else:  # the paper of the committed records, built from notebooks/' point of view
        assert "**Abstract.**" in shown and "not complete yet" not in shown and "_no records_" not in shown
        assert "paired seeds" in shown and "Table A1." in shown and "Figure 1." in shown
        assert not (root / "results").exists(), "the notebook wrote results/ beside itself"
