"""GPUs through NVML (nvidia-ml-py's ``pynvml``), plus a fake backend with the same interface.

Like nvitop: ``nvmlInit`` once; handles, names and UUIDs are cached, and the power limit is
read once a minute, not once a poll; a field that answers NotSupported is never asked again; a
GPU that is lost becomes an error row, never an exception; NVML missing becomes one reason and
everything else keeps working. ``NvmlReader.read`` blocks (NVML calls
can take tens of milliseconds on a busy driver), so callers run it in a thread.
"""

from __future__ import annotations

import contextlib
import math
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any

import httpx
import pynvml

from gpuwatch.errors import GpuwatchError
from gpuwatch.fmt import clip
from gpuwatch.model import GpuReading, GpuSample, MigInstance, ProcessInfo
from gpuwatch.safejson import JSONError, loads_bounded
from gpuwatch.sources.host import ProcessTable

_INIT_REASONS: Mapping[type, str] = {
    pynvml.NVMLError_LibraryNotFound: "libnvidia-ml.so.1 not found",
    pynvml.NVMLError_DriverNotLoaded: "NVIDIA driver not loaded",
    pynvml.NVMLError_LibRmVersionMismatch: (
        "driver/library version mismatch (reload the nvidia module or reboot)"
    ),
    pynvml.NVMLError_NoPermission: "no permission to open the NVIDIA device",
}

# Errors after which a GPU is reported as an error row for this poll.
_DEVICE_FATAL = (pynvml.NVMLError_GpuIsLost, pynvml.NVMLError_Unknown)

_THROTTLE_NAMES: tuple[tuple[str, str], ...] = (
    ("nvmlClocksEventReasonGpuIdle", "idle"),
    ("nvmlClocksEventReasonApplicationsClocksSetting", "app_clocks"),
    ("nvmlClocksEventReasonSwPowerCap", "sw_power_cap"),
    ("nvmlClocksThrottleReasonHwSlowdown", "hw_slowdown"),
    ("nvmlClocksEventReasonSyncBoost", "sync_boost"),
    ("nvmlClocksEventReasonSwThermalSlowdown", "sw_thermal"),
    ("nvmlClocksEventReasonHwThermalSlowdown", "hw_thermal"),
    ("nvmlClocksEventReasonHwPowerBrakeSlowdown", "hw_power_brake"),
    ("nvmlClocksEventReasonDisplayClockSetting", "display_clocks"),
)


_NOT_AVAILABLE = 2**63
# The enforced power limit moves only when an operator sets it (nvidia-smi -pl), so it is read
# once a minute, not every poll: one NVML call a GPU a second saved, and a new limit still shows
# within a minute.
SLOW_FIELDS_EVERY_S = 60.0


def decode_throttle(mask: int) -> list[str]:
    return [label for attr, label in _THROTTLE_NAMES if mask & getattr(pynvml, attr, 0)]


def init_error_reason(exc: pynvml.NVMLError) -> str:
    for cls, reason in _INIT_REASONS.items():
        if isinstance(exc, cls):
            return f"NVML unavailable: {reason}"
    return f"NVML unavailable: {exc}"


class NvmlReader:
    """Polls every GPU through ``lib`` (``pynvml`` or a fake with the same functions)."""

    def __init__(
        self,
        lib: Any = pynvml,
        processes: ProcessTable | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.lib = lib
        self.clock = clock
        self.processes = processes or ProcessTable()
        self._lock = threading.Lock()
        self._initialized = False
        self._init_error: str | None = None
        self._static: dict[int, tuple[str | None, str | None]] = {}
        self._handles: dict[int, Any] = {}
        self._power_limit: dict[int, tuple[float, float | None]] = {}  # index: (read at, W)
        self._unsupported: set[tuple[int, str]] = set()
        self._seen: dict[int, ProcessInfo] = {}  # this poll's processes, by pid
        self._mig_profiles: dict[str, str] = {}  # MIG device UUID: its profile ("1g.10gb")

    def _init(self) -> str | None:
        if self._initialized or self._init_error:
            return self._init_error
        try:
            self.lib.nvmlInit()
            self._initialized = True
        except pynvml.NVMLError as exc:
            self._init_error = init_error_reason(exc)
        except OSError as exc:
            self._init_error = f"NVML unavailable: {exc}"
        return self._init_error

    def close(self) -> None:
        with self._lock:
            if self._initialized:
                with contextlib.suppress(pynvml.NVMLError):
                    self.lib.nvmlShutdown()
                self._initialized = False

    def read(self) -> GpuReading:
        with self._lock:
            error = self._init()
            if error:
                return GpuReading([], error)
            try:
                count = self.lib.nvmlDeviceGetCount()
            except pynvml.NVMLError as exc:
                return GpuReading([], f"NVML error: {exc}")
            except GpuSourceError as exc:
                return GpuReading([], str(exc))
            self._seen = {}
            return GpuReading([self._read_device(i) for i in range(count)])

    def _field(self, index: int, name: str, fn: Callable[[], Any]) -> Any:
        """Call ``fn``; None (and never asked again) when this GPU does not support it."""
        if (index, name) in self._unsupported:
            return None
        try:
            return fn()
        except (pynvml.NVMLError_NotSupported, pynvml.NVMLError_FunctionNotFound):
            self._unsupported.add((index, name))
            return None
        except pynvml.NVMLError_NoData:
            return None

    def _read_device(self, index: int) -> GpuSample:
        lib = self.lib
        name, uuid = self._static.get(index, (None, None))
        sample = GpuSample(index=index, name=name, uuid=uuid)
        try:
            handle = self._handles.get(index)
            if handle is None:
                handle = self._handles[index] = lib.nvmlDeviceGetHandleByIndex(index)
            if index not in self._static:
                name = _text(lib.nvmlDeviceGetName(handle))
                uuid = _text(lib.nvmlDeviceGetUUID(handle))
                self._static[index] = (name, uuid)
                sample.name, sample.uuid = name, uuid
            self._fill(sample, handle)
        except _DEVICE_FATAL as exc:
            # A GPU that fell off the bus (or was reset) gets a new handle when it is back.
            self._handles.pop(index, None)
            self._power_limit.pop(index, None)
            sample.error = f"GPU {index}: {exc}"
        except pynvml.NVMLError as exc:
            sample.error = f"GPU {index}: NVML error: {exc}"
        except GpuSourceError as exc:
            sample.error = f"GPU {index}: {exc}"
        return sample

    def _memory(self, i: int, handle: Any, where: str = "") -> Any:
        """The v2 memory info (with ``reserved``) where the driver has it, else v1."""
        lib = self.lib
        mem = self._field(
            i,
            f"memory_v2{where}",
            lambda: lib.nvmlDeviceGetMemoryInfo(handle, version=pynvml.nvmlMemory_v2),
        )
        if mem is None:
            mem = self._field(i, f"memory{where}", lambda: lib.nvmlDeviceGetMemoryInfo(handle))
        return mem

    def _fill(self, s: GpuSample, handle: Any) -> None:
        lib, i = self.lib, s.index
        mem = self._memory(i, handle)
        if mem is not None:
            s.memory_total_bytes, s.memory_used_bytes = int(mem.total), int(mem.used)
            s.memory_free_bytes = int(mem.free)
            reserved = getattr(mem, "reserved", None)
            s.memory_reserved_bytes = int(reserved) if reserved is not None else None
        util = self._field(i, "utilization", lambda: lib.nvmlDeviceGetUtilizationRates(handle))
        if util is not None:
            s.utilization_gpu, s.utilization_memory = util.gpu / 100.0, util.memory / 100.0
        s.temperature_c = self._field(
            i,
            "temperature",
            lambda: lib.nvmlDeviceGetTemperature(handle, pynvml.NVML_TEMPERATURE_GPU),
        )
        power = self._field(i, "power", lambda: lib.nvmlDeviceGetPowerUsage(handle))
        s.power_w = power / 1000.0 if power is not None else None
        s.power_limit_w = self._slow_power_limit(i, handle)
        s.clock_sm_mhz = self._field(
            i, "clock_sm", lambda: lib.nvmlDeviceGetClockInfo(handle, pynvml.NVML_CLOCK_SM)
        )
        s.clock_mem_mhz = self._field(
            i, "clock_mem", lambda: lib.nvmlDeviceGetClockInfo(handle, pynvml.NVML_CLOCK_MEM)
        )
        s.fan_percent = self._field(i, "fan", lambda: lib.nvmlDeviceGetFanSpeed(handle))
        mask = self._field(
            i, "throttle", lambda: lib.nvmlDeviceGetCurrentClocksEventReasons(handle)
        )
        s.throttle_reasons = decode_throttle(mask) if mask is not None else None
        mode = self._field(i, "mig_mode", lambda: lib.nvmlDeviceGetMigMode(handle))
        s.mig_mode = None if mode is None else mode[0] == pynvml.NVML_DEVICE_MIG_ENABLE
        if s.mig_mode:
            # In MIG mode the whole GPU lists its processes only to root; each MIG device
            # lists its own to anyone, and that says which instance a process runs on.
            self._read_mig(s, handle)
            return
        procs = self._field(
            i, "processes", lambda: lib.nvmlDeviceGetComputeRunningProcesses(handle)
        )
        self._add_processes(s, procs)

    def _add_processes(self, s: GpuSample, procs: Any, instance: MigInstance | None = None) -> None:
        for proc in procs or ():
            used = getattr(proc, "usedGpuMemory", None)
            # Inside containers NVML answers "not available" as a huge sentinel value.
            if used is not None and used >= _NOT_AVAILABLE:
                used = None
            pid = int(proc.pid)
            # A process on several GPUs is read from /proc once per poll.
            info = self._seen.get(pid)
            if info is None:
                info = self._seen[pid] = self.processes.describe(pid)
            gi = instance.gpu_instance_id if instance else None
            ci = instance.compute_instance_id if instance else None
            s.processes.append(
                replace(info, used_memory_bytes=used, gpu_instance_id=gi, compute_instance_id=ci)
            )

    def _read_mig(self, s: GpuSample, handle: Any) -> None:
        lib, i = self.lib, s.index
        slots = self._field(i, "mig_count", lambda: lib.nvmlDeviceGetMaxMigDeviceCount(handle))
        for slot in range(slots or 0):
            try:
                mig = lib.nvmlDeviceGetMigDeviceHandleByIndex(handle, slot)
            except pynvml.NVMLError_NotFound:
                continue  # no instance in this slot
            s.mig.append(self._read_instance(s, slot, mig))

    def _read_instance(self, s: GpuSample, slot: int, mig: Any) -> MigInstance:
        lib, i, where = self.lib, s.index, f"@mig{slot}"
        instance = MigInstance(None, None)
        try:
            instance.gpu_instance_id = int(lib.nvmlDeviceGetGpuInstanceId(mig))
            instance.compute_instance_id = int(lib.nvmlDeviceGetComputeInstanceId(mig))
            instance.uuid = _text(lib.nvmlDeviceGetUUID(mig))
            profile = self._mig_profiles.get(instance.uuid)
            if profile is None:
                # NVML names a MIG device "<GPU name> MIG 3g.40gb": the profile is the last word.
                name = _text(lib.nvmlDeviceGetName(mig))
                profile = self._mig_profiles[instance.uuid] = name.rsplit("MIG ", 1)[-1]
            instance.profile = profile
            mem = self._memory(i, mig, where)
            if mem is not None:
                instance.memory_total_bytes = int(mem.total)
                instance.memory_used_bytes = int(mem.used)
            util = self._field(
                i, f"utilization{where}", lambda: lib.nvmlDeviceGetUtilizationRates(mig)
            )
            instance.utilization_gpu = util.gpu / 100.0 if util is not None else None
            procs = self._field(
                i, f"processes{where}", lambda: lib.nvmlDeviceGetComputeRunningProcesses(mig)
            )
            self._add_processes(s, procs, instance)
        except _DEVICE_FATAL:
            raise  # the whole GPU is gone: its row says so
        except pynvml.NVMLError as exc:
            instance.error = f"MIG device {slot}: NVML error: {exc}"
        return instance

    def _slow_power_limit(self, i: int, handle: Any) -> float | None:
        now = self.clock()
        cached = self._power_limit.get(i)
        if cached is not None and now - cached[0] < SLOW_FIELDS_EVERY_S:
            return cached[1]
        limit = self._field(
            i, "power_limit", lambda: self.lib.nvmlDeviceGetEnforcedPowerLimit(handle)
        )
        watts = limit / 1000.0 if limit is not None else None
        self._power_limit[i] = (now, watts)
        return watts


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


_FAKE_ERRORS: Mapping[str, int] = {
    "library_not_found": pynvml.NVML_ERROR_LIBRARY_NOT_FOUND,
    "driver_not_loaded": pynvml.NVML_ERROR_DRIVER_NOT_LOADED,
    "version_mismatch": pynvml.NVML_ERROR_LIB_RM_VERSION_MISMATCH,
    "no_permission": pynvml.NVML_ERROR_NO_PERMISSION,
    "gpu_is_lost": pynvml.NVML_ERROR_GPU_IS_LOST,
    "unknown": pynvml.NVML_ERROR_UNKNOWN,
}


class GpuSourceError(GpuwatchError):
    """A fake backend's live source (the simulator's /sim/gpu) could not be read."""

    def __init__(self, message: str) -> None:
        super().__init__(clip(message))


# Fields FakeNvml does arithmetic on; bounded so that watts * 1000 stays a finite int.
_NUMERIC_FIELDS = (
    "memory_total", "memory_used", "memory_reserved", "utilization_gpu", "utilization_memory",
    "temperature_c", "power_w", "power_limit_w", "clock_sm_mhz", "clock_mem_mhz",
    "fan_percent", "throttle_mask",
)  # fmt: skip
_MAX_READING = 1e15


def _is_reading(value: Any) -> bool:
    return (
        isinstance(value, (int, float))
        and not isinstance(value, bool)
        and math.isfinite(value)
        and abs(value) < _MAX_READING
    )


def _check_gpu(i: int, gpu: Any) -> None:
    if not isinstance(gpu, dict):
        raise GpuSourceError(f"gpus[{i}] is not an object")
    for key in ("memory_total", "memory_used"):
        if key not in gpu:
            raise GpuSourceError(f"gpus[{i}] has no {key}")
    for key in _NUMERIC_FIELDS:
        if key in gpu and not _is_reading(gpu[key]):
            raise GpuSourceError(f"gpus[{i}].{key} is not a number")
    if gpu.get("error") is not None and gpu["error"] not in _FAKE_ERRORS:
        raise GpuSourceError(f"gpus[{i}].error is not a known NVML error")
    _check_device(f"gpus[{i}]", gpu, ("name", "uuid"))
    mig = gpu.get("mig", [])
    if not isinstance(mig, list) or len(mig) > _MAX_MIG:
        raise GpuSourceError(f"gpus[{i}].mig is not a list of at most {_MAX_MIG} MIG devices")
    if "mig_max" in gpu and not (_is_int(gpu["mig_max"]) and 0 <= gpu["mig_max"] <= _MAX_MIG):
        raise GpuSourceError(f"gpus[{i}].mig_max is not a count up to {_MAX_MIG}")
    for k, instance in enumerate(mig):
        if instance is not None:  # None: an empty slot
            _check_instance(f"gpus[{i}].mig[{k}]", instance)


_MAX_MIG = 64  # NVML's MIG device slots per GPU are 7 on the GPUs there are


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _check_device(where: str, device: Mapping[str, Any], names: tuple[str, ...]) -> None:
    """What a GPU and a MIG device share: names, the functions it does not support, processes."""
    for key in names:
        if key in device and not isinstance(device[key], str):
            raise GpuSourceError(f"{where}.{key} is not a string")
    unsupported = device.get("unsupported", [])
    if not isinstance(unsupported, list) or not all(isinstance(u, str) for u in unsupported):
        raise GpuSourceError(f"{where}.unsupported is not a list of names")
    processes = device.get("processes", [])
    if not isinstance(processes, list) or not all(
        isinstance(p, dict)
        and _is_int(p.get("pid"))
        and (p.get("used_memory") is None or _is_reading(p["used_memory"]))
        for p in processes
    ):
        raise GpuSourceError(f"{where}.processes is not a list of {{pid, used_memory}}")


def _check_instance(where: str, instance: Any) -> None:
    if not isinstance(instance, dict):
        raise GpuSourceError(f"{where} is not an object")
    for key in ("memory_total", "memory_used"):
        if not _is_reading(instance.get(key)):
            raise GpuSourceError(f"{where}.{key} is not a number")
    if "utilization_gpu" in instance and not _is_reading(instance["utilization_gpu"]):
        raise GpuSourceError(f"{where}.utilization_gpu is not a number")
    for key in ("gpu_instance_id", "compute_instance_id"):
        if not (_is_int(instance.get(key)) and 0 <= instance[key] < 2**32):
            raise GpuSourceError(f"{where}.{key} is not an instance id")
    _check_device(where, instance, ("profile", "uuid"))


def checked_state(state: Any) -> Mapping[str, Any]:
    """``state`` if it has the shape FakeNvml reads, else GpuSourceError saying what is wrong:
    a URL that is not a simulator's /sim/gpu must give one line, not a KeyError traceback."""
    if not isinstance(state, dict) or not isinstance(state.get("gpus"), list):
        raise GpuSourceError('not a /sim/gpu answer (want {"gpus": [...]})')
    for i, gpu in enumerate(state["gpus"]):
        _check_gpu(i, gpu)
    return state


_MAX_STATE_BYTES = 4 * 1024 * 1024


class SimGpuSource:
    """Reads a simulator's ``/sim/gpu`` for FakeNvml; blocking like NVML, so it runs in a thread."""

    def __init__(self, url: str, timeout_s: float = 2.0) -> None:
        self.url = url
        self._client = httpx.Client(timeout=timeout_s, trust_env=False)
        self._cache: tuple[float, Mapping[str, Any]] | None = None

    def __call__(self) -> Mapping[str, Any]:
        # One HTTP GET per poll, not per NVML call: reuse the answer for a short while.
        now = time.monotonic()
        if self._cache and now - self._cache[0] < 0.2:
            return self._cache[1]
        try:
            response = self._client.get(self.url)
            response.raise_for_status()
            state = checked_state(loads_bounded(response.content, max_bytes=_MAX_STATE_BYTES))
        except (httpx.HTTPError, JSONError, GpuSourceError) as exc:
            raise GpuSourceError(
                f"fake GPU source {self.url}: {type(exc).__name__}: {exc}"
            ) from exc
        self._cache = (now, state)
        return state


class _Struct:
    def __init__(self, **fields: Any) -> None:
        self.__dict__.update(fields)


@dataclass(frozen=True)
class _MigHandle:
    """A fake MIG device handle: the GPU and the slot (NVML's MIG device index) it is in."""

    gpu: int
    slot: int


class FakeNvml:
    """The pynvml functions NvmlReader uses, answered from a dict, raising pynvml's own errors.

    ``state`` (or what ``state()`` returns, for a live source such as the simulator) looks like
    ``{"init_error": None, "gpus": [{"name": ..., "memory_total": bytes, "memory_used": bytes,
    "utilization_gpu": percent, "power_w": ..., "processes": [{"pid": ..., "used_memory": ...}],
    "unsupported": ["nvmlDeviceGetFanSpeed"], "error": "gpu_is_lost"}]}``. ``calls`` counts
    every call by function name so tests can see what was asked.

    A GPU in MIG mode has ``"mig": [...]``, one entry per MIG device slot (None: an empty
    slot): ``{"profile": "3g.40gb", "gpu_instance_id": 1, "compute_instance_id": 0,
    "memory_total": bytes, "memory_used": bytes, "processes": [...], "unsupported": [...]}``,
    with ``"utilization_gpu"`` only where the driver would give it; ``"mig_max"`` is NVML's
    slot count (7, as on an A100 or H100).
    """

    def __init__(self, state: Mapping[str, Any] | Callable[[], Mapping[str, Any]]) -> None:
        self._state = state
        self.calls: dict[str, int] = {}

    def _now(self) -> Mapping[str, Any]:
        return self._state() if callable(self._state) else self._state

    def _enter(self, fn: str, handle: int | _MigHandle | None = None) -> Mapping[str, Any]:
        self.calls[fn] = self.calls.get(fn, 0) + 1
        if handle is None:
            return {}
        index = handle.gpu if isinstance(handle, _MigHandle) else handle
        device = gpu = self._now()["gpus"][index]
        if gpu.get("error"):
            raise pynvml.NVMLError(_FAKE_ERRORS[gpu["error"]])
        if isinstance(handle, _MigHandle):
            # A layout that changed since the handle was given: NVML's "not found" too.
            slots = gpu.get("mig") or []
            if handle.slot >= len(slots) or slots[handle.slot] is None:
                raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_FOUND)
            device = slots[handle.slot]
        if fn in device.get("unsupported", ()):
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return device

    def nvmlInit(self) -> None:
        self._enter("nvmlInit")
        # A live source (the simulator) is polled, not fetched at init: it may start later.
        error = None if callable(self._state) else self._state.get("init_error")
        if error:
            raise pynvml.NVMLError(_FAKE_ERRORS[error])

    def nvmlShutdown(self) -> None:
        self._enter("nvmlShutdown")

    def nvmlDeviceGetCount(self) -> int:
        self._enter("nvmlDeviceGetCount")
        return len(self._now()["gpus"])

    def nvmlDeviceGetHandleByIndex(self, index: int) -> int:
        self._enter("nvmlDeviceGetHandleByIndex")
        return index

    def nvmlDeviceGetName(self, h: int | _MigHandle) -> str:
        device = self._enter("nvmlDeviceGetName", h)
        if isinstance(h, _MigHandle):
            # As NVML names a MIG device: the GPU's name, "MIG", the profile.
            parent = self._now()["gpus"][h.gpu].get("name", "Fake GPU")
            return f"{parent} MIG {device.get('profile', '1g.10gb')}"
        return device.get("name", "Fake GPU")

    def nvmlDeviceGetUUID(self, h: int | _MigHandle) -> str:
        device = self._enter("nvmlDeviceGetUUID", h)
        fallback = f"MIG-fake-{h.gpu}-{h.slot}" if isinstance(h, _MigHandle) else f"GPU-fake-{h}"
        return device.get("uuid", fallback)

    def nvmlDeviceGetMigMode(self, h: int) -> list[int]:
        on = int("mig" in self._enter("nvmlDeviceGetMigMode", h))
        return [on, on]  # [current, pending]

    def nvmlDeviceGetMaxMigDeviceCount(self, h: int) -> int:
        g = self._enter("nvmlDeviceGetMaxMigDeviceCount", h)
        return g.get("mig_max", max(7, len(g["mig"]))) if "mig" in g else 0

    def nvmlDeviceGetMigDeviceHandleByIndex(self, h: int, slot: int) -> _MigHandle:
        g = self._enter("nvmlDeviceGetMigDeviceHandleByIndex", h)
        slots = g.get("mig") or []
        if slot >= len(slots) or slots[slot] is None:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_FOUND)
        return _MigHandle(h, slot)

    def nvmlDeviceGetGpuInstanceId(self, h: _MigHandle) -> int:
        return self._enter("nvmlDeviceGetGpuInstanceId", h)["gpu_instance_id"]

    def nvmlDeviceGetComputeInstanceId(self, h: _MigHandle) -> int:
        return self._enter("nvmlDeviceGetComputeInstanceId", h)["compute_instance_id"]

    def nvmlDeviceGetMemoryInfo(self, h: int, version: int | None = None) -> _Struct:
        g = self._enter("nvmlDeviceGetMemoryInfo", h)
        total, used = g["memory_total"], g["memory_used"]
        reserved = g.get("memory_reserved", 0)
        fields: dict[str, Any] = {"total": total, "used": used, "free": total - used - reserved}
        if version is not None:
            fields["reserved"] = reserved
        return _Struct(**fields)

    def nvmlDeviceGetUtilizationRates(self, h: int) -> _Struct:
        g = self._enter("nvmlDeviceGetUtilizationRates", h)
        return _Struct(gpu=g.get("utilization_gpu", 0), memory=g.get("utilization_memory", 0))

    def nvmlDeviceGetTemperature(self, h: int, sensor: int) -> int:
        return self._enter("nvmlDeviceGetTemperature", h).get("temperature_c", 40)

    def nvmlDeviceGetPowerUsage(self, h: int) -> int:
        return int(self._enter("nvmlDeviceGetPowerUsage", h).get("power_w", 50) * 1000)

    def nvmlDeviceGetEnforcedPowerLimit(self, h: int) -> int:
        return int(
            self._enter("nvmlDeviceGetEnforcedPowerLimit", h).get("power_limit_w", 450) * 1000
        )

    def nvmlDeviceGetClockInfo(self, h: int, clock: int) -> int:
        g = self._enter("nvmlDeviceGetClockInfo", h)
        return g.get("clock_sm_mhz" if clock == pynvml.NVML_CLOCK_SM else "clock_mem_mhz", 0)

    def nvmlDeviceGetFanSpeed(self, h: int) -> int:
        return self._enter("nvmlDeviceGetFanSpeed", h).get("fan_percent", 30)

    def nvmlDeviceGetCurrentClocksEventReasons(self, h: int) -> int:
        return self._enter("nvmlDeviceGetCurrentClocksEventReasons", h).get("throttle_mask", 0)

    def nvmlDeviceGetComputeRunningProcesses(self, h: int) -> list[_Struct]:
        g = self._enter("nvmlDeviceGetComputeRunningProcesses", h)
        return [
            _Struct(pid=p["pid"], usedGpuMemory=p.get("used_memory"))
            for p in g.get("processes", ())
        ]
