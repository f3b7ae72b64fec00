"""MIG layouts for the simulator's virtual GPU (``gpuwatch sim --mig 3g.40gb+4g.40gb``).

A MIG profile ``<C>g.<M>gb`` is C of the GPU's 7 compute slices and about M GB of its memory,
which MIG cuts in 8 slices (an H100 80GB's 1g.10gb is one eighth, its 3g.40gb and 4g.40gb half
each). A layout is profiles joined by ``+``, ``Nx`` repeating one: ``7x1g.10gb``. GPU
instance IDs are numbered from 1 in the layout's order, each with one compute instance (ID 0);
a real driver numbers them by where it placed them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from gpuwatch.errors import EXIT_USAGE, GpuwatchError

COMPUTE_SLICES = 7
MEMORY_SLICES = 8
MAX_DEVICES = 7
_PROFILE = re.compile(r"(?:(?P<n>\d+)x)?(?P<c>\d+)g\.(?P<m>\d+)gb")
_COMPUTE_SIZES = (1, 2, 3, 4, 7)
# GPUs with MIG: the data-centre Ampere, Hopper and Blackwell parts.
_MIG_GPUS = ("A100", "A30", "H100", "H200", "H800", "H20", "B200", "GB200")


class MigLayoutError(GpuwatchError, ValueError, exit_code=EXIT_USAGE):
    """A layout this GPU cannot be cut into."""


@dataclass(frozen=True)
class MigSlice:
    profile: str  # "3g.40gb"
    gpu_instance_id: int
    compute_slices: int
    memory_bytes: int


def parse_layout(spec: str, gpu_name: str, vram_bytes: int) -> list[MigSlice]:
    """The MIG devices ``spec`` cuts a ``gpu_name`` of ``vram_bytes`` into."""
    if not any(marker in gpu_name for marker in _MIG_GPUS):
        raise MigLayoutError(f"--mig: the {gpu_name} has no MIG (A100, A30, H100, H200 have)")
    nominal_gb = vram_bytes / 1e9
    slices: list[MigSlice] = []
    for part in (p.strip() for p in spec.split("+")):
        match = _PROFILE.fullmatch(part)
        if match is None:
            raise MigLayoutError(f"--mig: {part[:40]!r} is not a profile like 3g.40gb or 7x1g.10gb")
        compute, gb = int(match["c"]), int(match["m"])
        if compute not in _COMPUTE_SIZES:
            raise MigLayoutError(f"--mig: {part}: an instance has 1, 2, 3, 4 or 7 compute slices")
        memory = round(gb * MEMORY_SLICES / nominal_gb)
        if not 1 <= memory <= MEMORY_SLICES:
            raise MigLayoutError(
                f"--mig: {part}: {gb} GB is not a whole eighth of the {nominal_gb:.0f} GB GPU"
            )
        for _ in range(int(match["n"] or 1)):
            if len(slices) == MAX_DEVICES:
                raise MigLayoutError(f"--mig: more than {MAX_DEVICES} MIG devices")
            slices.append(
                MigSlice(
                    f"{compute}g.{gb}gb",
                    len(slices) + 1,
                    compute,
                    vram_bytes * memory // MEMORY_SLICES,
                )
            )
    if sum(s.compute_slices for s in slices) > COMPUTE_SLICES:
        raise MigLayoutError(f"--mig: {spec}: more than the {COMPUTE_SLICES} compute slices")
    if sum(s.memory_bytes for s in slices) > vram_bytes:
        raise MigLayoutError(f"--mig: {spec}: more than the GPU's memory")
    return slices
