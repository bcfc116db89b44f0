"""Whether a GPU can be present, answered from device nodes without importing torch.

Importing torch and asking CUDA costs seconds. Commands that only need to know whether there
is a GPU (``oasr tune status``, ``oasr doctor``, the SKU stamp of a tuning file) ask this
first: on a machine with no NVIDIA or ROCm device node (a CPU laptop, CI) there is nothing
for torch to find.
"""

from __future__ import annotations

import glob
import os

HIDDEN = ("", "-1", "none", "NoDevFiles")
"""``CUDA_VISIBLE_DEVICES`` values that hide every device."""


def gpu_visible() -> bool:
    """False when no GPU can be present: ``CUDA_VISIBLE_DEVICES`` hides every device, or no
    NVIDIA (``/dev/nvidia0``, ...) or ROCm (``/dev/kfd``) device node exists. True means only
    "worth asking torch"."""
    hidden = os.environ.get("CUDA_VISIBLE_DEVICES")
    if hidden is not None and hidden.strip() in HIDDEN:
        return False
    return bool(glob.glob("/dev/nvidia[0-9]*")) or os.path.exists("/dev/kfd")
