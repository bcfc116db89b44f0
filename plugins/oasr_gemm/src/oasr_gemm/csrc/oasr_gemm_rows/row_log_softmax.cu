// oasr_gemm row log-softmax: x[r, :] <- x[r, :] - logsumexp(x[r, :]) in place, for the rows of
// a contiguous fp16/bf16 matrix [rows, n] (the logits a gemm config just wrote: op
// gemm_log_softmax, the CTC head's linear + log-softmax).
//
//   int32_t oasr_gemm_row_log_softmax(void* x, int32_t dtype, int64_t rows, int64_t n,
//                                     void* stream);
//       dtype 0 = fp16, 1 = bf16; an oasr_kit::Status (kErrShape: n not a positive multiple of
//       8 or above kMaxN, rows not positive, x not 16-byte aligned; kErrDtype; kErrDevice: no
//       current CUDA device; kErrLaunch).
//
// Numerics: every element is read into fp32 and the output is x - max - log(sum of exp(x -
// max)) in fp32, rounded once to the input dtype. A row that fits the group's registers (the
// CTC heads' vocabularies) takes the row's max first (a max over the thread's registers, then
// across the row's threads), then the sum of exp(x - max) the same way: no data-dependent
// branch and one exp an element. A longer row keeps an online (max, sum) pair per thread over
// its first pass, merged across the threads, so it reads the row twice, not three times.
// Either way, as torch's log_softmax: a NaN or a +inf anywhere in a row makes the whole row
// NaN (exp(inf - inf) is NaN; fmaxf passes a NaN over, the sum then carries it), a row of -inf
// alone is NaN (exp(-inf + inf)), and other -inf logits add nothing to the sum and come out
// -inf. In the online pair a NaN rides in the sums: a pair whose max is -inf scales its sum by
// 0, never replaces it, so 0 * NaN keeps it.
//
// Layout: a row belongs to one group of threads -- one warp for n <= 1024 (several rows per
// CTA), a CTA of 256 threads above. Each thread loads 16-byte vectors of 8 elements. When the
// row fits the group's registers (kItems vectors a thread: 1024 elements a warp, 8192 a CTA)
// it is read once and written once; a longer row takes two passes (the online pair, then
// re-read and write), so any vocabulary works at one extra read.
#include <cstdint>

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "oasr_kit/launcher.cuh"

namespace oasr_gemm_rows {

constexpr int kVec = 8;      // elements per 16-byte access
constexpr int kItems = 4;    // vectors a thread holds in registers
constexpr int64_t kMaxN = int64_t(1) << 24;  // row lengths the int32 indexing covers safely

struct Online {
  float m;  // running max
  float s;  // sum of exp(x - m)
};

// exp(from - to) for a running sum rescaled from max `from` to max `to` >= from: 0 when `from`
// is -inf (the sum so far is 0, or NaN, which the product keeps).
__device__ __forceinline__ float rescale(float from, float to) {
  return from == -INFINITY ? 0.f : __expf(from - to);
}

__device__ __forceinline__ Online merge(Online a, Online b) {
  float m = fmaxf(a.m, b.m);  // m is never NaN: push only raises it to a larger x
  if (m == -INFINITY) {
    return {m, a.s + b.s};
  }
  return {m, a.s * rescale(a.m, m) + b.s * rescale(b.m, m)};
}

__device__ __forceinline__ Online push(Online acc, float x) {
  if (x > acc.m) {
    // exp(x - x) is 1, or NaN for x = +inf (torch's inf - inf).
    acc.s = acc.s * rescale(acc.m, x) + (x == INFINITY ? NAN : 1.f);
    acc.m = x;
  } else if (!(x == -INFINITY && acc.m == -INFINITY)) {
    acc.s += __expf(x - acc.m);  // a NaN x makes the sum NaN; exp(-inf) adds 0
  }
  return acc;
}

template <int Width>
__device__ __forceinline__ Online warp_merge(Online v) {
#pragma unroll
  for (int offset = Width / 2; offset > 0; offset /= 2) {
    Online o;
    o.m = __shfl_xor_sync(0xffffffffu, v.m, offset, Width);
    o.s = __shfl_xor_sync(0xffffffffu, v.s, offset, Width);
    v = merge(v, o);
  }
  return v;
}

template <class T>
struct Pack;

template <>
struct Pack<__half> {
  __device__ __forceinline__ static void load(uint4 raw, float (&f)[kVec]) {
    const __half2* h = reinterpret_cast<const __half2*>(&raw);
#pragma unroll
    for (int i = 0; i < kVec / 2; ++i) {
      float2 v = __half22float2(h[i]);
      f[2 * i] = v.x;
      f[2 * i + 1] = v.y;
    }
  }
  __device__ __forceinline__ static uint4 store(const float (&f)[kVec]) {
    uint4 raw;
    __half2* h = reinterpret_cast<__half2*>(&raw);
#pragma unroll
    for (int i = 0; i < kVec / 2; ++i) {
      h[i] = __floats2half2_rn(f[2 * i], f[2 * i + 1]);
    }
    return raw;
  }
};

template <>
struct Pack<__nv_bfloat16> {
  __device__ __forceinline__ static void load(uint4 raw, float (&f)[kVec]) {
    const __nv_bfloat162* h = reinterpret_cast<const __nv_bfloat162*>(&raw);
#pragma unroll
    for (int i = 0; i < kVec / 2; ++i) {
      float2 v = __bfloat1622float2(h[i]);
      f[2 * i] = v.x;
      f[2 * i + 1] = v.y;
    }
  }
  __device__ __forceinline__ static uint4 store(const float (&f)[kVec]) {
    uint4 raw;
    __nv_bfloat162* h = reinterpret_cast<__nv_bfloat162*>(&raw);
#pragma unroll
    for (int i = 0; i < kVec / 2; ++i) {
      h[i] = __floats2bfloat162_rn(f[2 * i], f[2 * i + 1]);
    }
    return raw;
  }
};

// The (max, sum) of a row over its Group threads: a warp's shuffles, then, for a CTA-wide
// group, one merge of the warps' pairs through shared memory.
template <int Group>
__device__ __forceinline__ Online row_merge(Online v, Online* shared) {
  v = warp_merge<(Group < 32 ? Group : 32)>(v);
  if constexpr (Group > 32) {
    constexpr int kWarps = Group / 32;
    int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    if (lane == 0) {
      shared[warp] = v;
    }
    __syncthreads();
    v = lane < kWarps ? shared[lane] : Online{-INFINITY, 0.f};
    v = warp_merge<32>(v);
    __syncthreads();  // shared is reused by the next row
  }
  return v;
}

// A float reduced over the row's Group threads (Max: fmaxf, else +): a warp's shuffles, then,
// for a CTA-wide group, one more across the warps through shared memory.
template <int Group, bool Max>
__device__ __forceinline__ float row_reduce(float v, float* shared) {
  constexpr int kWidth = Group < 32 ? Group : 32;
#pragma unroll
  for (int offset = kWidth / 2; offset > 0; offset /= 2) {
    float o = __shfl_xor_sync(0xffffffffu, v, offset, kWidth);
    v = Max ? fmaxf(v, o) : v + o;
  }
  if constexpr (Group > 32) {
    constexpr int kWarps = Group / 32;
    int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    if (lane == 0) {
      shared[warp] = v;
    }
    __syncthreads();
    v = lane < kWarps ? shared[lane] : (Max ? -INFINITY : 0.f);
#pragma unroll
    for (int offset = 16; offset > 0; offset /= 2) {
      float o = __shfl_xor_sync(0xffffffffu, v, offset);
      v = Max ? fmaxf(v, o) : v + o;
    }
    __syncthreads();  // shared is reused by the next reduction
  }
  return v;
}

// Group threads per row (32: a warp; 256: the CTA), Rows rows per CTA.
template <class T, int Group, int Rows>
__global__ void __launch_bounds__(Group * Rows)
    row_log_softmax(T* __restrict__ x, int64_t rows, int n) {
  __shared__ Online shared[Group > 32 ? Group / 32 : 1];   // the long rows' pairs
  __shared__ float partial[Group > 32 ? Group / 32 : 1];  // the short rows' max, then sum
  int64_t row = int64_t(blockIdx.x) * Rows + threadIdx.x / Group;
  if (row >= rows) {
    return;  // whole groups exit together: Group divides the CTA, and a CTA-wide group's
             // row index is uniform
  }
  int t = threadIdx.x % Group;
  uint4* base = reinterpret_cast<uint4*>(x + row * int64_t(n));
  int vectors = n / kVec;
  if (vectors <= Group * kItems) {
    float v[kItems][kVec];
    float m = -INFINITY;
#pragma unroll
    for (int i = 0; i < kItems; ++i) {
      int idx = t + i * Group;
      if (idx < vectors) {
        Pack<T>::load(base[idx], v[i]);
#pragma unroll
        for (int j = 0; j < kVec; ++j) {
          m = fmaxf(m, v[i][j]);
        }
      }
    }
    m = row_reduce<Group, true>(m, partial);
    float sum = 0.f;
#pragma unroll
    for (int i = 0; i < kItems; ++i) {
      if (t + i * Group < vectors) {
#pragma unroll
        for (int j = 0; j < kVec; ++j) {
          sum += __expf(v[i][j] - m);
        }
      }
    }
    sum = row_reduce<Group, false>(sum, partial);
    float shift = m + __logf(sum);
#pragma unroll
    for (int i = 0; i < kItems; ++i) {
      int idx = t + i * Group;
      if (idx < vectors) {
#pragma unroll
        for (int j = 0; j < kVec; ++j) {
          v[i][j] -= shift;
        }
        base[idx] = Pack<T>::store(v[i]);
      }
    }
    return;
  }

  Online acc{-INFINITY, 0.f};
  for (int idx = t; idx < vectors; idx += Group) {
    float v[kVec];
    Pack<T>::load(base[idx], v);
#pragma unroll
    for (int j = 0; j < kVec; ++j) {
      acc = push(acc, v[j]);
    }
  }
  acc = row_merge<Group>(acc, shared);
  float shift = acc.m + __logf(acc.s);
  for (int idx = t; idx < vectors; idx += Group) {
    float v[kVec];
    Pack<T>::load(base[idx], v);
#pragma unroll
    for (int j = 0; j < kVec; ++j) {
      v[j] -= shift;
    }
    base[idx] = Pack<T>::store(v);
  }
}

template <class T>
int32_t launch(void* x, int64_t rows, int64_t n, cudaStream_t stream) {
  T* p = static_cast<T*>(x);
  if (n <= int64_t(32) * kItems * kVec) {
    constexpr int kRows = 4;  // 128 threads: four rows a CTA
    int64_t blocks = (rows + kRows - 1) / kRows;
    if (blocks > INT32_MAX) {
      return oasr_kit::kErrShape;
    }
    row_log_softmax<T, 32, kRows><<<unsigned(blocks), 32 * kRows, 0, stream>>>(p, rows, int(n));
  } else {
    if (rows > INT32_MAX) {
      return oasr_kit::kErrShape;
    }
    row_log_softmax<T, 256, 1><<<unsigned(rows), 256, 0, stream>>>(p, rows, int(n));
  }
  return oasr_kit::launch_status();
}

}  // namespace oasr_gemm_rows

OASR_EXPORT int32_t oasr_gemm_row_log_softmax(void* x, int32_t dtype, int64_t rows, int64_t n,
                                              void* stream) {
  if (rows <= 0 || n <= 0 || n % oasr_gemm_rows::kVec || n > oasr_gemm_rows::kMaxN ||
      reinterpret_cast<uintptr_t>(x) % 16) {
    return oasr_kit::kErrShape;
  }
  if (dtype != 0 && dtype != 1) {
    return oasr_kit::kErrDtype;
  }
  if (oasr_kit::current_device() < 0) {
    return oasr_kit::kErrDevice;
  }
  cudaStream_t s = static_cast<cudaStream_t>(stream);
  return dtype == 0 ? oasr_gemm_rows::launch<__half>(x, rows, n, s)
                    : oasr_gemm_rows::launch<__nv_bfloat16>(x, rows, n, s);
}
