"""Reading the device's conditions: SM clock, power, other compute processes.

A measurement records them at its start and end. The SM clock explains drift (an H200 at
its 700 W cap drops to 1440-1965 MHz at large M), and another compute process on the device
makes a run *contended*: its numbers are kept but marked. NVML (``pynvml``, from the
``nvidia-ml-py`` wheel) answers in microseconds; without it ``nvidia-smi`` is asked, at most
once per ``min_interval_s`` because each call costs tens of milliseconds; without either,
every field is None.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from typing import Any

from .records import Conditions


def _others(pids: list[int]) -> int:
    """Processes other than this one; a container may not see its own pid in the list."""
    if os.getpid() in pids:
        return len(pids) - 1
    return max(0, len(pids) - 1)


class NvmlProbe:
    """Conditions through NVML (``pynvml``)."""

    def __init__(self, nvml: Any, handle: Any) -> None:
        self._nvml, self._handle = nvml, handle

    @classmethod
    def open(cls, bus_id: str | None, index: int) -> NvmlProbe | None:
        """A probe of the device at ``bus_id`` (else NVML ``index``), or None without NVML."""
        try:
            import pynvml

            pynvml.nvmlInit()
            handle = (pynvml.nvmlDeviceGetHandleByPciBusId(bus_id) if bus_id
                      else pynvml.nvmlDeviceGetHandleByIndex(index))
        except Exception:
            return None
        return cls(pynvml, handle)

    def read(self) -> Conditions:
        nv, h = self._nvml, self._handle
        values: dict[str, Any] = {}
        for key, fn in (("sm_clock_mhz", lambda: nv.nvmlDeviceGetClockInfo(h, nv.NVML_CLOCK_SM)),
                        ("max_sm_clock_mhz",
                         lambda: nv.nvmlDeviceGetMaxClockInfo(h, nv.NVML_CLOCK_SM)),
                        ("power_w", lambda: nv.nvmlDeviceGetPowerUsage(h) / 1000.0),
                        ("other_processes", lambda: _others(
                            [p.pid for p in nv.nvmlDeviceGetComputeRunningProcesses(h)]))):
            try:
                values[key] = fn()
            except Exception:
                values[key] = None
        return Conditions(source="nvml", **values)


def _number(text: str) -> float | None:
    try:
        return float(text.strip())
    except ValueError:
        return None


class SmiProbe:
    """Conditions through ``nvidia-smi``, cached for ``min_interval_s`` seconds."""

    def __init__(self, exe: str, target: str, min_interval_s: float = 10.0) -> None:
        self._exe, self._target, self._interval = exe, target, min_interval_s
        self._last: tuple[float, Conditions] | None = None

    def _query(self, *args: str) -> list[str]:
        done = subprocess.run([self._exe, f"--id={self._target}", *args,
                               "--format=csv,noheader,nounits"], capture_output=True,
                              text=True, timeout=10, check=False)
        if done.returncode != 0:
            raise OSError(done.stderr.strip() or f"nvidia-smi exited {done.returncode}")
        return [line for line in done.stdout.splitlines() if line.strip()]

    def read(self) -> Conditions:
        now = time.monotonic()
        if self._last is not None and now - self._last[0] < self._interval:
            return self._last[1]
        try:
            fields = self._query("--query-gpu=clocks.sm,clocks.max.sm,power.draw")[0].split(",")
            pids = [int(p) for p in self._query("--query-compute-apps=pid")
                    if p.strip().isdigit()]
            clock, max_clock, power = (_number(f) for f in (fields + ["", "", ""])[:3])
            read = Conditions(sm_clock_mhz=None if clock is None else int(clock),
                              max_sm_clock_mhz=None if max_clock is None else int(max_clock),
                              power_w=power, other_processes=_others(pids),
                              source="nvidia-smi")
        except (OSError, subprocess.SubprocessError, IndexError, ValueError):
            read = Conditions()
        self._last = (now, read)
        return read


class NullProbe:
    """No way to observe the device: every field None."""

    def read(self) -> Conditions:
        return Conditions()


def _bus_id(device: Any) -> str | None:
    try:
        import torch

        props = torch.cuda.get_device_properties(device)
        return f"{props.pci_domain_id:08X}:{props.pci_bus_id:02X}:{props.pci_device_id:02X}.0"
    except (AttributeError, RuntimeError, ImportError, AssertionError):
        return None


def _nvml_index(index: int) -> int:
    visible = os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",")
    try:
        return int(visible[index])
    except (IndexError, ValueError):
        return index


def default_probe(device: Any = None, *, smi_interval_s: float = 10.0) -> Any:
    """The best probe available for CUDA ``device``: NVML, else nvidia-smi, else none."""
    index = getattr(device, "index", None) or 0
    bus = _bus_id(device if device is not None else index)
    probe = NvmlProbe.open(bus, _nvml_index(index))
    if probe is not None:
        return probe
    exe = shutil.which("nvidia-smi")
    if exe is not None:
        return SmiProbe(exe, bus or str(_nvml_index(index)), smi_interval_s)
    return NullProbe()
