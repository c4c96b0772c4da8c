"""The benchmark against nanochat's own step (xsa/against.py), on a stub checkout: it imports the
given folder's nanochat.gpt (never downloads), builds and compiles it as base_train does, and
writes a record of the ABBA ratio."""

import json
import subprocess
import sys
import textwrap

from conftest import REPO

STUB = '''
from dataclasses import dataclass
import torch
import torch.nn as nn
import torch.nn.functional as F

@dataclass
class GPTConfig:
    sequence_len: int = 64
    vocab_size: int = 2048
    n_layer: int = 2
    n_head: int = 2
    n_kv_head: int = 2
    n_embd: int = 64

class GPT(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.config = config
        self.wte = nn.Embedding(config.vocab_size, config.n_embd)
        self.lm_head = nn.Linear(config.n_embd, config.vocab_size, bias=False)

    def init_weights(self):
        torch.nn.init.normal_(self.wte.weight, std=1.0)
        torch.nn.init.normal_(self.lm_head.weight, std=0.01)

    def setup_optimizer(self, unembedding_lr, embedding_lr, matrix_lr, weight_decay, scalar_lr):
        return torch.optim.SGD(self.parameters(), lr=matrix_lr)

    def forward(self, idx, targets=None):
        logits = self.lm_head(self.wte(idx))
        return F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))
'''


def test_against_a_stub_nanochat_writes_its_ratio(tmp_path):
    (tmp_path / "nc" / "nanochat").mkdir(parents=True)
    (tmp_path / "nc" / "nanochat" / "__init__.py").write_text("")
    (tmp_path / "nc" / "nanochat" / "gpt.py").write_text(textwrap.dedent(STUB))
    out = tmp_path / "r.json"
    cmd = [sys.executable, "-m", "xsa.against", "--nanochat", str(tmp_path / "nc"), "--preset", "smoke",
           "--pairs", "4", "--warmup", "1", "--eager", "--out", str(out)]
    res = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stderr[-2000:]
    r = json.loads(out.read_text())
    assert r["pairs"] == 4 and r["policy"] == "eager" and r["ratio_median"] > 0
    assert r["ratio_quartiles"][0] <= r["ratio_median"] <= r["ratio_quartiles"][1]
    # a folder without nanochat/gpt.py is refused, naming it, before any work
    bad = subprocess.run([*cmd[:4], str(tmp_path), *cmd[5:]], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2 and "nanochat/gpt.py" in bad.stderr
