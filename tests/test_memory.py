"""The optimizer-step memory probe (`measure_memory`): it reads during the probed step only, and counts
the optimizer's state."""

import torch

from solution.memory import PROBE_STEP, probe_memory


def test_probe_reads_at_its_step_and_counts_adam_state():
    torch.manual_seed(0)
    model = torch.nn.Linear(64, 32)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    reading = probe_memory(optimizer)
    params = sum(p.numel() * p.element_size() for p in model.parameters())
    for step in range(1, PROBE_STEP + 2):
        reading["step"] = step
        model(torch.randn(4, 64)).sum().backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        if step < PROBE_STEP:
            assert "live_tensor_bytes" not in reading  # nothing read before the probed step
    # Adam: two moments per parameter (the scalar step counters are left out).
    assert reading["optimizer_state_bytes"] == 2 * params
    # The parameters and both moments at least (gradients without a Python object are not seen).
    assert reading["live_tensor_bytes"] >= 3 * params
