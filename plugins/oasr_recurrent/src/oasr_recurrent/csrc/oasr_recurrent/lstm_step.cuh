// oasr_recurrent: one step of one LSTM layer in one launch (torch.lstm_cell's semantics).
//
// A unit exports, beside the kit's call record (oasr_kit/launcher.cuh):
//
//   OASR_EXPORT int32_t <symbol>(const oasr_kit::CallArgs* call, const void* x, const void* h,
//                                const void* c0, const void* w_ih, const void* w_hh,
//                                const void* b_ih, const void* b_hh, void* h1, void* c1,
//                                void* stream);
//   OASR_EXPORT int64_t <symbol>_workspace(int64_t batch, int64_t input, int64_t hidden,
//                                          int32_t dtype);
//
// call->m = batch B, call->n = hidden H, call->k = input I; call->dtype a DType code. x (B, I),
// h and c0 (B, H), h1 and c1 (B, H) are contiguous rows; w_ih (4H, I) and w_hh (4H, H) are
// torch's weights as nn.LSTM holds them (gate rows i, f, g, o of every unit, row-major);
// b_ih and b_hh (4H) or null. All in one dtype. The launcher returns an oasr_kit::Status; the
// workspace query returns 0 (no scratch) or -1 for a dtype not compiled in or a shape the
// config cannot run.
//
// gates = x w_ih^T + b_ih + h w_hh^T + b_hh, chunked i, f, g, o;
// c1 = sigmoid(f) c0 + sigmoid(i) tanh(g); h1 = sigmoid(o) tanh(c1); fp32 throughout, one
// rounding of c1 and of h1 to the dtype.
//
// The grid is (ceil(H / Units), ceil(B / Rows)). A CTA owns Units hidden units, all four gate
// rows of each (4 * Units rows of w_ih and of w_hh), for Rows batch rows:
//   1. it stages its Rows rows of [x | h] in shared memory (16-byte loads; rows past B zero);
//   2. its warps form Warps / KSplit groups; a group takes gate rows round robin, and the
//      KSplit warps of a group share a row's K = I + H: warp s of the group reads the row's
//      16-byte vectors s * 32 + lane, s * 32 + lane + KSplit * 32, ... (each weight byte is
//      read once per CTA, coalesced), converts them to fp32 and accumulates one fp32 dot
//      product per batch row; warp-shuffle reductions, and one fp32 partial per (warp of the
//      group, gate row, batch row) in shared memory;
//   3. after one barrier its threads add the partials and both biases and apply the
//      pointwise update, writing h1 and c1 of its units and rows.
// So the four gates and the update of a unit never leave the CTA, and one launch does the step.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "oasr_kit/launcher.cuh"

namespace oasr_recurrent {

using namespace oasr_kit;

enum DType : int32_t { kFp16 = 0, kBf16 = 1 };

constexpr int kVector = 8;                 // elements per 16-byte access
constexpr int64_t kSmemCap = 96 * 1024;    // oasr_recurrent.space.SMEM_CAP

template <int D>
struct Element;
template <>
struct Element<kFp16> {
  using T = __half;
  using T2 = __half2;
};
template <>
struct Element<kBf16> {
  using T = __nv_bfloat16;
  using T2 = __nv_bfloat162;
};

__device__ __forceinline__ float2 to_float2(__half2 v) { return __half22float2(v); }
__device__ __forceinline__ float2 to_float2(__nv_bfloat162 v) { return __bfloat1622float2(v); }
__device__ __forceinline__ float to_float(__half v) { return __half2float(v); }
__device__ __forceinline__ float to_float(__nv_bfloat16 v) { return __bfloat162float(v); }

template <class T>
__device__ __forceinline__ T from_float(float v);
template <>
__device__ __forceinline__ __half from_float<__half>(float v) { return __float2half_rn(v); }
template <>
__device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float v) {
  return __float2bfloat16_rn(v);
}

// The eight elements of a 16-byte vector, as fp32.
template <class T2>
__device__ __forceinline__ void unpack8(uint4 v, float (&f)[kVector]) {
  const T2* p = reinterpret_cast<const T2*>(&v);
#pragma unroll
  for (int i = 0; i < kVector / 2; ++i) {
    const float2 t = to_float2(p[i]);
    f[2 * i] = t.x;
    f[2 * i + 1] = t.y;
  }
}

__device__ __forceinline__ float sigmoid(float v) { return 1.f / (1.f + expf(-v)); }

struct Operands {
  const void* x;
  const void* h;
  const void* c0;
  const void* w_ih;
  const void* w_hh;
  const void* b_ih;
  const void* b_hh;
  void* h1;
  void* c1;
  int32_t batch, input, hidden;
};

// acc[r] += w[k0 .. k0 + n) . staged row r [offset + k0 ..), over the vectors this warp owns.
template <class T, class T2, int Rows, int KSplit>
__device__ __forceinline__ void dot_rows(const T* __restrict__ w, int vectors,
                                         const T* staged, int stride, int offset, int s,
                                         int lane, float (&acc)[Rows]) {
  const uint4* wv = reinterpret_cast<const uint4*>(w);
  for (int v = s * 32 + lane; v < vectors; v += KSplit * 32) {
    float wf[kVector];
    unpack8<T2>(__ldg(wv + v), wf);
#pragma unroll
    for (int r = 0; r < Rows; ++r) {
      float xf[kVector];
      unpack8<T2>(*reinterpret_cast<const uint4*>(staged + r * stride + offset + v * kVector),
                  xf);
#pragma unroll
      for (int e = 0; e < kVector; ++e) {
        acc[r] = fmaf(wf[e], xf[e], acc[r]);
      }
    }
  }
}

template <int DType, int Units, int Rows, int Threads, int KSplit>
__global__ void __launch_bounds__(Threads) lstm_step_kernel(Operands p) {
  using T = typename Element<DType>::T;
  using T2 = typename Element<DType>::T2;
  constexpr int kWarps = Threads / 32;
  constexpr int kGroups = kWarps / KSplit;
  constexpr int kGateRows = 4 * Units;
  extern __shared__ __align__(16) unsigned char smem[];

  const int input = p.input, hidden = p.hidden;
  const int stride = input + hidden;  // one staged row: [x | h]
  T* staged = reinterpret_cast<T*>(smem);
  float* partial = reinterpret_cast<float*>(smem + size_t(Rows) * stride * sizeof(T));
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int row0 = blockIdx.y * Rows;
  const int unit0 = blockIdx.x * Units;

  // 1. Stage [x | h] of this CTA's batch rows.
  const T* x = static_cast<const T*>(p.x);
  const T* h = static_cast<const T*>(p.h);
  const int row_vectors = stride / kVector, in_vectors = input / kVector;
  for (int i = tid; i < Rows * row_vectors; i += Threads) {
    const int r = i / row_vectors, v = i - r * row_vectors, b = row0 + r;
    uint4 val = make_uint4(0u, 0u, 0u, 0u);
    if (b < p.batch) {
      val = v < in_vectors
                ? __ldg(reinterpret_cast<const uint4*>(x + size_t(b) * input) + v)
                : __ldg(reinterpret_cast<const uint4*>(h + size_t(b) * hidden) +
                        (v - in_vectors));
    }
    *reinterpret_cast<uint4*>(staged + r * stride + v * kVector) = val;
  }
  __syncthreads();

  // 2. Gate rows: group `warp / KSplit` takes rows q = group, group + kGroups, ...
  const T* w_ih = static_cast<const T*>(p.w_ih);
  const T* w_hh = static_cast<const T*>(p.w_hh);
  const int group = warp / KSplit, s = warp - group * KSplit;
  for (int q = group; q < kGateRows; q += kGroups) {
    const int gate = q / Units, unit = unit0 + (q - gate * Units);
    float acc[Rows];
#pragma unroll
    for (int r = 0; r < Rows; ++r) {
      acc[r] = 0.f;
    }
    if (unit < hidden) {
      const size_t row = size_t(gate) * hidden + unit;
      dot_rows<T, T2, Rows, KSplit>(w_ih + row * input, in_vectors, staged, stride, 0, s, lane,
                                    acc);
      dot_rows<T, T2, Rows, KSplit>(w_hh + row * hidden, hidden / kVector, staged, stride,
                                    input, s, lane, acc);
    }
#pragma unroll
    for (int r = 0; r < Rows; ++r) {
#pragma unroll
      for (int off = 16; off > 0; off >>= 1) {
        acc[r] += __shfl_xor_sync(0xffffffffu, acc[r], off);
      }
    }
    if (lane == 0) {
#pragma unroll
      for (int r = 0; r < Rows; ++r) {
        partial[(s * kGateRows + q) * Rows + r] = acc[r];
      }
    }
  }
  __syncthreads();

  // 3. The pointwise update of this CTA's units and rows.
  const T* c0 = static_cast<const T*>(p.c0);
  const T* b_ih = static_cast<const T*>(p.b_ih);
  const T* b_hh = static_cast<const T*>(p.b_hh);
  T* h1 = static_cast<T*>(p.h1);
  T* c1 = static_cast<T*>(p.c1);
  for (int i = tid; i < Units * Rows; i += Threads) {
    const int r = i / Units, u = i - r * Units;
    const int unit = unit0 + u, b = row0 + r;
    if (unit >= hidden || b >= p.batch) {
      continue;
    }
    float g[4];
#pragma unroll
    for (int gate = 0; gate < 4; ++gate) {
      float sum = 0.f;
#pragma unroll
      for (int k = 0; k < KSplit; ++k) {
        sum += partial[(k * kGateRows + gate * Units + u) * Rows + r];
      }
      const int idx = gate * hidden + unit;
      if (b_ih != nullptr) {
        sum += to_float(b_ih[idx]);
      }
      if (b_hh != nullptr) {
        sum += to_float(b_hh[idx]);
      }
      g[gate] = sum;
    }
    const size_t at = size_t(b) * hidden + unit;
    const float c_new = sigmoid(g[1]) * to_float(c0[at]) + sigmoid(g[0]) * tanhf(g[2]);
    c1[at] = from_float<T>(c_new);
    h1[at] = from_float<T>(sigmoid(g[3]) * tanhf(c_new));
  }
}

// One config: Units hidden units and Rows batch rows per CTA, Threads threads, KSplit warps
// per gate row (oasr_recurrent.space).
template <int DType, int Units, int Rows, int Threads, int KSplit>
struct LstmStep {
  using T = typename Element<DType>::T;
  static_assert(Threads % 32 == 0 && Threads <= 1024, "whole warps, at most 1024 threads");
  static_assert((Threads / 32) % KSplit == 0, "KSplit divides the warps");
  static_assert(4 * Units >= (Threads / 32) / KSplit, "every warp group owns a gate row");

  static int64_t smem_bytes(int64_t input, int64_t hidden) {
    return int64_t(Rows) * (input + hidden) * int64_t(sizeof(T)) +
           int64_t(KSplit) * 4 * Units * Rows * int64_t(sizeof(float));
  }

  static bool runs(int64_t batch, int64_t input, int64_t hidden) {
    return batch > 0 && input > 0 && hidden > 0 && input % kVector == 0 &&
           hidden % kVector == 0 && batch <= INT32_MAX && 4 * hidden <= INT32_MAX &&
           input + hidden <= INT32_MAX && (batch + Rows - 1) / Rows <= 65535 &&
           smem_bytes(input, hidden) <= kSmemCap;
  }

  static int64_t workspace(int64_t batch, int64_t input, int64_t hidden) {
    return runs(batch, input, hidden) ? 0 : -1;
  }

  static bool aligned(const void* p, uintptr_t bytes) {
    return reinterpret_cast<uintptr_t>(p) % bytes == 0;
  }

  static int32_t run(CallArgs const* c, const void* x, const void* h, const void* c0,
                     const void* w_ih, const void* w_hh, const void* b_ih, const void* b_hh,
                     void* h1, void* c1, cudaStream_t stream) {
    if (c == nullptr || !runs(c->m, c->k, c->n)) {
      return kErrShape;
    }
    if (x == nullptr || h == nullptr || c0 == nullptr || w_ih == nullptr || w_hh == nullptr ||
        h1 == nullptr || c1 == nullptr) {
      return kErrShape;
    }
    // Rows of x, h and the weights are read as 16-byte vectors; the rest element-wise.
    if (!aligned(x, 16) || !aligned(h, 16) || !aligned(w_ih, 16) || !aligned(w_hh, 16) ||
        !aligned(c0, sizeof(T)) || !aligned(b_ih, sizeof(T)) || !aligned(b_hh, sizeof(T)) ||
        !aligned(h1, sizeof(T)) || !aligned(c1, sizeof(T))) {
      return kErrShape;
    }
    const int dev = current_device();
    if (dev < 0) {
      return kErrDevice;
    }
    const int smem = int(smem_bytes(c->k, c->n));
    auto kernel = lstm_step_kernel<DType, Units, Rows, Threads, KSplit>;
    // The limit is raised once per device to the cap every supported shape fits under.
    if (smem >= (48 << 10) &&
        !allow_smem<LstmStep>(reinterpret_cast<const void*>(kernel), int(kSmemCap), dev)) {
      return kErrInit;
    }
    Operands ops{x, h, c0, w_ih, w_hh, b_ih, b_hh, h1, c1,
                 int32_t(c->m), int32_t(c->k), int32_t(c->n)};
    const dim3 grid(unsigned((c->n + Units - 1) / Units), unsigned((c->m + Rows - 1) / Rows));
    kernel<<<grid, Threads, size_t(smem), stream>>>(ops);
    return launch_status();
  }
};

}  // namespace oasr_recurrent
