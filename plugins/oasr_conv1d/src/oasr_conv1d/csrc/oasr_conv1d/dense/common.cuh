// oasr_conv1d dense: what both implicit-GEMM lanes' units share.
//
// A dense conv1d (groups == 1) is the implicit GEMM D[m, n] = sum_k X'[m, k] * W[n, k] with
// m = batch * t_out, n = c_out, k = kernel * c_in, where row m of X' gathers the window of
// x (batch, t_in, c_in) that output step m reads (zeros where it hangs over the padding), and
// W is the weight packed (c_out, kernel, c_in): CUTLASS's KRSC filter with R = 1. No im2col
// buffer exists; the kernels' iterators compute the gather addresses.
//
// The epilogue is act(acc + bias) in fp32 with the activation chosen at run time (one kernel
// per dtype serves conv1d and every conv1d_<act>), built from CUTLASS's own activation
// functors; a null bias is skipped without a load.
#pragma once

#include <cstdint>

#include "cutlass/array.h"
#include "cutlass/cutlass.h"
#include "cutlass/epilogue/thread/activation.h"
#include "cutlass/numeric_types.h"
#include "oasr_conv1d/geometry.cuh"
#include "oasr_kit/launcher.cuh"

namespace oasr_conv1d {
namespace dense {

using namespace oasr_kit;

struct ActArgs {
  int32_t act = kActNone;
};

// CUTLASS's "activation with Arguments" convention (LinearCombinationGeneric passes its
// Params, which derive from Arguments; the 3.x Sm90Compute node passes Arguments): the
// activation code is read once per fragment, then one of CUTLASS's functors runs over it.
// cutlass::epilogue::thread::GELU is the erf form and ReLu propagates NaN, as torch does.
template <class T>
struct ActOf {
  static const bool kIsHeavy = true;
  using Arguments = ActArgs;
  CUTLASS_HOST_DEVICE T operator()(T const& x, Arguments const& args = Arguments()) const {
    switch (args.act) {
      case kActRelu: return cutlass::epilogue::thread::ReLu<T>{}(x);
      case kActGelu: return cutlass::epilogue::thread::GELU<T>{}(x);
      case kActSilu: return cutlass::epilogue::thread::SiLu<T>{}(x);
      default: return x;
    }
  }
};

template <class T, int N>
struct ActOf<cutlass::Array<T, N>> {
  static const bool kIsHeavy = true;
  using Arguments = ActArgs;
  using Frag = cutlass::Array<T, N>;
  CUTLASS_HOST_DEVICE Frag operator()(Frag const& x, Arguments const& args = Arguments()) const {
    switch (args.act) {
      case kActRelu: return cutlass::epilogue::thread::ReLu<Frag>{}(x);
      case kActGelu: return cutlass::epilogue::thread::GELU<Frag>{}(x);
      case kActSilu: return cutlass::epilogue::thread::SiLu<Frag>{}(x);
      default: return x;
    }
  }
};

// A dense geometry (groups == 1) that is self-consistent: what a workspace query accepts.
inline bool dense_geometry_ok(Geometry const* g) {
  return g != nullptr && g->groups == 1 &&
         geometry_ok(*g, g->batch * g->t_out, g->c_out, int64_t(g->c_in) * g->kernel);
}

// `p` (null allowed) is aligned to `bytes`.
inline bool aligned_to(const void* p, int64_t bytes) {
  return (reinterpret_cast<uintptr_t>(p) % uintptr_t(bytes)) == 0;
}

// The checks every launch makes before it looks at its kernel: the geometry agrees with the
// call record (groups == 1, a known activation), x and the weight are aligned to `in_bytes`
// and bias and out to `out_bytes` (the vector accesses), and a device is current (`*dev`).
inline int32_t open_call(CallArgs const* c, Geometry const* g, const void* x, const void* w,
                         const void* bias, const void* out, int64_t in_bytes, int64_t out_bytes,
                         int* dev) {
  if (c == nullptr || g == nullptr || g->groups != 1 || c->act < kActNone ||
      c->act > kActSilu || !geometry_ok(*g, c->m, c->n, c->k)) {
    return kErrShape;
  }
  if (!aligned_to(x, in_bytes) || !aligned_to(w, in_bytes) || !aligned_to(bias, out_bytes) ||
      !aligned_to(out, out_bytes)) {
    return kErrShape;
  }
  *dev = current_device();
  return *dev < 0 ? kErrDevice : kOk;
}

// The call key: the four operand pointers, the geometry (batch, t_in and the window in the
// spare pointer slots: m, n, k alone do not fix it) and the activation.
inline CallKey call_key(CallArgs const& c, Geometry const& g, const void* x, const void* w,
                        const void* bias, void* out, int32_t dev) {
  auto word = [](int64_t v) { return reinterpret_cast<const void*>(uintptr_t(v)); };
  CallKey key;
  key.ptr[0] = x;
  key.ptr[1] = w;
  key.ptr[2] = bias;
  key.ptr[3] = out;
  key.ptr[4] = word(g.batch);
  key.ptr[5] = word(g.t_in);
  key.ptr[6] = word(int64_t(g.stride) << 32 | uint32_t(g.pad));
  key.ptr[7] = word(int64_t(g.dilation) << 32 | uint32_t(g.kernel));
  key.m = c.m;
  key.n = c.n;
  key.k = c.k;
  key.arg[0] = c.act;
  key.arg[1] = g.c_in;
  key.device = dev;
  return key;
}

}  // namespace dense
}  // namespace oasr_conv1d
