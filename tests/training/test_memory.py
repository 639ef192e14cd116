"""The optimizer-step memory probe (`measure_memory`): it reads during the probed step only, and counts
the optimizer's state. And the CPU heap setting (`cpu_retain_freed_memory`): it really stops the page faults."""

import os
import subprocess
import sys

import pytest
import torch
from conftest import ROOT

from solution.training.memory import PROBE_STEP, probe_memory


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


RETAIN_PROBE = """
import ctypes, resource
from solution.training.memory import retain_freed_memory

libc = ctypes.CDLL("libc.so.6")
libc.malloc.restype, libc.malloc.argtypes = ctypes.c_void_p, [ctypes.c_size_t]
libc.free.argtypes, libc.memset.argtypes = [ctypes.c_void_p], [ctypes.c_void_p, ctypes.c_int, ctypes.c_size_t]

def faults():  # page faults of allocating, writing and freeing 64 MiB four times
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    for _ in range(4):
        block = libc.malloc(64 << 20)
        libc.memset(block, 1, 64 << 20)
        libc.free(block)
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before

system = faults()
kept, line = retain_freed_memory()
faults()  # the heap grows to the high-water mark once
print(system, faults(), kept, line, sep="\\n")
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallopt: Linux only")
def test_retained_memory_serves_the_next_allocation_without_page_faults():
    """The system allocator maps and unmaps a 64 MiB block each time (16,384 faults of 4 KiB each); with
    freed memory retained the heap keeps it and the next allocations fault nothing. In a subprocess: the
    setting lasts for the life of the process."""
    proc = subprocess.run([sys.executable, "-c", RETAIN_PROBE], cwd=ROOT, capture_output=True, text=True,
                          timeout=120, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert proc.returncode == 0, proc.stderr[-2000:]
    system, retained, kept, line = proc.stdout.splitlines()[-4:]
    assert kept == "True" and line.startswith("freed memory kept"), line
    assert int(system) > 4 * 16384 * 0.9, system
    assert int(retained) < 1000, retained
