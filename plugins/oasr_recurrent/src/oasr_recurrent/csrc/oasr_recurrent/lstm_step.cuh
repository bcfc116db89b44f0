// oasr_recurrent: one step of one recurrent layer in one launch: an LSTM step
// (torch.lstm_cell's semantics, LstmStep), an Elman RNN step (torch.rnn_tanh_cell /
// torch.rnn_relu_cell, RnnStep) or a GRU step (torch.gru_cell, GruStep). One kernel template
// serves them all; its Cell parameter holds the gate rows per hidden unit, the dot products
// accumulated per unit and the pointwise epilogue.
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
//
// An RNN step is the same with one gate row per unit (w_ih (H, I), w_hh (H, H), biases (H)):
// h1 = act(x w_ih^T + b_ih + h w_hh^T + b_hh), act tanh or relu (RnnAct); c0 and c1 are
// unused (null).
//
// A GRU step has three gate rows per unit, r, z, n (w_ih (3H, I), w_hh (3H, H), biases (3H)),
// and accumulates four dot products per unit: r and z over [x | h] as above, and the n gate's
// input and hidden parts apart (n_x = x W_in^T + b_in, n_h = h W_hn^T + b_hn), since
// n = tanh(n_x + r n_h); h1 = n + z (h - n), torch's form of (1 - z) n + z h. c0 and c1 are
// unused (null).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

#include "oasr_kit/launcher.cuh"

namespace oasr_recurrent {

using namespace oasr_kit;

enum DType : int32_t { kFp16 = 0, kBf16 = 1 };

constexpr int kVector = 8;                 // elements per 16-byte access
constexpr int64_t kSmemCap = 96 * 1024;    // oasr_recurrent.space.SMEM_CAP

// A dtype code's element: its scalar and pair types, and fp32 from and to them (widen: exact;
// narrow: round to nearest even).
template <int D>
struct Element {
  static_assert(D == kFp16 || D == kBf16, "a DType code");
  static constexpr bool kHalf = D == kFp16;
  using T = std::conditional_t<kHalf, __half, __nv_bfloat16>;
  using T2 = std::conditional_t<kHalf, __half2, __nv_bfloat162>;

  __device__ static float widen(T v) {
    if constexpr (kHalf) return __half2float(v);
    else return __bfloat162float(v);
  }
  __device__ static float2 widen(T2 v) {
    if constexpr (kHalf) return __half22float2(v);
    else return __bfloat1622float2(v);
  }
  __device__ static T narrow(float v) {
    if constexpr (kHalf) return __float2half_rn(v);
    else return __float2bfloat16_rn(v);
  }
};

// The eight elements of a 16-byte vector of E::T, as fp32.
template <class E>
__device__ __forceinline__ void unpack8(uint4 v, float (&f)[kVector]) {
  const typename E::T2* p = reinterpret_cast<const typename E::T2*>(&v);
#pragma unroll
  for (int i = 0; i < kVector / 2; ++i) {
    const float2 t = E::widen(p[i]);
    f[2 * i] = t.x;
    f[2 * i + 1] = t.y;
  }
}

__device__ __forceinline__ float sigmoid(float v) { return 1.f / (1.f + expf(-v)); }

// A cell whose every accumulated row is one gate row over all of [x | h]: row q of a unit
// reads gate row q of w_ih and of w_hh and adds both biases (the LSTM's and the RNN's).
template <int Gates>
struct WholeRows {
  static constexpr int kGates = Gates;  // gate rows per unit in w_ih / w_hh
  static constexpr int kRows = Gates;   // dot products accumulated per unit
  __device__ __forceinline__ static int weight_row(int q) { return q; }
  __device__ __forceinline__ static bool reads_input(int) { return true; }
  __device__ __forceinline__ static bool reads_hidden(int) { return true; }
};

// The LSTM cell: gate rows i, f, g, o per unit; c1 = sigmoid(f) c0 + sigmoid(i) tanh(g),
// h1 = sigmoid(o) tanh(c1).
struct LstmCell : WholeRows<4> {
  static constexpr bool kCellState = true;

  template <class E, class T>
  __device__ __forceinline__ static void update(const float (&g)[kRows], size_t at,
                                                const T* __restrict__,
                                                const T* __restrict__ c0, T* __restrict__ h1,
                                                T* __restrict__ c1) {
    const float c_new = sigmoid(g[1]) * E::widen(c0[at]) + sigmoid(g[0]) * tanhf(g[2]);
    c1[at] = E::narrow(c_new);
    h1[at] = E::narrow(sigmoid(g[3]) * tanhf(c_new));
  }
};

enum RnnAct : int32_t { kTanh = 0, kRelu = 1 };

// The Elman RNN cell: one gate row per unit; h1 = act(gate), no cell state. Its relu keeps a
// NaN gate NaN, as torch.relu does (fmaxf would return the 0).
__device__ __forceinline__ float relu_keeping_nan(float x) { return x < 0.f ? 0.f : x; }

template <int Act>
struct RnnCell : WholeRows<1> {
  static_assert(Act == kTanh || Act == kRelu, "an RnnAct code");
  static constexpr bool kCellState = false;

  template <class E, class T>
  __device__ __forceinline__ static void update(const float (&g)[kRows], size_t at,
                                                const T* __restrict__, const T* __restrict__,
                                                T* __restrict__ h1, T* __restrict__) {
    h1[at] = E::narrow(Act == kTanh ? tanhf(g[0]) : relu_keeping_nan(g[0]));
  }
};

// The GRU cell: gate rows r, z, n per unit; accumulated rows r, z (over [x | h], both
// biases), n_x (x and w_ih's n row, b_in) and n_h (h and w_hh's n row, b_hn);
// n = tanh(n_x + r n_h), h1 = n + z (h - n).
struct GruCell {
  static constexpr int kGates = 3;
  static constexpr int kRows = 4;
  static constexpr bool kCellState = false;
  __device__ __forceinline__ static int weight_row(int q) { return q < 2 ? q : 2; }
  __device__ __forceinline__ static bool reads_input(int q) { return q != 3; }
  __device__ __forceinline__ static bool reads_hidden(int q) { return q != 2; }

  template <class E, class T>
  __device__ __forceinline__ static void update(const float (&g)[kRows], size_t at,
                                                const T* __restrict__ h, const T* __restrict__,
                                                T* __restrict__ h1, T* __restrict__) {
    const float r = sigmoid(g[0]), z = sigmoid(g[1]);
    const float n = tanhf(g[2] + r * g[3]);
    h1[at] = E::narrow(n + z * (E::widen(h[at]) - n));
  }
};

// acc[r] += w[k0 .. k0 + n) . staged row r [offset + k0 ..), over the vectors this warp owns.
template <class E, int Rows, int KSplit>
__device__ __forceinline__ void dot_rows(const typename E::T* __restrict__ w, int vectors,
                                         const typename E::T* staged, int stride, int offset,
                                         int s, int lane, float (&acc)[Rows]) {
  const uint4* wv = reinterpret_cast<const uint4*>(w);
  for (int v = s * 32 + lane; v < vectors; v += KSplit * 32) {
    float wf[kVector];
    unpack8<E>(__ldg(wv + v), wf);
#pragma unroll
    for (int r = 0; r < Rows; ++r) {
      float xf[kVector];
      unpack8<E>(*reinterpret_cast<const uint4*>(staged + r * stride + offset + v * kVector),
                 xf);
#pragma unroll
      for (int e = 0; e < kVector; ++e) {
        acc[r] = fmaf(wf[e], xf[e], acc[r]);
      }
    }
  }
}

// x (batch, input); h, c0, h1, c1 (batch, hidden); w_ih (G hidden, input), w_hh (G hidden,
// hidden); b_ih, b_hh (G hidden) or null; G = Cell::kGates (c0, c1 unused without a cell
// state). Accumulated row q of a unit (Cell::kRows per unit) reads gate row
// Cell::weight_row(q) of w_ih where Cell::reads_input(q) and of w_hh where
// Cell::reads_hidden(q), with the same rows' biases.
template <class Cell, int DType, int Units, int Rows, int Threads, int KSplit,
          class E = Element<DType>, class T = typename E::T>
__global__ void __launch_bounds__(Threads)
    cell_step_kernel(const T* __restrict__ x, const T* __restrict__ h, const T* __restrict__ c0,
                     const T* __restrict__ w_ih, const T* __restrict__ w_hh, const T* b_ih,
                     const T* b_hh, T* __restrict__ h1, T* __restrict__ c1, int batch,
                     int input, int hidden) {
  constexpr int kWarps = Threads / 32;
  constexpr int kGroups = kWarps / KSplit;
  constexpr int kRows = Cell::kRows;
  constexpr int kGateRows = kRows * Units;
  extern __shared__ __align__(16) unsigned char smem[];

  const int stride = input + hidden;  // one staged row: [x | h]
  T* staged = reinterpret_cast<T*>(smem);
  float* partial = reinterpret_cast<float*>(smem + size_t(Rows) * stride * sizeof(T));
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int row0 = blockIdx.y * Rows;
  const int unit0 = blockIdx.x * Units;

  // 1. Stage [x | h] of this CTA's batch rows.
  const int row_vectors = stride / kVector, in_vectors = input / kVector;
  for (int i = tid; i < Rows * row_vectors; i += Threads) {
    const int r = i / row_vectors, v = i - r * row_vectors, b = row0 + r;
    uint4 val = make_uint4(0u, 0u, 0u, 0u);
    if (b < batch) {
      val = v < in_vectors
                ? __ldg(reinterpret_cast<const uint4*>(x + size_t(b) * input) + v)
                : __ldg(reinterpret_cast<const uint4*>(h + size_t(b) * hidden) +
                        (v - in_vectors));
    }
    *reinterpret_cast<uint4*>(staged + r * stride + v * kVector) = val;
  }
  __syncthreads();

  // 2. Gate rows: group `warp / KSplit` takes rows q = group, group + kGroups, ...
  const int group = warp / KSplit, s = warp - group * KSplit;
  for (int q = group; q < kGateRows; q += kGroups) {
    const int gate = q / Units, unit = unit0 + (q - gate * Units);
    float acc[Rows];
#pragma unroll
    for (int r = 0; r < Rows; ++r) {
      acc[r] = 0.f;
    }
    if (unit < hidden) {
      const size_t row = size_t(Cell::weight_row(gate)) * hidden + unit;
      if (Cell::reads_input(gate)) {
        dot_rows<E, Rows, KSplit>(w_ih + row * input, in_vectors, staged, stride, 0, s, lane,
                                  acc);
      }
      if (Cell::reads_hidden(gate)) {
        dot_rows<E, Rows, KSplit>(w_hh + row * hidden, hidden / kVector, staged, stride,
                                  input, s, lane, acc);
      }
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
  for (int i = tid; i < Units * Rows; i += Threads) {
    const int r = i / Units, u = i - r * Units;
    const int unit = unit0 + u, b = row0 + r;
    if (unit >= hidden || b >= batch) {
      continue;
    }
    float g[kRows];
#pragma unroll
    for (int gate = 0; gate < kRows; ++gate) {
      float sum = 0.f;
#pragma unroll
      for (int k = 0; k < KSplit; ++k) {
        sum += partial[(k * kGateRows + gate * Units + u) * Rows + r];
      }
      const int idx = Cell::weight_row(gate) * hidden + unit;
      if (b_ih != nullptr && Cell::reads_input(gate)) {
        sum += E::widen(b_ih[idx]);
      }
      if (b_hh != nullptr && Cell::reads_hidden(gate)) {
        sum += E::widen(b_hh[idx]);
      }
      g[gate] = sum;
    }
    Cell::template update<E, T>(g, size_t(b) * hidden + unit, h, c0, h1, c1);
  }
}

// One config of one cell: Units hidden units and Rows batch rows per CTA, Threads threads,
// KSplit warps per gate row (oasr_recurrent.space).
template <class Cell, int DType, int Units, int Rows, int Threads, int KSplit>
struct CellStep {
  using T = typename Element<DType>::T;
  static constexpr int kGates = Cell::kGates;
  static constexpr int kRows = Cell::kRows;
  static_assert(Threads % 32 == 0 && Threads <= 1024, "whole warps, at most 1024 threads");
  static_assert((Threads / 32) % KSplit == 0, "KSplit divides the warps");
  static_assert(kRows * Units >= (Threads / 32) / KSplit,
                "every warp group owns an accumulated row");

  static int64_t smem_bytes(int64_t input, int64_t hidden) {
    return int64_t(Rows) * (input + hidden) * int64_t(sizeof(T)) +
           int64_t(KSplit) * kRows * Units * Rows * int64_t(sizeof(float));
  }

  static bool runs(int64_t batch, int64_t input, int64_t hidden) {
    return batch > 0 && input > 0 && hidden > 0 && input % kVector == 0 &&
           hidden % kVector == 0 && batch <= INT32_MAX && kGates * hidden <= INT32_MAX &&
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
    if (x == nullptr || h == nullptr || w_ih == nullptr || w_hh == nullptr || h1 == nullptr ||
        (Cell::kCellState && (c0 == nullptr || c1 == nullptr))) {
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
    auto kernel = cell_step_kernel<Cell, DType, Units, Rows, Threads, KSplit>;
    // The limit is raised once per device to the cap every supported shape fits under.
    if (smem >= (48 << 10) &&
        !allow_smem<CellStep>(reinterpret_cast<const void*>(kernel), int(kSmemCap), dev)) {
      return kErrInit;
    }
    const dim3 grid(unsigned((c->n + Units - 1) / Units), unsigned((c->m + Rows - 1) / Rows));
    kernel<<<grid, Threads, size_t(smem), stream>>>(
        static_cast<const T*>(x), static_cast<const T*>(h), static_cast<const T*>(c0),
        static_cast<const T*>(w_ih), static_cast<const T*>(w_hh), static_cast<const T*>(b_ih),
        static_cast<const T*>(b_hh), static_cast<T*>(h1), static_cast<T*>(c1), int(c->m),
        int(c->k), int(c->n));
    return launch_status();
  }
};

// The LSTM step of one config (oasr_recurrent.codegen names it).
template <int DType, int Units, int Rows, int Threads, int KSplit>
using LstmStep = CellStep<LstmCell, DType, Units, Rows, Threads, KSplit>;

// The Elman RNN step of one config, activation Act (an RnnAct code).
template <int Act, int DType, int Units, int Rows, int Threads, int KSplit>
using RnnStep = CellStep<RnnCell<Act>, DType, Units, Rows, Threads, KSplit>;

// The GRU step of one config.
template <int DType, int Units, int Rows, int Threads, int KSplit>
using GruStep = CellStep<GruCell, DType, Units, Rows, Threads, KSplit>;

}  // namespace oasr_recurrent
