// oasr_conv2d direct kernels: a dense conv2d over few input channels (the speech front end's
// first conv reads one log-mel plane: c_in = 1) computed directly, without a GEMM.
//
// The implicit GEMM spends a whole K tile (32 deep) on the first conv's 9 taps and cuDNN runs
// it far from the memory bound: the conv is a 9-tap stencil whose cost is writing its
// output (batch * h_out * w_out * c_out values). Here each thread computes CPT consecutive
// output channels (one 8- or 16-byte store) of PPT output pixels:
//
//   block (G, Y) threads, G = c_out / CPT channel groups, Y = max(1, Threads / G) pixel rows;
//   the block stages the whole filter in shared memory as fp32 [kh * kw * c_in][c_out]
//   (packed weight (c_out, kh, kw, c_in) transposed once per block), then each thread reads
//   its pixel's window (every thread of a pixel reads the same addresses: a broadcast), and
//   accumulates in fp32; the epilogue is act(acc + bias) in fp32, one rounding, one vector
//   store per thread, consecutive threads writing consecutive channels.
//
// Any window, stride, padding and dilation; c_out a multiple of CPT (the vector store), at
// most Threads * CPT; the fp32 filter within 48 KiB of shared memory (the default limit,
// no opt-in); groups == 1. The activation is a runtime code, as in the implicit-GEMM units.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "oasr_conv2d/geometry.cuh"
#include "oasr_kit/launcher.cuh"

namespace oasr_conv2d {
namespace direct {

using namespace oasr_kit;

constexpr int kMaxFilterBytes = 48 * 1024;

template <class T>
__device__ __forceinline__ float to_float(T v);
template <>
__device__ __forceinline__ float to_float<__half>(__half v) { return __half2float(v); }
template <>
__device__ __forceinline__ float to_float<__nv_bfloat16>(__nv_bfloat16 v) {
  return __bfloat162float(v);
}

template <class T>
__device__ __forceinline__ T from_float(float v);
template <>
__device__ __forceinline__ __half from_float<__half>(float v) { return __float2half_rn(v); }
template <>
__device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float v) {
  return __float2bfloat16_rn(v);
}

// torch's definitions: ReLU propagates NaN, GELU is the erf form, SiLU is x * sigmoid(x).
__device__ __forceinline__ float activate(float x, int32_t act) {
  switch (act) {
    case kActRelu: return x < 0.f ? 0.f : x;
    case kActGelu: return 0.5f * x * (1.f + erff(x * 0.70710678118654752f));
    case kActSilu: return x / (1.f + __expf(-x));
    default: return x;
  }
}

template <class T, int CPT>
struct alignas(sizeof(T) * CPT) Vec {
  T v[CPT];
};

template <class T, int CPT, int PPT>
__global__ void conv_direct(Geometry g, const T* __restrict__ x, const T* __restrict__ w,
                            const T* __restrict__ bias, T* __restrict__ out, int32_t act) {
  extern __shared__ float filter[];  // [taps * c_in][c_out]
  const int taps = g.kh * g.kw * g.c_in;
  const int c_out = g.c_out;
  const int tid = threadIdx.y * blockDim.x + threadIdx.x;
  const int nthreads = blockDim.x * blockDim.y;
  for (int i = tid; i < taps * c_out; i += nthreads) {
    int co = i / taps, t = i - co * taps;  // packed weight (c_out, kh, kw, c_in): t is fastest
    filter[t * c_out + co] = to_float(w[i]);
  }
  __syncthreads();

  const int c0 = threadIdx.x * CPT;
  float b[CPT];
#pragma unroll
  for (int j = 0; j < CPT; ++j) {
    b[j] = bias != nullptr ? to_float(bias[c0 + j]) : 0.f;
  }
  const int64_t pixels = g.batch * g.h_out * g.w_out;
  const int64_t hw = g.h_out * g.w_out;
#pragma unroll
  for (int p = 0; p < PPT; ++p) {
    const int64_t pix = (int64_t(blockIdx.x) * PPT + p) * blockDim.y + threadIdx.y;
    if (pix >= pixels) {
      break;
    }
    const int64_t n = pix / hw;
    const int64_t rem = pix - n * hw;
    const int ho = int(rem / g.w_out), wo = int(rem - int64_t(ho) * g.w_out);
    float acc[CPT];
#pragma unroll
    for (int j = 0; j < CPT; ++j) {
      acc[j] = b[j];
    }
    const T* xn = x + n * g.h_in * g.w_in * g.c_in;
    int t = 0;
    for (int r = 0; r < g.kh; ++r) {
      const int hi = ho * g.sh - g.ph + r * g.dh;
      const bool row_in = hi >= 0 && hi < g.h_in;
      for (int s = 0; s < g.kw; ++s) {
        const int wi = wo * g.sw - g.pw + s * g.dw;
        const bool in = row_in && wi >= 0 && wi < g.w_in;
        const T* xp = xn + (int64_t(hi) * g.w_in + wi) * g.c_in;
        for (int ci = 0; ci < g.c_in; ++ci, ++t) {
          const float xv = in ? to_float(xp[ci]) : 0.f;
          // CPT consecutive fp32 taps, 8 * CPT-byte aligned (c_out and c0 are multiples of
          // CPT): vector loads from shared memory.
          const float2* f = reinterpret_cast<const float2*>(filter + t * c_out + c0);
#pragma unroll
          for (int j = 0; j < CPT / 2; ++j) {
            const float2 fj = f[j];
            acc[2 * j] = fmaf(xv, fj.x, acc[2 * j]);
            acc[2 * j + 1] = fmaf(xv, fj.y, acc[2 * j + 1]);
          }
        }
      }
    }
    Vec<T, CPT> o;
#pragma unroll
    for (int j = 0; j < CPT; ++j) {
      o.v[j] = from_float<T>(activate(acc[j], act));
    }
    *reinterpret_cast<Vec<T, CPT>*>(out + pix * c_out + c0) = o;
  }
}

template <int DType>
struct Element;
template <>
struct Element<kFp16> {
  using T = __half;
};
template <>
struct Element<kBf16> {
  using T = __nv_bfloat16;
};

// One config: CPT channels per thread, PPT pixels per thread, Threads per block (at most).
template <int DType, int CPT, int PPT, int Threads>
struct Kernel {
  using T = typename Element<DType>::T;
  static_assert(CPT == 2 || CPT == 4 || CPT == 8, "a vector store of 2, 4 or 8 elements");
  static_assert(Threads % 32 == 0 && Threads <= 1024, "whole warps, at most 1024 threads");

  static int64_t filter_bytes(Geometry const& g) {
    return int64_t(g.kh) * g.kw * g.c_in * g.c_out * int64_t(sizeof(float));
  }

  static bool runs(Geometry const& g) {
    return g.groups == 1 && g.c_out % CPT == 0 && g.c_out / CPT <= Threads &&
           filter_bytes(g) <= kMaxFilterBytes &&
           geometry_ok(g, g.batch * g.h_out * g.w_out, g.c_out, int64_t(g.c_in) * g.kh * g.kw);
  }

  static int64_t workspace(Geometry const* g) { return g != nullptr && runs(*g) ? 0 : -1; }

  static int32_t run(CallArgs const* c, Geometry const* g, const void* x, const void* w,
                     const void* bias, void* out, cudaStream_t stream) {
    if (c == nullptr || g == nullptr || c->act < kActNone || c->act > kActSilu || !runs(*g) ||
        !geometry_ok(*g, c->m, c->n, c->k)) {
      return kErrShape;
    }
    const uintptr_t vec = uintptr_t(CPT * sizeof(T));
    if (reinterpret_cast<uintptr_t>(out) % vec || reinterpret_cast<uintptr_t>(x) % sizeof(T) ||
        reinterpret_cast<uintptr_t>(w) % sizeof(T) ||
        reinterpret_cast<uintptr_t>(bias) % sizeof(T)) {
      return kErrShape;
    }
    if (current_device() < 0) {
      return kErrDevice;
    }
    const int groups = g->c_out / CPT;
    const int rows = groups >= Threads ? 1 : Threads / groups;
    const int64_t pixels = g->batch * g->h_out * g->w_out;
    const int64_t per_block = int64_t(rows) * PPT;
    const int64_t blocks = (pixels + per_block - 1) / per_block;
    if (blocks > INT32_MAX) {
      return kErrShape;
    }
    conv_direct<T, CPT, PPT><<<dim3(unsigned(blocks)), dim3(groups, rows),
                               size_t(filter_bytes(*g)), stream>>>(
        *g, static_cast<const T*>(x), static_cast<const T*>(w), static_cast<const T*>(bias),
        static_cast<T*>(out), c->act);
    return launch_status();
  }
};

}  // namespace direct
}  // namespace oasr_conv2d
