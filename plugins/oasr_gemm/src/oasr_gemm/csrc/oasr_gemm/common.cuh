// oasr_gemm: pieces shared by both lanes' generated translation units.
//
// The C ABI every unit exports (codegen.py writes the two functions per compiled config; the
// call record, status codes and parameter cache are the kit's, oasr_kit/launcher.cuh):
//
//   int32_t <sym>(const oasr_kit::CallArgs* call, const void* a, const void* w,
//                 const void* bias, void* d, void* stream);
//   int64_t <sym>_workspace(int64_t m, int64_t n, int64_t k, int32_t dtype, int32_t split_k,
//                           int64_t* semaphore_bytes);
//
// D[m, n] = act(sum_k A[m, k] * W[n, k] + bias[n]); A, W, D row-major and contiguous, bias
// optional (nullptr). `call` holds the sizes, dtype and activation codes, split-K factor,
// launch flags and workspace; `semaphores` serve serial split-K locks. The workspace query
// returns the scratch bytes (-1: dtype not compiled in, bad shape or no device) and writes the
// zeroed semaphore bytes.
#pragma once

#include <cstdint>

#include "cutlass/array.h"
#include "cutlass/cutlass.h"
#include "cutlass/numeric_types.h"
#include "oasr_kit/launcher.cuh"

namespace oasr_gemm {

using namespace oasr_kit;

enum Dtype : int32_t { kFloat16 = 0, kBFloat16 = 1 };

// CallArgs::flags bit of this family (beside the kit's kFlagPdl, which the 2.x kernels, having
// no grid-dependency instructions, ignore). kFlagFused: a 3.x call without bias and activation
// runs the fused-epilogue kernel instead of the plain one (to compare the two; the 2.x lane has
// one epilogue and ignores it).
enum GemmFlag : int32_t { kFlagFused = kFlagFamily };
enum Act : int32_t { kIdentity = 0, kRelu = 1, kGelu = 2, kSilu = 3 };

// torch semantics: relu keeps NaN, gelu is the exact (erf) form, silu is x * sigmoid(x).
// On the device silu uses the hardware exp2 and reciprocal (__expf, __fdividef): a few fp32 ulp,
// invisible after rounding to fp16/bf16, and far fewer instructions than IEEE expf and division
// in an epilogue that has only the consumer warps to run it.
CUTLASS_HOST_DEVICE float silu(float x) {
#if defined(__CUDA_ARCH__)
  return __fdividef(x, 1.f + __expf(-x));
#else
  return x / (1.f + expf(-x));
#endif
}

CUTLASS_HOST_DEVICE float gelu(float x) { return 0.5f * x * (1.f + erff(x * 0.7071067811865476f)); }

CUTLASS_HOST_DEVICE float relu(float x) { return x < 0.f ? 0.f : x; }

CUTLASS_HOST_DEVICE float apply_act(float x, int kind) {
  switch (kind) {
    case kRelu: return relu(x);
    case kGelu: return gelu(x);
    case kSilu: return silu(x);
    default: return x;
  }
}

struct ActArgs {
  int kind = kIdentity;
};

// An activation chosen at run time, so one kernel per dtype serves gemm and every
// gemm_activation. It follows CUTLASS's "activation with Arguments" convention, which both the
// 2.x LinearCombinationGeneric and the 3.x Sm90Compute epilogue node understand.
template <class T>
struct RuntimeAct {
  static const bool kIsHeavy = true;
  using Arguments = ActArgs;
  CUTLASS_HOST_DEVICE T operator()(T const& x, Arguments const& args = Arguments()) const {
    return T(apply_act(float(x), args.kind));
  }
};

template <float (*F)(float), class T, int N>
CUTLASS_HOST_DEVICE void map(cutlass::Array<T, N> const& x, cutlass::Array<T, N>& y) {
  CUTLASS_PRAGMA_UNROLL
  for (int i = 0; i < N; ++i) {
    y[i] = T(F(float(x[i])));
  }
}

template <class T, int N>
struct RuntimeAct<cutlass::Array<T, N>> {
  static const bool kIsHeavy = true;
  using Arguments = ActArgs;
  CUTLASS_HOST_DEVICE cutlass::Array<T, N> operator()(cutlass::Array<T, N> const& x,
                                                      Arguments const& args = Arguments()) const {
    // One switch per fragment, then a branch-free unrolled loop per activation.
    cutlass::Array<T, N> y;
    switch (args.kind) {
      case kRelu: map<relu>(x, y); break;
      case kGelu: map<gelu>(x, y); break;
      case kSilu: map<silu>(x, y); break;
      default: return x;
    }
    return y;
  }
};

// N and K multiples of 8: 16-byte rows of fp16/bf16 operands.
inline bool shape_ok(int64_t m, int64_t n, int64_t k) {
  return oasr_kit::shape_ok(m, n, k, 8);
}

// The call key of one launch: pointers, sizes, activation and split, device.
inline CallKey call_key(const void* a, const void* w, const void* bias, void* d, void* ws,
                        void* sem, int64_t m, int64_t n, int64_t k, int32_t act, int32_t split,
                        int32_t dev) {
  CallKey key;
  key.ptr[0] = a;
  key.ptr[1] = w;
  key.ptr[2] = bias;
  key.ptr[3] = d;
  key.ptr[4] = ws;
  key.ptr[5] = sem;
  key.m = m;
  key.n = n;
  key.k = k;
  key.arg[0] = act;
  key.arg[1] = split;
  key.device = dev;
  return key;
}

}  // namespace oasr_gemm
