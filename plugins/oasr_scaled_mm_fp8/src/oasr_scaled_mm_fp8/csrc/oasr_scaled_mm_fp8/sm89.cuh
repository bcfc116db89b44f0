// oasr_scaled_mm_fp8 lane sm89_fp8_mma: CUTLASS 2.x e4m3 x e4m3 -> fp32 kernels (Ada's fp8
// mma.sync m16n8k32, also on sm90) with the scales fused through the 2.x epilogue visitor tree.
//
// `FastAccum` picks the math operator: OpMultiplyAddFastAccum accumulates every instruction
// straight into the fp32 accumulators; OpMultiplyAdd (staged) sums each K tile into zeroed
// temporaries first and adds them to the accumulators once per tile (more accurate at deep K,
// and its rounding depends on the K tile). The visitor tree:
//
//   AccFetch --x a_scale (ColBroadcast) --x w_scale (RowBroadcast) --+ bias (RowBroadcast)
//     scaled_mm_fp8:       --> convert to fp16/bf16 --> AuxStore D
//     scaled_mm_fp8_quant: --> / out_scale (ScalarBroadcast), cvt.rn.satfinite e4m3 --> AuxStore
#pragma once

#include <type_traits>

// The 2.x visitor headers are not self-contained: the GEMM headers come first.
#include "oasr_scaled_mm_fp8/common.cuh"
#include "cutlass/functional.h"
#include "cutlass/numeric_conversion.h"
#include "cutlass/gemm/device/gemm_universal.h"
#include "cutlass/gemm/threadblock/threadblock_swizzle.h"
#include "cutlass/epilogue/threadblock/fusion/visitors.hpp"
#include "cutlass/gemm/kernel/default_gemm_universal_with_visitor.h"
#include "cute/tensor.hpp"
#include "oasr_kit/sm80.cuh"

namespace oasr_fp8 {
namespace sm89 {

using namespace cute;
namespace tb = cutlass::epilogue::threadblock;

template <class ElementD, int BM, int BN, int BK, int WM, int WN, int WK, int Stages,
          bool FastAccum>
struct Kernel {
#define OASR_W8A8_ELEMENT E4M3
#define OASR_W8A8_TYPES                                                                  \
  using MathOp = std::conditional_t<FastAccum, cutlass::arch::OpMultiplyAddFastAccum, \
                                    cutlass::arch::OpMultiplyAdd>;
#define OASR_W8A8_ACCUMULATOR float
#define OASR_W8A8_VISITOR tb
#define OASR_W8A8_SWIZZLE cutlass::gemm::threadblock::GemmIdentityThreadblockSwizzle<>
#define OASR_W8A8_ARCH Sm89
#define OASR_W8A8_MATH_OP MathOp
#define OASR_W8A8_STREAM_K false
#include "oasr_w8a8/mma_kernel.cuh"

  // Data-parallel kernels need no scratch.
  static int64_t workspace(int64_t m, int64_t n, int64_t k) {
    return (current_device() < 0 || !shape_ok(m, n, k)) ? -1 : 0;
  }

  struct Prepared {
    Params params;
  };

  static int32_t prepare(Prepared& prep, Operands const& o, CallArgs const& c, int dev) {
    return Launch::prepare(prep.params, make_args(o, int(c.m), int(c.n), int(c.k)), dev);
  }

#include "oasr_w8a8/mma_launch.cuh"
};

}  // namespace sm89
}  // namespace oasr_fp8
