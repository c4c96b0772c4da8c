"""Why the optimizers' gradient reduces cannot overlap the backward pass (docs/gpu.md, "Communication
under torchrun"): the model is compiled whole (xsa/stack/step.py, as nanochat's base_train), so its
backward is one autograd node, which hands every parameter its gradient when it returns. A hook that
launched each reduce as its gradient became final (Tensor.register_post_accumulate_grad_hook) would
fire only after the last backward kernel was queued, where step() launches the reduces today. Eager,
the gradients come out layer by layer, which shows the check can tell the two apart.

The compiled model uses the aot_eager backend: the graph that dynamo captures and AOTAutograd splits
into forward and backward is the one inductor gets on the GPU path; only inductor's code generation,
the slow part on a CPU, is left out.
"""

import pytest
import torch

from xsa.stack.model import GPT
from xsa.stack.presets import make_config


def gradient_producers(loss: torch.Tensor) -> dict[str, set[str]]:
    """{backward node name: names of the parameters it hands their gradient} over loss's graph."""
    seen, stack, out = set(), [loss.grad_fn], {}
    keep = []  # the visited nodes stay alive, so no id in `seen` is reused by another node
    while stack:
        node = stack.pop()
        if node is None or id(node) in seen:
            continue
        seen.add(id(node))
        keep.append(node)
        for child, _ in node.next_functions:
            if child is not None and hasattr(child, "variable"):  # an AccumulateGrad: a leaf's gradient
                out.setdefault(f"{node.name()}#{id(node)}", set()).add(id(child.variable))
            stack.append(child)
    return out


@pytest.mark.parametrize("compiled", [True, False])
def test_whole_model_backward_gives_every_gradient_at_its_end(compiled):
    cfg = make_config("smoke")
    torch.manual_seed(0)
    model = GPT(cfg.model)
    model.init_weights()
    forward = torch.compile(model, dynamic=False, backend="aot_eager") if compiled else model
    x = torch.randint(0, cfg.model.vocab_size, (2, cfg.model.sequence_len))
    producers = gradient_producers(forward(x, x))
    params = {id(p) for p in model.parameters()}
    assert set().union(*producers.values()) == params  # every parameter's gradient is accounted for
    if compiled:
        # one node makes them all: no gradient is final before the whole backward is
        assert len(producers) == 1 and next(iter(producers)).startswith("CompiledFunctionBackward")
    else:
        assert len(producers) > 2 * cfg.model.n_layer
