// oasr_scaled_mm_fp8: per-token (per-row) e4m3 quantization of fp16/bf16 activations, one
// kernel.
//
// For each row r of X [rows, k] (row-major, contiguous):
//
//   amax     = max_i |float(X[r, i])|            (NaN-propagating, as torch's amax)
//   scale[r] = amax / 448 (IEEE division), or 1 when amax is 0
//   Q[r, i]  = e4m3_rn(clamp(float(X[r, i]) / scale[r], -448, 448))   (IEEE division; the
//              clamp keeps NaN, as torch.clamp does)
//
// which is oasr_scaled_mm_fp8.numerics.quantize_rows op for op, so the two agree bit for bit
// (NaN payloads aside). One 128-thread block per row; rows whose length is a multiple of 8
// are read 16 bytes and written 8 bytes per access.
//
// The C ABI (oasr_scaled_mm_fp8.quantize_kernel):
//
//   int32_t oasr_fp8_quantize_rows(const void* x, int32_t dtype, int64_t rows, int64_t k,
//                                  void* q, void* scale, void* stream);
//
// dtype 0 = fp16, 1 = bf16; returns an oasr_kit::Status.
#pragma once

#include <cstdint>

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include "oasr_kit/launcher.cuh"

namespace oasr_fp8_quantize {

constexpr int kThreads = 128;
constexpr int kVec = 8;

__device__ __forceinline__ float widen(__half v) { return __half2float(v); }
__device__ __forceinline__ float widen(__nv_bfloat16 v) { return __bfloat162float(v); }

__device__ __forceinline__ float nan_max(float a, float b) {
  return (a != a || a > b) ? a : b;
}

__device__ __forceinline__ uint8_t to_e4m3(float v, float s) {
  float x = __fdiv_rn(v, s);
  if (x == x) {
    x = fminf(fmaxf(x, -448.f), 448.f);
  }
  return static_cast<uint8_t>(__nv_cvt_float_to_fp8(x, __NV_SATFINITE, __NV_E4M3));
}

template <class T, bool Vector>
__global__ void __launch_bounds__(kThreads)
    quantize_rows(const T* __restrict__ x, int64_t k, uint8_t* __restrict__ q,
                  float* __restrict__ scale) {
  __shared__ float warp_max[kThreads / 32];
  const T* xr = x + int64_t(blockIdx.x) * k;
  uint8_t* qr = q + int64_t(blockIdx.x) * k;
  float amax = 0.f;
  if constexpr (Vector) {
    for (int64_t i = int64_t(threadIdx.x) * kVec; i < k; i += kThreads * kVec) {
      uint4 raw = *reinterpret_cast<const uint4*>(xr + i);
      const T* v = reinterpret_cast<const T*>(&raw);
#pragma unroll
      for (int j = 0; j < kVec; ++j) {
        amax = nan_max(amax, fabsf(widen(v[j])));
      }
    }
  } else {
    for (int64_t i = threadIdx.x; i < k; i += kThreads) {
      amax = nan_max(amax, fabsf(widen(xr[i])));
    }
  }
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) {
    amax = nan_max(amax, __shfl_xor_sync(0xffffffffu, amax, offset));
  }
  if ((threadIdx.x & 31) == 0) {
    warp_max[threadIdx.x >> 5] = amax;
  }
  __syncthreads();
  amax = warp_max[0];
#pragma unroll
  for (int w = 1; w < kThreads / 32; ++w) {
    amax = nan_max(amax, warp_max[w]);
  }
  float s = __fdiv_rn(amax, 448.f);
  s = s == 0.f ? 1.f : s;
  if (threadIdx.x == 0) {
    scale[blockIdx.x] = s;
  }
  if constexpr (Vector) {
    for (int64_t i = int64_t(threadIdx.x) * kVec; i < k; i += kThreads * kVec) {
      uint4 raw = *reinterpret_cast<const uint4*>(xr + i);
      const T* v = reinterpret_cast<const T*>(&raw);
      uint8_t out[kVec];
#pragma unroll
      for (int j = 0; j < kVec; ++j) {
        out[j] = to_e4m3(widen(v[j]), s);
      }
      *reinterpret_cast<uint2*>(qr + i) = *reinterpret_cast<const uint2*>(out);
    }
  } else {
    for (int64_t i = threadIdx.x; i < k; i += kThreads) {
      qr[i] = to_e4m3(widen(xr[i]), s);
    }
  }
}

template <class T>
inline int32_t launch(const void* x, int64_t rows, int64_t k, void* q, void* scale,
                      cudaStream_t stream) {
  const bool vector = k % kVec == 0 && (reinterpret_cast<uintptr_t>(x) & 15) == 0 &&
                      (reinterpret_cast<uintptr_t>(q) & 7) == 0;
  auto kernel = vector ? quantize_rows<T, true> : quantize_rows<T, false>;
  kernel<<<dim3(unsigned(rows)), kThreads, 0, stream>>>(
      static_cast<const T*>(x), k, static_cast<uint8_t*>(q), static_cast<float*>(scale));
  return oasr_kit::launch_status();
}

inline int32_t quantize(const void* x, int32_t dtype, int64_t rows, int64_t k, void* q,
                        void* scale, cudaStream_t stream) {
  if (rows <= 0 || k <= 0 || rows > INT32_MAX) {
    return oasr_kit::kErrShape;
  }
  switch (dtype) {
    case 0: return launch<__half>(x, rows, k, q, scale, stream);
    case 1: return launch<__nv_bfloat16>(x, rows, k, q, scale, stream);
    default: return oasr_kit::kErrDtype;
  }
}

}  // namespace oasr_fp8_quantize
