// oasr_conv1d dense lane sm80_conv1d: CUTLASS 2.x implicit-GEMM convolution forward
// (ImplicitGemmConvolution, mma.sync) for sm80..sm90.
//
// A conv1d is CUTLASS's 2-D fprop over NHWC activations with H = 1: x (batch, t_in, c_in) is
// N x 1 x W x C, the packed weight (c_out, kernel, c_in) is the KRSC filter with R = 1, the
// output (batch, t_out, c_out) is N x 1 x Q x K. The iterator algorithm is fixed per unit:
//   kOptimized    precomputed masks and incremental offsets; c_in a multiple of the access
//                 width and kernel <= 32 (the mask bits of Conv2dFpropActivation...Optimized);
//   kAnalytic     coordinates recomputed per access; any kernel size;
//   kFewChannels  (kernel, c_in) flattened into one K dimension read AlignIn channels at a
//                 time, for front ends with c_in < 8 (raw audio: c_in = 1), where the other
//                 two would spend a whole K tile per filter tap.
// AlignIn is the access width in elements of x and the weight (c_in must be a multiple);
// AlignOut that of the output and bias (c_out must be a multiple). The multistage main loop
// copies with cp.async, which moves 4, 8 or 16 bytes: an AlignIn of one 16-bit element needs
// the two-stage main loop (Stages == 2, ImplicitGemmPipelined, register-staged loads).
//
// The bias is the epilogue's source tensor with a zero stride (one row broadcast over every
// output step); without a bias beta is zero and the epilogue reads no source.
#pragma once

#include "cutlass/conv/conv2d_problem_size.h"
#include "cutlass/conv/convolution.h"
#include "cutlass/conv/device/implicit_gemm_convolution.h"
#include "cutlass/conv/kernel/default_conv2d_fprop.h"
#include "cutlass/device_kernel.h"
#include "cutlass/epilogue/thread/linear_combination_generic.h"
#include "cutlass/gemm/threadblock/threadblock_swizzle.h"
#include "oasr_conv1d/dense/common.cuh"

namespace oasr_conv1d {
namespace dense {
namespace sm80 {

// The kernel type and its launch (oasr_kit/conv/sm80.cuh): CUTLASS's 2-D problem of a conv1d.
#define OASR_CONV_EXTENTS(g)                                                                   \
  int(g.batch), 1, int(g.t_in), g.c_in, g.c_out, 1, g.kernel, 1, int(g.t_out), 0, g.pad, 1, \
      g.stride, 1, g.dilation
#include "oasr_kit/conv/sm80.cuh"

}  // namespace sm80
}  // namespace dense
}  // namespace oasr_conv1d
