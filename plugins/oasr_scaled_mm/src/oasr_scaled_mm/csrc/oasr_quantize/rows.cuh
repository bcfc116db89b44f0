// oasr_scaled_mm: per-token (per-row) symmetric int8 quantization of activations, one kernel.
//
// For each row r of X [rows, k] (fp16 or bf16, row-major, contiguous):
//
//   amax     = max_i |float(X[r, i])|
//   scale[r] = amax / 127 (IEEE division), or 1 when amax is 0
//   Q[r, i]  = int8(clamp(rint(float(X[r, i]) / scale[r]), -127, 127))  (IEEE division,
//              round half to even)
//
// which is oasr_scaled_mm.quantize.quantize_rows_reference op for op: the same fp32 values
// in the same order, so the two agree bit for bit (units compile with --fmad=false; nothing
// here could contract anyway). One block per row: the block reduces the row's absmax, then
// writes its int8 row and scale. Rows holding NaN are undefined in both (fmaxf skips NaN).
//
// The C ABI (oasr_scaled_mm.quantize_kernel):
//
//   int32_t oasr_quantize_rows(const void* x, int32_t dtype, int64_t rows, int64_t k,
//                              void* q, void* scale, void* stream);
//
// dtype 0 = fp16, 1 = bf16; returns an oasr_kit::Status.
#pragma once

#include <cstdint>

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "oasr_kit/launcher.cuh"

namespace oasr_quantize {

constexpr int kThreads = 256;

__device__ __forceinline__ float to_float(__half v) { return __half2float(v); }
__device__ __forceinline__ float to_float(__nv_bfloat16 v) { return __bfloat162float(v); }

template <class T>
__global__ void __launch_bounds__(kThreads)
    quantize_rows(const T* __restrict__ x, int64_t k, int8_t* __restrict__ q,
                  float* __restrict__ scale) {
  __shared__ float partial[kThreads / 32];
  const int64_t row = blockIdx.x;
  const T* xr = x + row * k;
  float amax = 0.f;
  for (int64_t i = threadIdx.x; i < k; i += kThreads) {
    amax = fmaxf(amax, fabsf(to_float(xr[i])));
  }
  for (int offset = 16; offset > 0; offset >>= 1) {
    amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, offset));
  }
  if ((threadIdx.x & 31) == 0) {
    partial[threadIdx.x >> 5] = amax;
  }
  __syncthreads();
  if (threadIdx.x < 32) {
    float v = threadIdx.x < kThreads / 32 ? partial[threadIdx.x] : 0.f;
    for (int offset = 16; offset > 0; offset >>= 1) {
      v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, offset));
    }
    if (threadIdx.x == 0) {
      partial[0] = v;
    }
  }
  __syncthreads();
  float s = __fdiv_rn(partial[0], 127.f);
  s = s > 0.f ? s : 1.f;
  if (threadIdx.x == 0) {
    scale[row] = s;
  }
  int8_t* qr = q + row * k;
  for (int64_t i = threadIdx.x; i < k; i += kThreads) {
    float v = rintf(__fdiv_rn(to_float(xr[i]), s));
    qr[i] = static_cast<int8_t>(fminf(fmaxf(v, -127.f), 127.f));
  }
}

template <class T>
inline int32_t launch(const void* x, int64_t rows, int64_t k, void* q, void* scale,
                      cudaStream_t stream) {
  quantize_rows<T><<<dim3(unsigned(rows)), kThreads, 0, stream>>>(
      static_cast<const T*>(x), k, static_cast<int8_t*>(q), static_cast<float*>(scale));
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

}  // namespace oasr_quantize
