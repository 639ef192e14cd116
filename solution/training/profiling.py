"""A few optimizer steps under torch.profiler, summed up in output_dir/profile.json (`profile_steps`).

The summary answers where a step's time goes: the wall time a step, the device's kernels a step and the
share of the wall time they keep it busy (on a GPU; a busy share well under 1 means the device waits for
the host), how often the host waited for the device (the CUDA runtime's synchronising calls), and the top
operators by their own time. Benchmarks read it; training never needs it.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import torch

SYNC_CALLS = ("cudaStreamSynchronize", "cudaDeviceSynchronize", "cudaEventSynchronize", "cudaMemcpy")
TOP = 12  # operators listed


class StepProfiler:
    """Profiles optimizer steps `first` .. `first + num_steps - 1` (one process's view; every rank may run
    one, the main process writes). `after_step(step)` is called after every optimizer step."""

    def __init__(self, out_dir: Path, first: int, num_steps: int, device: torch.device, write: bool = True):
        self.out, self.first, self.last = Path(out_dir), first, first + num_steps - 1
        self.device, self.write = device, write
        self.prof, self.t0 = None, 0.0

    def _sync(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    def after_step(self, step: int) -> None:
        if step == self.first - 1:
            from torch.profiler import ProfilerActivity, profile

            activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if self.device.type == "cuda" else [])
            self._sync()  # the window starts with an empty queue: its wall time is its steps' own
            self.prof = profile(activities=activities)
            self.prof.__enter__()
            self.t0 = time.perf_counter()
        elif step == self.last and self.prof is not None:
            self._sync()
            wall = time.perf_counter() - self.t0
            self.prof.__exit__(None, None, None)
            summary = summarise(self.prof, wall, self.last - self.first + 1, self.device)
            self.prof = None
            if self.write:
                self.out.mkdir(parents=True, exist_ok=True)
                (self.out / "profile.json").write_text(json.dumps(summary, indent=2) + "\n")


def short_name(name: str) -> str:
    """An operator's or kernel's name without its template arguments and signature (a CUDA kernel's full
    name runs to hundreds of characters of types)."""
    return name.split("<")[0].split("(")[0].strip() or name[:80]


def _busy_us(intervals: list) -> float:
    """The length of the union of (start, end) intervals: kernels on several streams may overlap."""
    total, end = 0.0, float("-inf")
    for s, e in sorted(intervals):
        if s > end:
            total, end = total + (e - s), e
        elif e > end:
            total, end = total + (e - end), e
    return total


def _self_time(avg, kind: str) -> float:
    """An averaged event's own time in µs on the device or the CPU, whatever torch calls the field."""
    names = ("self_device_time_total", "self_cuda_time_total") if kind == "device" else ("self_cpu_time_total",)
    for name in names:
        if hasattr(avg, name):
            return float(getattr(avg, name))
    return 0.0


def summarise(prof, wall_s: float, steps: int, device: torch.device) -> dict:
    """The profile.json record of `steps` optimizer steps that took `wall_s` seconds."""
    from torch.autograd import DeviceType

    events = list(prof.events())
    kernels = [e for e in events if getattr(e, "device_type", None) == DeviceType.CUDA]
    intervals = [(e.time_range.start, e.time_range.end) for e in kernels]
    syncs = {name: sum(e.name == name for e in events) for name in SYNC_CALLS}
    on_device = device.type == "cuda"
    averages = sorted(prof.key_averages(), key=lambda a: -_self_time(a, "device" if on_device else "cpu"))
    top = [{"name": short_name(a.key), "calls": int(a.count), "self_device_ms": _self_time(a, "device") / 1e3,
            "self_cpu_ms": _self_time(a, "cpu") / 1e3} for a in averages[:TOP]]
    busy_s = _busy_us(intervals) / 1e6
    return {"steps": steps, "wall_s_per_step": wall_s / steps, "device": str(device),
            "kernels_per_step": len(kernels) / steps,
            "kernel_s_per_step": sum(e.time_range.elapsed_us() for e in kernels) / 1e6 / steps,
            "device_busy_s_per_step": busy_s / steps,
            "device_busy_share": busy_s / wall_s if on_device and wall_s > 0 else None,
            "host_syncs_per_step": {k: v / steps for k, v in syncs.items()},
            "cpu_ops_per_step": sum(getattr(e, "device_type", DeviceType.CPU) == DeviceType.CPU for e in events) / steps,
            "top_operators": top}
