"""The conv1d family's depthwise kernels: direct convolution over channels-last data.

A depthwise conv1d (groups == Cin == Cout; the Conformer's kernel-31 convolution module) reads
``kernel`` inputs per output and does ``kernel`` FMAs: at fp16 it is bandwidth-bound, and
torch's path on channels-last data is four kernels (transpose, cuDNN's depthwise conv, the
activation, transpose back), each a full pass over the activations. These kernels are one
pass: a CTA stages its (T tile + halo) x C tile input window (in shared memory, or straight
into registers through L1), keeps the weight tile in shared memory as fp32, slides a
register window along T so each input row is loaded and converted once per thread, and
applies ``act(acc + bias)`` in fp32 before the one store. ``csrc/oasr_conv1d/depthwise.cuh``
holds the kernels; :mod:`.space` the configs (tile, vector width, threads, staging, fixed or
general taps) and their predicates; :mod:`.codegen` the units.

Why our own kernels rather than CUTLASS's: CUTLASS 2.x's depthwise direct convolution
(``DepthwiseDirect2dConv``, the ``conv2d_fprop`` depthwise "direct conv" kernels) is a 2-D
NHWC kernel whose filter size, stride and dilation are template parameters of the
threadblock's output tile iterator; a 1-D conv runs through it as H = 1, paying a 2-D
iterator and a filter shape fixed per build, with an epilogue that is CUTLASS's linear
combination (activation as a separate functor type per build). Its output-tile and
filter-size constraints (small filters: its examples are 3x3 and 5x5) fit kernel 31 badly,
and it has no register sliding window along T. A direct 1-D kernel is ~250 lines, takes
any kernel/stride/dilation in its general form, fuses bias and activation with a runtime
code, and exposes exactly the knobs that matter (T tile, C tile, vector width, staging) as
config data. CUTLASS remains the dense kernels' engine (:mod:`oasr_conv1d.dense`).
"""

from __future__ import annotations

from oasr_conv1d.depthwise.space import (
    DEFAULT,
    KIND,
    configs,
    is_depthwise,
    is_feasible,
    pack_weight,
    smem_bytes,
    supports,
)

__all__ = ["DEFAULT", "KIND", "configs", "is_depthwise", "is_feasible", "pack_weight",
           "smem_bytes", "supports"]
