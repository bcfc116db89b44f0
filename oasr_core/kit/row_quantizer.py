"""A bandwidth-bound per-row (per-token) activation quantizer, as CUDA text a family loads.

Both W8A8 families quantize an fp16/bf16 activation ``X [rows, K]`` per row before their GEMM:
``scale[r] = f(amax_r)``, ``Q[r, i] = g(X[r, i], scale[r])``. The kernel skeleton is shared
and the numerics are the family's: a :class:`RowFormat` supplies the device functions
``row_scale(amax)`` and ``quantize_pair(a, b, s)`` (two elements -> two bytes, ``a`` in the
low byte) and whether the row's absmax propagates NaN. :func:`unit_source` writes the one
translation unit of the family's helper module, exporting the C ABI
:func:`oasr_core.kit.helpers.quantize_rows_with` calls::

    int32_t <symbol>(const void* x, int32_t dtype, int64_t rows, int64_t k, void* q,
                     void* scale, void* stream)   // dtype 0 fp16, 1 bf16 -> oasr_kit::Status

One pass over the activation, the row held in registers (the quantizer moves ``3 K + 4``
bytes per row of a 16-bit input and is meant to run at the memory's bandwidth):

- K a multiple of 8 and 16-byte aligned rows: 16-byte loads, 8-byte stores, 4 vectors of 8
  per thread in registers up to K = 8192:
  - at most 128 vectors (K <= 1024): a group of ``2^g`` lanes of one warp per row (fewer than
    32 below K = 1024), the row's absmax reduced by warp shuffles, many rows per block;
  - at most 1024 vectors (K <= 8192): 2, 4 or 8 warps per row, 4, 2 or 1 rows per block, the
    absmax through shared memory. On the H200 (fp8, bf16 rows, M 16384) this took K = 4096
    from 91.7 to 56.0 us and K = 2048 from 34.9 to 29.3 us (0.87 and 0.84 of ``copy_``'s
    bandwidth) against one warp a row holding 16 or 8 vectors a lane, of which fewer are
    resident, each loading, reducing and storing in turn;
  - at most 2048 vectors (K <= 16384): a block per row, 8 vectors per thread;
  - beyond: a block per row reading it twice (absmax, then quantize);
- anything else (K not a multiple of 8, a misaligned pointer): a block per row, one element
  per access, reading it twice.

Every kernel strides over the rows with a grid of the SM count times the blocks one SM holds
(queried for every kernel of a dtype on its first call, so that a call inside a CUDA graph
capture queries nothing). The absmax is taken on the 16-bit values (``__habs2`` /
``__hmax2``, exact: widening is monotonic) and widened once; every element's quotient is the
family's own expression in fp32, so the result does not depend on which kernel ran.
Importing this module imports no torch.
"""

from __future__ import annotations

import attrs

GROUP_MAX_VECTORS = 128
"""Rows of at most this many 16-byte vectors (K <= 1024 at 16 bits) take the group kernel
(one warp or less per row); longer ones up to :data:`BLOCK_MAX_VECTORS` the block kernel."""
BLOCK_MAX_VECTORS = 2048
"""Rows of at most this many vectors (K <= 16384) are held in registers (the block kernel)."""
PATH_KS = (8, 16, 40, 72, 136, 512, 520, 1024, 1032, 2048, 2056, 4096, 4104, 8192, 8200,
           16392, 1004, 7)
"""Row lengths that reach every kernel and group width of :func:`kernel_of`, each at or just
past a boundary (tests and benchmarks; 1004 and 7 are not multiples of 8)."""
STRIDE_SHAPES = ((300000, 8), (150001, 40), (40001, 136), (20000, 1024), (20000, 2048),
                 (20000, 4096), (4097, 8192), (2049, 16384), (2049, 16392), (20000, 1004))
"""``(rows, K)`` with more rows than the grid holds at once on a 132-SM H200 (the blocks one
SM holds x 132 x rows per block), per kernel: the grid strides over them (tests)."""


@attrs.frozen
class RowFormat:
    """One family's quantized element: its numerics as device code and as words.

    ``device_code`` defines, inside the unit's namespace, ``__device__ float row_scale(float
    amax)`` and ``__device__ uint32_t quantize_pair(float a, float b, float s)`` (the two
    quantized bytes, ``a``'s in bits 0-7, ``b``'s in bits 8-15). ``propagate_nan``: a NaN in a
    row makes its absmax NaN (torch's ``amax``) rather than being skipped (``fmaxf``).
    ``headers`` are extra ``#include`` lines' targets; ``contract`` is the numerics in words,
    written into the unit's header comment.
    """

    name: str
    device_code: str
    propagate_nan: bool
    contract: str
    headers: tuple[str, ...] = ()


def kernel_of(k: int, *, aligned: bool = True) -> str:
    """Which kernel quantizes rows of ``k`` elements, in words: the launcher's dispatch
    (``aligned``: the input 16-byte and the output 8-byte aligned)."""
    if k < 1:
        raise ValueError(f"row quantizer: k must be positive, got {k}")
    vectors, rest = divmod(k, 8)
    if rest or not aligned:
        return "stream_rows, one element per access"
    if vectors <= GROUP_MAX_VECTORS:
        lanes = 1
        while 4 * lanes < vectors:
            lanes *= 2
        return f"group_rows<4>, {lanes} lane(s) per row"
    if vectors <= 1024:
        warps = 2
        while 4 * 32 * warps < vectors:
            warps *= 2
        return f"block_rows<4>, {warps} warps per row"
    if vectors <= BLOCK_MAX_VECTORS:
        return "block_rows<8>, 8 warps per row"
    return "stream_rows, 16-byte vectors"


_HELPERS = r"""
constexpr bool kPropagateNan = @PROPAGATE@;
constexpr int kVec = 8;         // 16-bit elements per 16-byte load
constexpr int kThreads = 256;   // threads per block of every kernel here
constexpr unsigned kFull = 0xffffffffu;

template <class T> struct Pair;
template <> struct Pair<__half> {
  using T2 = __half2;
  static __device__ __forceinline__ T2 zero() { return __float2half2_rn(0.f); }
  static __device__ __forceinline__ float lo(T2 v) { return __low2float(v); }
  static __device__ __forceinline__ float hi(T2 v) { return __high2float(v); }
  static __device__ __forceinline__ float widen(__half v) { return __half2float(v); }
  static __device__ __forceinline__ T2 pack(float a, float b) { return __floats2half2_rn(a, b); }
};
template <> struct Pair<__nv_bfloat16> {
  using T2 = __nv_bfloat162;
  static __device__ __forceinline__ T2 zero() { return __float2bfloat162_rn(0.f); }
  static __device__ __forceinline__ float lo(T2 v) { return __low2float(v); }
  static __device__ __forceinline__ float hi(T2 v) { return __high2float(v); }
  static __device__ __forceinline__ float widen(__nv_bfloat16 v) { return __bfloat162float(v); }
  static __device__ __forceinline__ T2 pack(float a, float b) {
    return __floats2bfloat162_rn(a, b);
  }
};

// The larger magnitude; a NaN wins when kPropagateNan, loses otherwise (fmaxf).
__device__ __forceinline__ float max_of(float a, float b) {
  if constexpr (kPropagateNan) {
    return (a != a || a > b) ? a : b;
  } else {
    return fmaxf(a, b);
  }
}

template <class T2>
__device__ __forceinline__ T2 max2(T2 a, T2 b) {
  if constexpr (kPropagateNan) {
    return __hmax2_nan(a, b);
  } else {
    return __hmax2(a, b);
  }
}

// m folded with |v| of the 8 elements of one 16-byte vector.
template <class T>
__device__ __forceinline__ typename Pair<T>::T2 fold(typename Pair<T>::T2 m, uint4 raw) {
  using T2 = typename Pair<T>::T2;
  const T2* v = reinterpret_cast<const T2*>(&raw);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    m = max2(m, __habs2(v[i]));
  }
  return m;
}

template <class T>
__device__ __forceinline__ float widen_max(typename Pair<T>::T2 m) {
  return max_of(Pair<T>::lo(m), Pair<T>::hi(m));
}

// The 8 quantized bytes of one 16-byte vector, in memory order.
template <class T>
__device__ __forceinline__ uint2 quantize8(uint4 raw, float s) {
  using T2 = typename Pair<T>::T2;
  const T2* v = reinterpret_cast<const T2*>(&raw);
  uint32_t w[2];
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    const uint32_t lo = quantize_pair(Pair<T>::lo(v[2 * i]), Pair<T>::hi(v[2 * i]), s);
    const uint32_t hi = quantize_pair(Pair<T>::lo(v[2 * i + 1]), Pair<T>::hi(v[2 * i + 1]), s);
    w[i] = (lo & 0xffffu) | (hi << 16);
  }
  return make_uint2(w[0], w[1]);
}

// The block's largest magnitude (every thread gets it); warp_max is free again on return.
__device__ __forceinline__ float block_max(float v, float* warp_max) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) {
    v = max_of(v, __shfl_xor_sync(kFull, v, offset));
  }
  if ((threadIdx.x & 31) == 0) {
    warp_max[threadIdx.x >> 5] = v;
  }
  __syncthreads();
  v = warp_max[0];
#pragma unroll
  for (int w = 1; w < kThreads / 32; ++w) {
    v = max_of(v, warp_max[w]);
  }
  __syncthreads();
  return v;
}

// The NV vectors j * stride + lane of a row into raw (zeros past its end, or for a row that is
// not live), and their absmax folded into the returned pair.
template <class T, int NV>
__device__ __forceinline__ typename Pair<T>::T2 load_row(const uint4* xr, int64_t vectors,
                                                         int64_t lane, int64_t stride,
                                                         bool live, uint4 (&raw)[NV]) {
  typename Pair<T>::T2 m = Pair<T>::zero();
#pragma unroll
  for (int j = 0; j < NV; ++j) {
    const int64_t v = int64_t(j) * stride + lane;
    raw[j] = make_uint4(0u, 0u, 0u, 0u);
    if (live && v < vectors) {
      raw[j] = xr[v];
      m = fold<T>(m, raw[j]);
    }
  }
  return m;
}

// Row `row`'s scale (from its lane 0) and the quantized vectors load_row read into raw.
template <class T, int NV>
__device__ __forceinline__ void store_row(uint8_t* q, float* scale, int64_t row, int64_t k,
                                          int64_t vectors, int64_t lane, int64_t stride,
                                          const uint4 (&raw)[NV], float s) {
  if (lane == 0) {
    scale[row] = s;
  }
  uint2* qr = reinterpret_cast<uint2*>(q + row * k);
#pragma unroll
  for (int j = 0; j < NV; ++j) {
    const int64_t v = int64_t(j) * stride + lane;
    if (v < vectors) {
      qr[v] = quantize8<T>(raw[j], s);
    }
  }
}

// blocks[i]: the blocks of kernels[i] one SM holds at kThreads threads (1 where the query
// fails). The kernels' tables call it once per dtype, on the first call.
inline void query_resident(const void* const* kernels, int n, int* blocks) {
  for (int i = 0; i < n; ++i) {
    if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks[i], kernels[i], kThreads, 0) !=
            cudaSuccess ||
        blocks[i] < 1) {
      cudaGetLastError();
      blocks[i] = 1;
    }
  }
}

// The grid for `units` rows or row groups of `per_block` each: enough blocks for every unit,
// at most what the device holds at once (the kernels stride over the rest).
inline unsigned grid_of(int64_t units, int64_t per_block, int resident, int dev) {
  const int64_t wanted = (units + per_block - 1) / per_block;
  const int64_t held = int64_t(oasr_kit::sm_count(dev)) * resident;
  const int64_t blocks = held > 0 && held < wanted ? held : wanted;
  return unsigned(blocks < 1 ? 1 : blocks);
}
"""

_QUANTIZE_KERNELS = r"""
// Rows of at most NV << g_log2 vectors: 2^g_log2 lanes of one warp per row, NV vectors per
// lane in registers, kThreads >> g_log2 rows per block. The loop runs on each warp's first
// row, so every lane of a warp reaches the shuffles.
template <class T, int NV>
__global__ void __launch_bounds__(kThreads)
    group_rows(const T* __restrict__ x, int64_t rows, int64_t k, int g_log2,
               uint8_t* __restrict__ q, float* __restrict__ scale) {
  const int g = 1 << g_log2;
  const int lane = threadIdx.x & (g - 1);
  const int64_t per_block = kThreads >> g_log2;
  const int64_t vectors = k / kVec;
  const int64_t in_warp = (threadIdx.x & 31) >> g_log2;
  const int64_t stride = int64_t(gridDim.x) * per_block;
  for (int64_t first = int64_t(blockIdx.x) * per_block + ((threadIdx.x & ~31u) >> g_log2);
       first < rows; first += stride) {
    const int64_t row = first + in_warp;
    const bool live = row < rows;
    const uint4* xr = reinterpret_cast<const uint4*>(x + (live ? row : first) * k);
    uint4 raw[NV];
    float amax = widen_max<T>(load_row<T, NV>(xr, vectors, lane, g, live, raw));
    for (int offset = g >> 1; offset > 0; offset >>= 1) {
      amax = max_of(amax, __shfl_xor_sync(kFull, amax, offset));
    }
    if (live) {
      store_row<T, NV>(q, scale, row, k, vectors, lane, g, raw, row_scale(amax));
    }
  }
}

// Rows of at most NV * 32 << W vectors: 2^W warps per row (2, 4 or 8), NV vectors per thread
// in registers, (kThreads / 32) >> W rows per block, each row's absmax through shared memory.
// Every thread of a block runs the same iterations (the barriers). W is a template parameter
// so that the vector offsets are constants.
template <class T, int NV, int W>
__global__ void __launch_bounds__(kThreads)
    block_rows(const T* __restrict__ x, int64_t rows, int64_t k, uint8_t* __restrict__ q,
               float* __restrict__ scale) {
  constexpr int kWarps = 1 << W;
  constexpr int kLanes = 32 << W;
  __shared__ float warp_max[kThreads / 32];
  const int warp = threadIdx.x >> 5;
  const int first_warp = warp & ~(kWarps - 1);   // the first warp of this thread's row
  const int lane = threadIdx.x & (kLanes - 1);
  const int64_t per_block = (kThreads / 32) >> W;
  const int64_t vectors = k / kVec;
  const int64_t stride = int64_t(gridDim.x) * per_block;
  for (int64_t first = int64_t(blockIdx.x) * per_block; first < rows; first += stride) {
    const int64_t row = first + (warp >> W);
    const bool live = row < rows;
    const uint4* xr = reinterpret_cast<const uint4*>(x + (live ? row : first) * k);
    uint4 raw[NV];
    float amax = widen_max<T>(load_row<T, NV>(xr, vectors, lane, kLanes, live, raw));
#pragma unroll
    for (int offset = 16; offset > 0; offset >>= 1) {
      amax = max_of(amax, __shfl_xor_sync(kFull, amax, offset));
    }
    if ((threadIdx.x & 31) == 0) {
      warp_max[warp] = amax;
    }
    __syncthreads();
    amax = warp_max[first_warp];
#pragma unroll
    for (int w = 1; w < kWarps; ++w) {
      amax = max_of(amax, warp_max[first_warp + w]);
    }
    __syncthreads();
    if (live) {
      store_row<T, NV>(q, scale, row, k, vectors, lane, kLanes, raw, row_scale(amax));
    }
  }
}

// Any row: a block per row reads it twice (absmax, then quantize), 16-byte vectors when
// Vector, one element per access otherwise.
template <class T, bool Vector>
__global__ void __launch_bounds__(kThreads)
    stream_rows(const T* __restrict__ x, int64_t rows, int64_t k, uint8_t* __restrict__ q,
                float* __restrict__ scale) {
  using T2 = typename Pair<T>::T2;
  __shared__ float warp_max[kThreads / 32];
  const int64_t vectors = k / kVec;
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    const T* xr = x + row * k;
    uint8_t* qr = q + row * k;
    float amax;
    if constexpr (Vector) {
      T2 m = Pair<T>::zero();
      for (int64_t v = threadIdx.x; v < vectors; v += kThreads) {
        m = fold<T>(m, reinterpret_cast<const uint4*>(xr)[v]);
      }
      amax = widen_max<T>(m);
    } else {
      amax = 0.f;
      for (int64_t i = threadIdx.x; i < k; i += kThreads) {
        amax = max_of(amax, fabsf(Pair<T>::widen(xr[i])));
      }
    }
    const float s = row_scale(block_max(amax, warp_max));
    if (threadIdx.x == 0) {
      scale[row] = s;
    }
    if constexpr (Vector) {
      for (int64_t v = threadIdx.x; v < vectors; v += kThreads) {
        reinterpret_cast<uint2*>(qr)[v] =
            quantize8<T>(reinterpret_cast<const uint4*>(xr)[v], s);
      }
    } else {
      for (int64_t i = threadIdx.x; i < k; i += kThreads) {
        qr[i] = uint8_t(quantize_pair(Pair<T>::widen(xr[i]), 0.f, s) & 0xffu);
      }
    }
  }
}

enum Kernel : int {
  kStreamScalar, kGroup4, kBlock4W2, kBlock4W4, kBlock4W8, kBlock8, kStreamVector, kKernels
};

// Blocks of each kernel for T one SM holds, queried together on the first call for T (a later
// call, inside a graph capture too, only reads them); 1 where a query fails.
template <class T>
inline const int* resident_blocks() {
  struct Table {
    int blocks[kKernels];
  };
  static const Table table = [] {
    const void* kernels[kKernels] = {
        reinterpret_cast<const void*>(stream_rows<T, false>),
        reinterpret_cast<const void*>(group_rows<T, 4>),
        reinterpret_cast<const void*>(block_rows<T, 4, 1>),
        reinterpret_cast<const void*>(block_rows<T, 4, 2>),
        reinterpret_cast<const void*>(block_rows<T, 4, 3>),
        reinterpret_cast<const void*>(block_rows<T, 8, 3>),
        reinterpret_cast<const void*>(stream_rows<T, true>)};
    Table t{};
    query_resident(kernels, kKernels, t.blocks);
    return t;
  }();
  return table.blocks;
}

template <class T>
inline int32_t launch(const T* x, int64_t rows, int64_t k, uint8_t* q, float* scale,
                      cudaStream_t stream) {
  const int dev = oasr_kit::current_device();
  if (dev < 0) {
    return oasr_kit::kErrDevice;
  }
  const int* held = resident_blocks<T>();
  const int64_t vectors = k / kVec;
  const bool vector = k % kVec == 0 && (reinterpret_cast<uintptr_t>(x) & 15) == 0 &&
                      (reinterpret_cast<uintptr_t>(q) & 7) == 0;
  if (!vector) {
    stream_rows<T, false><<<grid_of(rows, 1, held[kStreamScalar], dev), kThreads, 0, stream>>>(
        x, rows, k, q, scale);
  } else if (vectors <= @GROUP_MAX@) {
    int g_log2 = 0;  // the fewest lanes that hold the row in 4 vectors each
    while ((int64_t(4) << g_log2) < vectors) {
      ++g_log2;
    }
    group_rows<T, 4><<<grid_of(rows, kThreads >> g_log2, held[kGroup4], dev), kThreads, 0,
                       stream>>>(x, rows, k, g_log2, q, scale);
  } else if (vectors <= 4 * 64) {  // the fewest warps (2, 4, 8) holding 4 vectors a thread
    block_rows<T, 4, 1><<<grid_of(rows, 4, held[kBlock4W2], dev), kThreads, 0, stream>>>(
        x, rows, k, q, scale);
  } else if (vectors <= 4 * 128) {
    block_rows<T, 4, 2><<<grid_of(rows, 2, held[kBlock4W4], dev), kThreads, 0, stream>>>(
        x, rows, k, q, scale);
  } else if (vectors <= 4 * kThreads) {
    block_rows<T, 4, 3><<<grid_of(rows, 1, held[kBlock4W8], dev), kThreads, 0, stream>>>(
        x, rows, k, q, scale);
  } else if (vectors <= @BLOCK_MAX@) {
    block_rows<T, 8, 3><<<grid_of(rows, 1, held[kBlock8], dev), kThreads, 0, stream>>>(
        x, rows, k, q, scale);
  } else {
    stream_rows<T, true><<<grid_of(rows, 1, held[kStreamVector], dev), kThreads, 0, stream>>>(
        x, rows, k, q, scale);
  }
  return oasr_kit::launch_status();
}

inline int32_t quantize(const void* x, int32_t dtype, int64_t rows, int64_t k, void* q,
                        void* scale, cudaStream_t stream) {
  if (rows <= 0 || k <= 0 || rows > INT32_MAX) {
    return oasr_kit::kErrShape;
  }
  auto* out = static_cast<uint8_t*>(q);
  auto* s = static_cast<float*>(scale);
  switch (dtype) {
    case 0: return launch(static_cast<const __half*>(x), rows, k, out, s, stream);
    case 1: return launch(static_cast<const __nv_bfloat16*>(x), rows, k, out, s, stream);
    default: return oasr_kit::kErrDtype;
  }
}
"""


_NORM_KERNELS = r"""
// ---- Layer norm, then quantize: the row held in registers is normalized in place. ----
// y = (x - mean) * rstd * gamma + beta in fp32 (gamma, beta: null for none), mean and the
// biased variance over the row's K elements, rstd = rsqrt(var + eps); y is rounded to T (the
// dtype the norm's output has in the model) before the absmax and the quantization, so the
// quantized row is that of the rounded norm output, as with the norm and quantizer apart.
struct Affine {
  const uint4* gamma;   // K / 8 vectors of T, or null
  const uint4* beta;    // K / 8 vectors of T, or null
};

// The sum of the row's elements in raw (its vectors j * stride + lane below `vectors`), or
// with Centred the sum of their squared deviations from `mean`.
template <class T, bool Centred, int NV>
__device__ __forceinline__ float row_sum(const uint4 (&raw)[NV], int64_t vectors,
                                         int64_t lane, int64_t stride, float mean) {
  using T2 = typename Pair<T>::T2;
  float sum = 0.f;
#pragma unroll
  for (int j = 0; j < NV; ++j) {
    if (int64_t(j) * stride + lane < vectors) {
      const T2* v = reinterpret_cast<const T2*>(&raw[j]);
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const float a = Pair<T>::lo(v[i]) - mean;
        const float b = Pair<T>::hi(v[i]) - mean;
        sum += Centred ? a * a + b * b : a + b;
      }
    }
  }
  return sum;
}

// raw normalized in place (the module comment's y, rounded to T); the absmax of its vectors
// below `vectors`, folded into the returned pair.
template <class T, int NV>
__device__ __forceinline__ typename Pair<T>::T2 normalize_row(
    uint4 (&raw)[NV], int64_t vectors, int64_t lane, int64_t stride, float mean, float rstd,
    Affine affine) {
  using T2 = typename Pair<T>::T2;
  T2 m = Pair<T>::zero();
#pragma unroll
  for (int j = 0; j < NV; ++j) {
    const int64_t vi = int64_t(j) * stride + lane;
    if (vi < vectors) {
      const uint4 g = affine.gamma ? affine.gamma[vi] : make_uint4(0u, 0u, 0u, 0u);
      const uint4 b = affine.beta ? affine.beta[vi] : make_uint4(0u, 0u, 0u, 0u);
      const T2* gv = reinterpret_cast<const T2*>(&g);
      const T2* bv = reinterpret_cast<const T2*>(&b);
      T2* v = reinterpret_cast<T2*>(&raw[j]);
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        float lo = (Pair<T>::lo(v[i]) - mean) * rstd;
        float hi = (Pair<T>::hi(v[i]) - mean) * rstd;
        if (affine.gamma) {
          lo *= Pair<T>::lo(gv[i]);
          hi *= Pair<T>::hi(gv[i]);
        }
        if (affine.beta) {
          lo += Pair<T>::lo(bv[i]);
          hi += Pair<T>::hi(bv[i]);
        }
        v[i] = Pair<T>::pack(lo, hi);
      }
      m = fold<T>(m, raw[j]);
    }
  }
  return m;
}

// v summed (or with Max, its largest magnitude taken) over the 2^g_log2 lanes of a group.
template <bool Max>
__device__ __forceinline__ float group_reduce(float v, int g) {
  for (int offset = g >> 1; offset > 0; offset >>= 1) {
    const float o = __shfl_xor_sync(kFull, v, offset);
    v = Max ? max_of(v, o) : v + o;
  }
  return v;
}

// v summed (or with Max, its largest magnitude taken) over the kWarps warps of a row, from
// warp first_warp on, through `part` (free again on return: the barriers).
template <int kWarps, bool Max>
__device__ __forceinline__ float row_reduce(float v, float* part, int warp, int first_warp) {
  v = group_reduce<Max>(v, 32);
  if ((threadIdx.x & 31) == 0) {
    part[warp] = v;
  }
  __syncthreads();
  v = part[first_warp];
#pragma unroll
  for (int w = 1; w < kWarps; ++w) {
    v = Max ? max_of(v, part[first_warp + w]) : v + part[first_warp + w];
  }
  __syncthreads();
  return v;
}

// group_rows's arrangement, the row normalized before its absmax.
template <class T, int NV>
__global__ void __launch_bounds__(kThreads)
    norm_group_rows(const T* __restrict__ x, int64_t rows, int64_t k, int g_log2,
                    Affine affine, float eps, uint8_t* __restrict__ q,
                    float* __restrict__ scale) {
  const int g = 1 << g_log2;
  const int lane = threadIdx.x & (g - 1);
  const int64_t per_block = kThreads >> g_log2;
  const int64_t vectors = k / kVec;
  const int64_t in_warp = (threadIdx.x & 31) >> g_log2;
  const int64_t stride = int64_t(gridDim.x) * per_block;
  const float inv_k = 1.f / float(k);
  for (int64_t first = int64_t(blockIdx.x) * per_block + ((threadIdx.x & ~31u) >> g_log2);
       first < rows; first += stride) {
    const int64_t row = first + in_warp;
    const bool live = row < rows;
    const uint4* xr = reinterpret_cast<const uint4*>(x + (live ? row : first) * k);
    uint4 raw[NV];
    load_row<T, NV>(xr, vectors, lane, g, live, raw);
    const float mean =
        group_reduce<false>(row_sum<T, false, NV>(raw, vectors, lane, g, 0.f), g) * inv_k;
    const float var =
        group_reduce<false>(row_sum<T, true, NV>(raw, vectors, lane, g, mean), g) * inv_k;
    const float rstd = rsqrtf(var + eps);
    float amax = widen_max<T>(normalize_row<T, NV>(raw, vectors, lane, g, mean, rstd, affine));
    amax = group_reduce<true>(amax, g);
    if (live) {
      store_row<T, NV>(q, scale, row, k, vectors, lane, g, raw, row_scale(amax));
    }
  }
}

// block_rows's arrangement, the row normalized before its absmax.
template <class T, int NV, int W>
__global__ void __launch_bounds__(kThreads)
    norm_block_rows(const T* __restrict__ x, int64_t rows, int64_t k, Affine affine, float eps,
                    uint8_t* __restrict__ q, float* __restrict__ scale) {
  constexpr int kWarps = 1 << W;
  constexpr int kLanes = 32 << W;
  __shared__ float part[kThreads / 32];
  const int warp = threadIdx.x >> 5;
  const int first_warp = warp & ~(kWarps - 1);
  const int lane = threadIdx.x & (kLanes - 1);
  const int64_t per_block = (kThreads / 32) >> W;
  const int64_t vectors = k / kVec;
  const int64_t stride = int64_t(gridDim.x) * per_block;
  const float inv_k = 1.f / float(k);
  for (int64_t first = int64_t(blockIdx.x) * per_block; first < rows; first += stride) {
    const int64_t row = first + (warp >> W);
    const bool live = row < rows;
    const uint4* xr = reinterpret_cast<const uint4*>(x + (live ? row : first) * k);
    uint4 raw[NV];
    load_row<T, NV>(xr, vectors, lane, kLanes, live, raw);
    const float mean = row_reduce<kWarps, false>(
        row_sum<T, false, NV>(raw, vectors, lane, kLanes, 0.f), part, warp, first_warp) * inv_k;
    const float var = row_reduce<kWarps, false>(
        row_sum<T, true, NV>(raw, vectors, lane, kLanes, mean), part, warp, first_warp) * inv_k;
    const float rstd = rsqrtf(var + eps);
    float amax = widen_max<T>(
        normalize_row<T, NV>(raw, vectors, lane, kLanes, mean, rstd, affine));
    amax = row_reduce<kWarps, true>(amax, part, warp, first_warp);
    if (live) {
      store_row<T, NV>(q, scale, row, k, vectors, lane, kLanes, raw, row_scale(amax));
    }
  }
}

enum NormKernel : int { kNormGroup4, kNormBlock4W2, kNormBlock4W4, kNormBlock4W8, kNormBlock8,
                        kNormKernels };

// Blocks of each norm kernel for T one SM holds (as resident_blocks does for the quantizer).
template <class T>
inline const int* norm_resident_blocks() {
  struct Table {
    int blocks[kNormKernels];
  };
  static const Table table = [] {
    const void* kernels[kNormKernels] = {
        reinterpret_cast<const void*>(norm_group_rows<T, 4>),
        reinterpret_cast<const void*>(norm_block_rows<T, 4, 1>),
        reinterpret_cast<const void*>(norm_block_rows<T, 4, 2>),
        reinterpret_cast<const void*>(norm_block_rows<T, 4, 3>),
        reinterpret_cast<const void*>(norm_block_rows<T, 8, 3>)};
    Table t{};
    query_resident(kernels, kNormKernels, t.blocks);
    return t;
  }();
  return table.blocks;
}

inline bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15) == 0; }

// The rows the quantizer holds in registers only (K a multiple of 8 up to @BLOCK_MAX@ vectors,
// x, gamma and beta 16-byte and q 8-byte aligned); anything else is refused with kErrShape
// (the caller normalizes and quantizes apart).
template <class T>
inline int32_t launch_norm(const T* x, Affine affine, float eps, int64_t rows, int64_t k,
                           uint8_t* q, float* scale, cudaStream_t stream) {
  const int64_t vectors = k / kVec;
  if (k % kVec != 0 || vectors > @BLOCK_MAX@ || !aligned16(x) || !aligned16(affine.gamma) ||
      !aligned16(affine.beta) || (reinterpret_cast<uintptr_t>(q) & 7) != 0) {
    return oasr_kit::kErrShape;
  }
  const int dev = oasr_kit::current_device();
  if (dev < 0) {
    return oasr_kit::kErrDevice;
  }
  const int* held = norm_resident_blocks<T>();
  if (vectors <= @GROUP_MAX@) {
    int g_log2 = 0;
    while ((int64_t(4) << g_log2) < vectors) {
      ++g_log2;
    }
    norm_group_rows<T, 4><<<grid_of(rows, kThreads >> g_log2, held[kNormGroup4], dev),
                            kThreads, 0, stream>>>(x, rows, k, g_log2, affine, eps, q, scale);
  } else if (vectors <= 4 * 64) {
    norm_block_rows<T, 4, 1><<<grid_of(rows, 4, held[kNormBlock4W2], dev), kThreads, 0,
                               stream>>>(x, rows, k, affine, eps, q, scale);
  } else if (vectors <= 4 * 128) {
    norm_block_rows<T, 4, 2><<<grid_of(rows, 2, held[kNormBlock4W4], dev), kThreads, 0,
                               stream>>>(x, rows, k, affine, eps, q, scale);
  } else if (vectors <= 4 * kThreads) {
    norm_block_rows<T, 4, 3><<<grid_of(rows, 1, held[kNormBlock4W8], dev), kThreads, 0,
                               stream>>>(x, rows, k, affine, eps, q, scale);
  } else {
    norm_block_rows<T, 8, 3><<<grid_of(rows, 1, held[kNormBlock8], dev), kThreads, 0,
                               stream>>>(x, rows, k, affine, eps, q, scale);
  }
  return oasr_kit::launch_status();
}

inline int32_t norm_quantize(const void* x, const void* gamma, const void* beta, float eps,
                             int32_t dtype, int64_t rows, int64_t k, void* q, void* scale,
                             cudaStream_t stream) {
  if (rows <= 0 || k <= 0 || rows > INT32_MAX) {
    return oasr_kit::kErrShape;
  }
  const Affine affine{static_cast<const uint4*>(gamma), static_cast<const uint4*>(beta)};
  auto* out = static_cast<uint8_t*>(q);
  auto* s = static_cast<float*>(scale);
  switch (dtype) {
    case 0:
      return launch_norm(static_cast<const __half*>(x), affine, eps, rows, k, out, s, stream);
    case 1:
      return launch_norm(static_cast<const __nv_bfloat16*>(x), affine, eps, rows, k, out, s,
                         stream);
    default: return oasr_kit::kErrDtype;
  }
}
"""


def norm_symbol(symbol: str) -> str:
    """The export of the layer-norm-then-quantize unit beside a row quantizer's ``symbol``."""
    return f"{symbol}_layer_norm"


_QUANTIZE_ABI = ("const void* x, int32_t dtype, int64_t rows, int64_t k, void* q, void* scale, "
                 "void* stream", "x, dtype, rows, k, q, scale", "quantize")
_NORM_ABI = ("const void* x, const void* gamma, const void* beta, float eps, int32_t dtype, "
             "int64_t rows, int64_t k, void* q, void* scale, void* stream",
             "x, gamma, beta, eps, dtype, rows, k, q, scale", "norm_quantize")


def unit_source(fmt: RowFormat, *, namespace: str, symbol: str, title: str,
                norm: bool = False) -> str:
    """The translation unit of a row quantizer in ``fmt`` exporting ``symbol`` (the C ABI of
    the module docstring), its code in C++ namespace ``namespace``; ``title`` heads it.

    With ``norm``, the unit of the fused layer norm instead, exporting
    ``norm_symbol(symbol)``::

        int32_t <symbol>_layer_norm(const void* x, const void* gamma, const void* beta,
                                    float eps, int32_t dtype, int64_t rows, int64_t k,
                                    void* q, void* scale, void* stream)

    ``gamma``/``beta``: the norm's weight and bias in ``x``'s dtype, or null. It quantizes
    ``layer_norm(x)`` (computed in fp32 and rounded to ``x``'s dtype) in one pass for the rows
    the quantizer holds in registers, and refuses anything else with ``kErrShape``.
    """
    for what, name in (("namespace", namespace), ("symbol", symbol)):
        if not name.isidentifier():
            raise ValueError(f"row quantizer {title!r}: {what} {name!r} is not a C identifier")
    contract = "\n".join(f"//   {line}".rstrip() for line in fmt.contract.strip().splitlines())
    includes = "".join(f"#include <{h}>\n" for h in fmt.headers)
    kernels = _NORM_KERNELS if norm else _QUANTIZE_KERNELS
    skeleton = ((_HELPERS + kernels).replace("@PROPAGATE@",
                                             "true" if fmt.propagate_nan else "false")
                .replace("@GROUP_MAX@", str(GROUP_MAX_VECTORS))
                .replace("@BLOCK_MAX@", str(BLOCK_MAX_VECTORS)))
    params, args, entry = _NORM_ABI if norm else _QUANTIZE_ABI
    export = norm_symbol(symbol) if norm else symbol
    what = ("layer norm, then per-row quantization of fp16/bf16 rows, one pass" if norm
            else "per-row quantization of fp16/bf16 rows, one pass")
    return (
        f"// {title}\n"
        f"// Generated by oasr_core.kit.row_quantizer: {what}.\n//\n"
        f"// Numerics ({fmt.name}):\n{contract}\n//\n"
        f"// int32_t {export}({params});\n"
        f"//     dtype 0 = fp16, 1 = bf16; an oasr_kit::Status.\n"
        f"#include <cstdint>\n\n#include <cuda_bf16.h>\n"
        f"#include <cuda_fp16.h>\n{includes}\n#include \"oasr_kit/launcher.cuh\"\n\n"
        f"namespace {namespace} {{\n\n{fmt.device_code.strip()}\n{skeleton}\n"
        f"}}  // namespace {namespace}\n\n"
        f"OASR_EXPORT int32_t {export}({params}) {{\n"
        f"  return {namespace}::{entry}({args}, static_cast<cudaStream_t>(stream));\n}}\n")


def jit_spec(fmt: RowFormat, *, module: str, symbol: str, namespace: str, title: str,
             target: str, extra_flags: tuple[str, ...] = ()):
    """The :class:`oasr_core.jit.JitSpec` of a row-quantizer module for nvcc target ``target``
    (``"90a"``): no CUTLASS, the kit headers only; two units, the quantizer exporting
    ``symbol`` and the fused layer norm exporting ``norm_symbol(symbol)`` (each in its own
    C++ namespace, ``namespace`` and ``<namespace>_norm``)."""
    from oasr_core.jit import JitSpec, TranslationUnit

    units = (
        TranslationUnit(name="quantize_rows", exports=(symbol,), source=unit_source(
            fmt, namespace=namespace, symbol=symbol, title=title)),
        TranslationUnit(name="norm_quantize_rows", exports=(norm_symbol(symbol),),
                        source=unit_source(fmt, namespace=f"{namespace}_norm", symbol=symbol,
                                           title=title, norm=True)))
    return JitSpec(name=module, arch=target, units=units, extra_flags=extra_flags,
                   cutlass=False)
