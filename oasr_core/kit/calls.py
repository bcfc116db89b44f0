"""A prepared call of one kernel at one shape: its launcher, call record and workspace needs.

A family's ``Kernel.prepare`` returns a :class:`PreparedCall`; the op's plan memo holds it, so
a served call costs the operand checks, one Python frame here and one ctypes call:

- ``prepared(device, *operands)``: launch on ``device``'s current torch stream (the ops' hot
  path). The stream comes from ``torch._C._cuda_getCurrentRawStream`` (about 0.1 us, where
  ``current_stream().cuda_stream`` costs several), so the launch is capturable in a CUDA graph
  on whatever stream captures; when ``device`` is not the current device the launch runs
  under it;
- ``prepared.launch(device, stream, *operands)``: launch on an explicit raw stream (benchmark
  arms, a kernel run outside the ops).

``operands`` are the family launcher's arguments between the call record and the stream, as
its ctypes ``argtypes`` declare them (pointer ints, a float). A call whose kernel needs no
workspace passes one prepared record by address; one that does gets a copy holding its
(device, stream) buffers from the family's :class:`~oasr_core.kit.WorkspacePool` (buffer
kinds in the pool's order fill the record's ``workspace`` then ``semaphores`` fields), so calls
on other streams never share one.

Importing this module imports no torch; the stream functions bind on the first launch.
"""

from __future__ import annotations

import ctypes
from typing import Any

import attrs

from oasr_core.jit.kit import CallArgs
from oasr_core.types import Config

_WORKSPACE_FIELDS = (("workspace", "workspace_bytes"), ("semaphores", "semaphore_bytes"))
"""The call record's (pointer, bytes) field pairs a pool's buffer kinds fill, in order."""


def _empty_like(like: Any) -> Any:
    """``torch.empty_like`` (bound on the first call: importing this module imports no
    torch)."""
    global _empty_like
    import torch

    _empty_like = torch.empty_like
    return _empty_like(like)


def _bind_streams(device: int) -> int:
    """Bind :data:`_current_stream` / :data:`_current_device` to torch's (first launch)."""
    global _current_stream, _current_device
    import torch

    _current_stream = getattr(torch._C, "_cuda_getCurrentRawStream", None)
    _current_device = getattr(torch._C, "_cuda_getDevice", None)
    if _current_stream is None or _current_device is None:
        raise RuntimeError("oasr_core.kit: this torch build has no CUDA; nothing can launch")
    return _current_stream(device)


_current_stream: Any = _bind_streams
"""``raw stream handle = _current_stream(device)``: torch's current stream of a device."""
_current_device: Any = None
"""``_current_device()``: the index of torch's current CUDA device."""


@attrs.define(slots=True, eq=False)
class PreparedCall:
    """What a call of one shape needs besides its tensors (see the module docstring)."""

    fn: Any
    """The bound ctypes launcher: ``fn(record address, *operands, stream) -> status``."""
    args: CallArgs
    """Sizes, codes, split and flags (workspace fields are filled per call when needed)."""
    config: Config
    workspace: tuple[int, ...] = ()
    """Bytes of each of :attr:`pool`'s buffer kinds the shape needs (``()``: none)."""
    pool: Any = None
    """The family's :class:`~oasr_core.kit.WorkspacePool` (None when no workspace is needed)."""
    address: int = attrs.field(init=False)
    """``ctypes.addressof(args)``, passed to the launcher."""
    plain: bool = attrs.field(init=False)
    """True when the shape needs no workspace: every launch passes :attr:`address`."""
    outputs: dict = attrs.field(init=False, factory=dict)
    """Per input shape, a one-element tensor expanded to the output's shape (see
    :meth:`output`)."""

    def __attrs_post_init__(self) -> None:
        if any(self.workspace) and self.pool is None:
            raise ValueError(f"{self.config.lane}/{self.config.id}: a call needing workspace "
                             f"{self.workspace} has no workspace pool")
        self.address = ctypes.addressof(self.args)
        self.plain = not any(self.workspace)

    def __call__(self, device: int, *operands: Any) -> int:
        """Launch on ``device``'s current stream; the launcher's status (0 = ok)."""
        stream = _current_stream(device)
        if self.plain and _current_device() == device:
            return self.fn(self.address, *operands, stream)
        return self._launch_on(device, stream, operands)

    def output(self, a: Any, n: int, dtype: Any = None) -> Any:
        """A new contiguous ``[*a.shape[:-1], n]`` tensor on ``a``'s device, ``dtype`` (None:
        ``a``'s): ``torch.empty_like`` of a template kept per input shape instead of
        ``a.new_empty(shape)``, whose size tuple torch parses per call (0.35 us less a call on
        a workstation CPU; no difference measurable on the H200 host). The template is one
        element expanded (stride 0), so ``empty_like`` lays the output out contiguously; the
        output follows the current grad / inference mode, as ``new_empty``'s does."""
        shape = a.shape
        like = self.outputs.get(shape)
        if like is None:
            like = a.new_empty((), dtype=dtype or a.dtype).expand(*shape[:-1], n)
            self.outputs[shape] = like
        return _empty_like(like)

    def launch(self, device: int, stream: int, *operands: Any) -> int:
        """Launch on the raw ``stream`` of ``device`` (the current device must be
        ``device``); the launcher's status (0 = ok)."""
        if self.plain:
            return self.fn(self.address, *operands, stream)
        args = CallArgs.from_buffer_copy(self.args)
        fields = self.pool.get(device, stream, self.workspace)
        for i, (pointer, nbytes) in enumerate(_WORKSPACE_FIELDS[:len(self.workspace)]):
            setattr(args, pointer, fields[2 * i])
            setattr(args, nbytes, fields[2 * i + 1])
        return self.fn(ctypes.addressof(args), *operands, stream)

    def _launch_on(self, device: int, stream: int, operands: tuple) -> int:
        if _current_device() == device:
            return self.launch(device, stream, *operands)
        import torch

        with torch.cuda.device(device):
            return self.launch(device, stream, *operands)
