"""The virtual GPU behind each simulated engine, in the shape FakeNvml reads.

Memory is flat and nearly full, as on a real vLLM node: the CUDA context, the weights, the
activation reserve and the whole preallocated KV pool are held from the start, whatever the
load. Utilization is the busy fraction of the last second; power rises with it from idle, to
about 60% of max for memory-bound decode and to max for compute-bound prefill; temperature
follows power with a lag.
"""

from __future__ import annotations

import math
import os
from collections import deque
from collections.abc import Sequence
from typing import Any

import pynvml

from gpuwatch.sim.mig import MigSlice
from gpuwatch.sim.profiles import Profile

_WINDOW_S = 1.0
_THERMAL_TAU_S = 20.0


class VirtualGpu:
    def __init__(
        self, profile: Profile, index: int, seed: int = 0, mig: Sequence[MigSlice] = ()
    ) -> None:
        self.profile = profile
        self.index = index
        self.mig = list(mig)  # MIG mode with these devices when not empty
        self.uuid = f"GPU-5131{seed:04x}-{index:04x}-4000-8000-{(seed * 7919 + index):012x}"
        self._busy: deque[tuple[float, float, float]] = deque()  # (start, end, intensity)
        self._temp = 30.0 + profile.gpu.idle_w * 0.09
        self._temp_at: float | None = None
        # VRAM held beside vLLM's share: embedding and diffusion weights, image activations.
        self.side_bytes = 0

    def busy(self, start: float, end: float, intensity: float = 1.0) -> None:
        self._busy.append((start, end, intensity))
        while self._busy and self._busy[0][1] < end - _WINDOW_S:
            self._busy.popleft()

    def _window(self, now: float) -> tuple[float, float]:
        """(busy fraction, compute-weighted busy fraction) over the last second."""
        lo = now - _WINDOW_S
        busy = weighted = 0.0
        for s, e, intensity in self._busy:
            overlap = max(0.0, min(e, now) - max(s, lo))
            busy += overlap
            weighted += overlap * intensity
        return min(1.0, busy / _WINDOW_S), min(1.0, weighted / _WINDOW_S)

    def utilization(self, now: float) -> float:
        return self._window(now)[0]

    @property
    def used_bytes(self) -> int:
        p = self.profile
        return int(p.cuda_context_bytes + p.usable_bytes) + self.side_bytes

    def state(self, now: float) -> dict[str, Any]:
        gpu = self.profile.gpu
        util, compute = self._window(now)
        # Memory-bound decode draws about 60% of board power; compute-bound prefill all of it.
        power = gpu.idle_w + (gpu.max_w - gpu.idle_w) * (0.6 * util + 0.4 * compute)
        target = 30.0 + power * 0.09
        if self._temp_at is not None:
            self._temp += (target - self._temp) * (
                1 - math.exp(-(now - self._temp_at) / _THERMAL_TAU_S)
            )
        self._temp_at = now
        mask = pynvml.nvmlClocksEventReasonGpuIdle if util < 0.05 else 0
        if power > 0.97 * gpu.max_w:
            mask |= pynvml.nvmlClocksEventReasonSwPowerCap
        state: dict[str, Any] = {
            "name": gpu.name,
            "uuid": self.uuid,
            "memory_total": gpu.vram_bytes,
            "memory_used": self.used_bytes,
            "memory_reserved": 0,
            "utilization_gpu": round(util * 100),
            "utilization_memory": round(util * 85),
            "temperature_c": round(self._temp),
            "power_w": round(power, 1),
            "power_limit_w": gpu.max_w,
            "clock_sm_mhz": gpu.boost_clock_mhz if util > 0 else 210,
            "clock_mem_mhz": gpu.mem_clock_mhz,
            "fan_percent": round(30 + 60 * util),
            "throttle_mask": mask,
            "unsupported": [] if gpu.has_fan else ["nvmlDeviceGetFanSpeed"],
            "processes": [{"pid": os.getpid(), "used_memory": self.used_bytes}],
        }
        if self.mig:
            self._mig_state(state)
        return state

    def _mig_state(self, state: dict[str, Any]) -> None:
        """The GPU in MIG mode: the engine runs in its largest MIG device (by memory, then
        compute), holding what vLLM holds of the device it is given (context +
        gpu_memory_utilization of it, plus the side models), capped at the device's memory; the
        others are idle. As on real drivers, neither the GPU nor a MIG device reports
        utilization (NVML answers NotSupported)."""
        home = max(self.mig, key=lambda m: (m.memory_bytes, m.compute_slices, -m.gpu_instance_id))
        p = self.profile
        held = int(p.cuda_context_bytes + p.gpu_memory_utilization * home.memory_bytes)
        held = min(home.memory_bytes, held + self.side_bytes)
        state["mig"] = [
            {
                "profile": m.profile,
                "gpu_instance_id": m.gpu_instance_id,
                "compute_instance_id": 0,
                "uuid": f"MIG-{self.uuid[4:]}-{m.gpu_instance_id}",
                "memory_total": m.memory_bytes,
                "memory_used": held if m is home else 0,
                "unsupported": ["nvmlDeviceGetUtilizationRates"],
                "processes": [{"pid": os.getpid(), "used_memory": held}] if m is home else [],
            }
            for m in self.mig
        ]
        state["memory_used"] = held
        state["processes"] = []  # listed per MIG device
        state["unsupported"] = [*state["unsupported"], "nvmlDeviceGetUtilizationRates"]
