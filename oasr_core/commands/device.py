"""The GPU a command answers for, and what to tell a user on a machine without one."""

from __future__ import annotations

from typing import Any

from oasr_core.gpu_probe import gpu_visible


def seen_arch(rt: Any) -> str | None:
    """The arch family of this process's current GPU (``sm90``), or None without one.

    Without a visible GPU the runtime's device cache is told so, so no later call in this
    process imports torch to find out again.
    """
    if None not in rt.devices and not gpu_visible():
        rt.devices[None] = None
    return rt.device_arch()


def no_gpu_hint(arches: list[str]) -> str:
    """The one line telling a user on a machine without a GPU what to pass instead."""
    held = f" (the tiers hold {', '.join(arches)})" if arches else ""
    return f"no GPU seen: pass --arch, e.g. --arch {arches[0] if arches else 'sm90'}{held}"
