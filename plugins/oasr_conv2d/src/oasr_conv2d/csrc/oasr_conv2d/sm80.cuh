// oasr_conv2d lane sm80_conv2d: CUTLASS 2.x implicit-GEMM convolution forward
// (ImplicitGemmConvolution, mma.sync, NHWC) for sm80..sm90.
//
// A conv2d (groups == 1) is the implicit GEMM D[m, n] = sum_k X'[m, k] * W[n, k] with
// m = batch * h_out * w_out, n = c_out, k = kh * kw * c_in, where row m of X' gathers the
// window of x (batch, h_in, w_in, c_in) that output pixel m reads (zeros where it hangs over
// the padding), and W is the weight packed (c_out, kh, kw, c_in) (CUTLASS's KRSC filter). No
// im2col buffer exists; the kernels' iterators compute the gather addresses. The iterator
// algorithm is fixed per unit:
//   kOptimized    precomputed masks and incremental offsets; c_in a multiple of the access
//                 width and kh, kw <= 32 (the mask bits of Conv2dFpropActivation...Optimized);
//   kAnalytic     coordinates recomputed per access; any window;
//   kFewChannels  (kh, kw, c_in) flattened into one K dimension read AlignIn channels at a
//                 time, for the speech front end's first conv (c_in = 1: one log-mel plane),
//                 where the other two would spend a whole K tile per filter tap.
// AlignIn is the access width in elements of x and the weight (c_in must be a multiple);
// AlignOut that of the output and bias (c_out must be a multiple). The multistage main loop
// copies with cp.async, which moves 4, 8 or 16 bytes: an AlignIn of one 16-bit element needs
// the two-stage main loop (Stages == 2, ImplicitGemmPipelined, register-staged loads).
//
// The epilogue is act(acc + bias) in fp32 with the activation chosen at run time (one kernel
// per dtype serves conv2d and every conv2d_<act>), built from CUTLASS's own activation
// functors. The bias is the epilogue's source tensor with a zero stride (one row broadcast
// over every output pixel); without a bias beta is zero and the epilogue reads no source.
#pragma once

#include <cstdint>

#include "cutlass/array.h"
#include "cutlass/conv/conv2d_problem_size.h"
#include "cutlass/conv/convolution.h"
#include "cutlass/conv/device/implicit_gemm_convolution.h"
#include "cutlass/conv/kernel/default_conv2d_fprop.h"
#include "cutlass/cutlass.h"
#include "cutlass/device_kernel.h"
#include "cutlass/epilogue/thread/activation.h"
#include "cutlass/epilogue/thread/linear_combination_generic.h"
#include "cutlass/gemm/threadblock/threadblock_swizzle.h"
#include "cutlass/numeric_types.h"
#include "oasr_conv2d/geometry.cuh"
#include "oasr_kit/launcher.cuh"

namespace oasr_conv2d {
namespace sm80 {

using namespace oasr_kit;

struct ActArgs {
  int32_t act = kActNone;
};

// CUTLASS's "activation with Arguments" convention (LinearCombinationGeneric passes its
// Params, which derive from Arguments): the activation code is read once per fragment, then
// one of CUTLASS's functors runs over it. GELU is the erf form and ReLu propagates NaN, as
// torch does.
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
         geometry_ok(*g, g->batch * g->h_out * g->w_out, g->c_out,
                     int64_t(g->c_in) * g->kh * g->kw);
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

// 16 bits of each of four small window parameters in one word.
inline const void* pack16(int32_t a, int32_t b, int32_t c, int32_t d) {
  uint64_t v = uint64_t(uint16_t(a)) << 48 | uint64_t(uint16_t(b)) << 32 |
               uint64_t(uint16_t(c)) << 16 | uint64_t(uint16_t(d));
  return reinterpret_cast<const void*>(uintptr_t(v));
}

// The call key: the four operand pointers, the geometry (batch, the input extents and the
// window in the spare pointer slots: m, n, k alone do not fix it) and the activation.
inline CallKey call_key(CallArgs const& c, Geometry const& g, const void* x, const void* w,
                        const void* bias, void* out, int32_t dev) {
  CallKey key;
  key.ptr[0] = x;
  key.ptr[1] = w;
  key.ptr[2] = bias;
  key.ptr[3] = out;
  key.ptr[4] = reinterpret_cast<const void*>(uintptr_t(g.batch));
  key.ptr[5] = reinterpret_cast<const void*>(uintptr_t(g.h_in << 32 | uint32_t(g.w_in)));
  key.ptr[6] = pack16(g.kh, g.kw, g.sh, g.sw);
  key.ptr[7] = pack16(g.ph, g.pw, g.dh, g.dw);
  key.m = c.m;
  key.n = c.n;
  key.k = c.k;
  key.arg[0] = c.act;
  key.arg[1] = g.c_in;
  key.device = dev;
  return key;
}

enum Algo : int { kAnalytic = 0, kOptimized = 1, kFewChannels = 2 };

template <int A>
constexpr cutlass::conv::IteratorAlgorithm kIterator =
    A == kOptimized    ? cutlass::conv::IteratorAlgorithm::kOptimized
    : A == kFewChannels ? cutlass::conv::IteratorAlgorithm::kFewChannels
                        : cutlass::conv::IteratorAlgorithm::kAnalytic;

template <class T, int BM, int BN, int BK, int WM, int WN, int WK, int Stages, int A,
          int AlignIn, int AlignOut>
struct Kernel {
  static_assert(Stages >= 3 || Stages == 2, "CUTLASS 2.x main loops have two or more stages");
  static_assert(Stages == 2 || AlignIn * int(sizeof(T)) >= 4,
                "cp.async moves 4, 8 or 16 bytes: AlignIn 1 needs the two-stage main loop");

  using OutputOp = cutlass::epilogue::thread::LinearCombinationGeneric<
      ActOf, T, AlignOut, float, float, cutlass::epilogue::thread::ScaleType::Default,
      cutlass::FloatRoundStyle::round_to_nearest, true>;
  using ConvKernel = typename cutlass::conv::kernel::DefaultConv2dFprop<
      T, cutlass::layout::TensorNHWC, T, cutlass::layout::TensorNHWC, T,
      cutlass::layout::TensorNHWC, float, cutlass::arch::OpClassTensorOp, cutlass::arch::Sm80,
      cutlass::gemm::GemmShape<BM, BN, BK>, cutlass::gemm::GemmShape<WM, WN, WK>,
      cutlass::gemm::GemmShape<16, 8, 16>, OutputOp,
      cutlass::gemm::threadblock::GemmIdentityThreadblockSwizzle<4>, Stages,
      cutlass::arch::OpMultiplyAdd, kIterator<A>, cutlass::conv::StrideSupport::kStrided,
      AlignIn, AlignIn>::Kernel;
  using Device = cutlass::conv::device::ImplicitGemmConvolution<ConvKernel>;
  using Arguments = typename ConvKernel::Arguments;
  using Params = typename ConvKernel::Params;
  static constexpr int kSmem = int(sizeof(typename ConvKernel::SharedStorage));
  static constexpr int kThreads = ConvKernel::kThreadCount;

  static cutlass::conv::Conv2dProblemSize problem(Geometry const& g) {
    return cutlass::conv::Conv2dProblemSize(
        int(g.batch), int(g.h_in), int(g.w_in), g.c_in, g.c_out, g.kh, g.kw, int(g.h_out),
        int(g.w_out), g.ph, g.pw, g.sh, g.sw, g.dh, g.dw, cutlass::conv::Mode::kCrossCorrelation,
        1, 1);
  }

  static Arguments make_args(Geometry const& g, const void* x, const void* w, const void* bias,
                             void* out, int32_t act) {
    using Layout = cutlass::layout::TensorNHWC;
    auto size = problem(g);
    T* xp = static_cast<T*>(const_cast<void*>(x));
    T* wp = static_cast<T*>(const_cast<void*>(w));
    T* bp = static_cast<T*>(const_cast<void*>(bias));
    T* op = static_cast<T*>(out);
    typename OutputOp::Params epilogue(1.f, bias != nullptr ? 1.f : 0.f);
    epilogue.act = act;
    return Arguments(size, {xp, Layout::packed(size.activation_extent())},
                     {wp, Layout::packed(size.filter_extent())},
                     {bp, Layout(typename Layout::Stride(0))},
                     {op, Layout::packed(size.output_extent())}, epilogue);
  }

  static int64_t workspace(Geometry const* g) {
    if (!dense_geometry_ok(g)) {
      return -1;
    }
    Arguments args = make_args(*g, nullptr, nullptr, nullptr, nullptr, kActNone);
    return Device::can_implement(args) == cutlass::Status::kSuccess ? 0 : -1;
  }

  static int32_t run(CallArgs const* c, Geometry const* g, const void* x, const void* w,
                     const void* bias, void* out, cudaStream_t stream) {
    static PreparedCache<Params> cache;
    int dev = -1;
    int32_t status = open_call(c, g, x, w, bias, out, AlignIn * int64_t(sizeof(T)),
                               AlignOut * int64_t(sizeof(T)), &dev);
    if (status != kOk) {
      return status;
    }
    auto prepare = [&](Params& params) -> int32_t {
      Arguments args = make_args(*g, x, w, bias, out, c->act);
      if (Device::can_implement(args) != cutlass::Status::kSuccess) {
        return kErrShape;
      }
      const void* entry = reinterpret_cast<const void*>(cutlass::Kernel<ConvKernel>);
      if (!allow_smem<ConvKernel>(entry, kSmem, dev)) {
        return kErrInit;
      }
      params = Params(args, nullptr);
      return kOk;
    };
    auto launch = [&](Params& params) -> int32_t {
      typename ConvKernel::ThreadblockSwizzle swizzle;
      dim3 grid = swizzle.get_grid_shape(params.grid_tiled_shape);
      cutlass::Kernel<ConvKernel><<<grid, dim3(kThreads, 1, 1), kSmem, stream>>>(params);
      return launch_status();
    };
    return run_prepared(cache, call_key(*c, *g, x, w, bias, out, dev), prepare, launch);
  }
};

}  // namespace sm80
}  // namespace oasr_conv2d
