"""Grow-only device buffers per (device, stream): the scratch a family's kernels need.

A kernel that needs scratch (split-K partials, Stream-K flags, semaphores) gets it from its
family's :class:`WorkspacePool`: ``pool.get(device, stream, sizes)`` returns pointers to
buffers of at least those sizes, one set per (device, stream), so concurrent calls on two
streams never share one. Buffers grow (at least doubling) and are never freed while the pool
lives: an outgrown buffer is retired but kept, because a CUDA graph captured earlier may still
use it. A growth during graph capture is warned about (the allocation would land in the
graph); :meth:`WorkspacePool.reserve` grows the buffers ahead of a capture.

Buffers are process state, not epoch state: a reload keeps them.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import Any

import attrs


@attrs.frozen
class BufferKind:
    """One kind of buffer a pool keeps per (device, stream)."""

    name: str
    minimum: int
    """Smallest allocation in bytes (a first small request still gets this much)."""
    zeroed: bool = False
    """Zero-filled once when allocated (semaphores the kernels leave at zero)."""


def _torch_allocate(kind: BufferKind, nbytes: int, device: int) -> Any:
    import torch

    dev = torch.device("cuda", device)
    if kind.zeroed:
        return torch.zeros((nbytes + 3) // 4, dtype=torch.int32, device=dev)
    return torch.empty(nbytes, dtype=torch.uint8, device=dev)


def _torch_capturing() -> bool:
    import torch

    return torch.cuda.is_current_stream_capturing()


def _nbytes(buffer: Any) -> int:
    return buffer.numel() * buffer.element_size()


class WorkspacePool:
    """Buffers of ``kinds`` per (device, stream); see the module docstring.

    ``allocate(kind, nbytes, device)`` makes a tensor of at least ``nbytes`` (default: CUDA
    memory on ``device``); ``capturing()`` says whether the current stream is capturing a
    graph; ``warn(message)`` is called when a buffer grows during a capture.
    """

    def __init__(self, kinds: Sequence[BufferKind], *, warn: Callable[[str], Any],
                 allocate: Callable[[BufferKind, int, int], Any] = _torch_allocate,
                 capturing: Callable[[], bool] = _torch_capturing) -> None:
        if not kinds:
            raise ValueError("a workspace pool needs at least one buffer kind")
        self.kinds = tuple(kinds)
        self._warn, self._allocate, self._capturing = warn, allocate, capturing
        self._buffers: dict[tuple[int, int], list[Any]] = {}
        self._retired: list[Any] = []
        self._lock = threading.Lock()

    def get(self, device: int, stream: int, sizes: Sequence[int]) -> tuple[int, ...]:
        """``(pointer, bytes)`` of each kind, flattened, for (``device``, ``stream``), grown to
        at least ``sizes`` (one per kind, in order)."""
        bufs = self._buffers.get((device, stream))
        if bufs is None or any(b is None or _nbytes(b) < n for b, n in zip(bufs, sizes,
                                                                          strict=True)):
            bufs = self._grow(device, stream, sizes)
        out: list[int] = []
        for b in bufs:
            out += (b.data_ptr(), _nbytes(b))
        return tuple(out)

    def _grow(self, device: int, stream: int, sizes: Sequence[int]) -> list[Any]:
        with self._lock:
            bufs = self._buffers.setdefault((device, stream), [None] * len(self.kinds))
            short = [i for i, (b, n) in enumerate(zip(bufs, sizes, strict=True))
                     if b is None or _nbytes(b) < n]
            if short and self._capturing():
                self._warn("a workspace was allocated during CUDA graph capture; reserve it "
                           "before capturing (or run the shape once eagerly on the capture "
                           "stream)")
            for i in short:
                kind, old = self.kinds[i], bufs[i]
                have = _nbytes(old) if old is not None else 0
                if old is not None:
                    self._retired.append(old)
                bufs[i] = self._allocate(kind, max(sizes[i], kind.minimum, 2 * have), device)
            return bufs

    def reserve(self, sizes: Sequence[int], device: int | None = None,
                stream: Any = None) -> None:
        """Grow the buffers of ``device``/``stream`` (default: the current ones) to ``sizes``.

        ``stream`` is a ``torch.cuda.Stream`` or a raw handle; capture with
        ``torch.cuda.graph(g, stream=s)`` and reserve for ``s``.
        """
        import torch

        device = torch.cuda.current_device() if device is None else int(device)
        raw = (torch._C._cuda_getCurrentRawStream(device) if stream is None
               else int(getattr(stream, "cuda_stream", stream)))
        self.get(device, raw, sizes)

    def sizes(self, device: int, stream: int) -> tuple[int, ...]:
        """Current byte sizes of (``device``, ``stream``)'s buffers (0: not allocated)."""
        bufs = self._buffers.get((device, stream)) or [None] * len(self.kinds)
        return tuple(_nbytes(b) if b is not None else 0 for b in bufs)
