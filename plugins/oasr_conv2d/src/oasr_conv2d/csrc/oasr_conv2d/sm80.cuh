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

// The run-time activation of the epilogue: ActArgs, ActOf (oasr_kit/conv/activation.cuh).
#include "oasr_kit/conv/activation.cuh"

// dense_geometry_ok, aligned_to, open_call (oasr_kit/conv/dense.cuh) over the implicit GEMM
// m = batch * h_out * w_out, n = c_out, k = c_in * kh * kw.
#define OASR_CONV_GEMM(g) \
  g->batch * g->h_out * g->w_out, g->c_out, int64_t(g->c_in) * g->kh * g->kw
#include "oasr_kit/conv/dense.cuh"

// 16 bits of each of four small window parameters in one word.
inline const void* pack16(int32_t a, int32_t b, int32_t c, int32_t d) {
  uint64_t v = uint64_t(uint16_t(a)) << 48 | uint64_t(uint16_t(b)) << 32 |
               uint64_t(uint16_t(c)) << 16 | uint64_t(uint16_t(d));
  return reinterpret_cast<const void*>(uintptr_t(v));
}

// The call key (oasr_kit/conv/call_key.cuh): batch, the input extents and the window in the
// spare pointer slots.
#define OASR_CONV_KEY_LOCALS
#define OASR_CONV_KEY_WINDOW(key, g)                                                       \
  key.ptr[4] = reinterpret_cast<const void*>(uintptr_t(g.batch));                          \
  key.ptr[5] = reinterpret_cast<const void*>(uintptr_t(g.h_in << 32 | uint32_t(g.w_in)));  \
  key.ptr[6] = pack16(g.kh, g.kw, g.sh, g.sw);                                             \
  key.ptr[7] = pack16(g.ph, g.pw, g.dh, g.dw);
#include "oasr_kit/conv/call_key.cuh"

// The kernel type and its launch (oasr_kit/conv/sm80.cuh): CUTLASS's 2-D problem of a conv2d.
#define OASR_CONV_EXTENTS(g)                                                               \
  int(g.batch), int(g.h_in), int(g.w_in), g.c_in, g.c_out, g.kh, g.kw, int(g.h_out),      \
      int(g.w_out), g.ph, g.pw, g.sh, g.sw, g.dh, g.dw
#include "oasr_kit/conv/sm80.cuh"

}  // namespace sm80
}  // namespace oasr_conv2d
