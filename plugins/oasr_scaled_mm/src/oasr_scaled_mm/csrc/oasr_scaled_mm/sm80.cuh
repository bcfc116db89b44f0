// oasr_scaled_mm lane sm80_int8_mma: CUTLASS 2.x int8 x int8 -> int32 kernels (mma.sync
// m16n8k32) for sm80..sm90, with the scales fused through the 2.x epilogue visitor tree.
//
// DefaultGemmWithVisitor builds the kernel around an Sm80EVT: it selects
// GemmWithEpilogueVisitor for the data-parallel swizzle and GemmWithEpilogueVisitorStreamk for
// ThreadblockSwizzleStreamK, so one visitor tree serves both decompositions (Stream-K reduces
// the int32 accumulator tiles of its partial blocks before the visitor runs). The tree:
//
//   AccFetch --x a_scale (ColBroadcast) --x w_scale (RowBroadcast) --+ bias (RowBroadcast)
//     scaled_mm:       --> convert to fp16/bf16 --> AuxStore D
//     scaled_mm_quant: --> / out_scale (ScalarBroadcast), rne + saturate to int8 --> AuxStore D
//
// The epilogue's accumulator tiles go through shared memory in the layout of a 32-bit output
// with 4-element accesses (ElementC = float, alignment 4: the plain, not the mixed-precision,
// epilogue iterators); D is written by the visitor's own store, 4 elements per access.
#pragma once

#include <type_traits>

// The 2.x visitor headers are not self-contained: the GEMM headers come first.
#include "oasr_scaled_mm/common.cuh"
#include "cutlass/functional.h"
#include "cutlass/numeric_conversion.h"
#include "cutlass/gemm/device/gemm_universal.h"
#include "cutlass/gemm/threadblock/threadblock_swizzle.h"
#include "cutlass/gemm/threadblock/threadblock_swizzle_streamk.h"
#include "cutlass/epilogue/threadblock/fusion/visitors.hpp"
#include "cutlass/gemm/kernel/default_gemm_universal_with_visitor.h"
#include "cute/tensor.hpp"
#include "oasr_kit/sm80.cuh"

namespace oasr_smm {
namespace sm80 {

using namespace cute;

template <class ElementD, int BM, int BN, int BK, int WM, int WN, int WK, int Stages,
          bool StreamK>
struct Kernel {
#define OASR_W8A8_ELEMENT int8_t
#define OASR_W8A8_TYPES
#define OASR_W8A8_ACCUMULATOR int32_t
#define OASR_W8A8_VISITOR cutlass::epilogue::threadblock
#define OASR_W8A8_SWIZZLE                                                              \
  std::conditional_t<StreamK, cutlass::gemm::threadblock::ThreadblockSwizzleStreamK, \
                     cutlass::gemm::threadblock::GemmIdentityThreadblockSwizzle<>>
#define OASR_W8A8_ARCH Sm80
#define OASR_W8A8_MATH_OP cutlass::arch::OpMultiplyAddSaturate
#define OASR_W8A8_STREAM_K StreamK
#include "oasr_w8a8/mma_kernel.cuh"

  static int64_t scratch_bytes(Params const& params) {
    if constexpr (StreamK) {
      return int64_t(params.get_workspace_size());
    } else {
      return 0;
    }
  }

  static int64_t workspace(int64_t m, int64_t n, int64_t k) {
    int dev = current_device();
    if (dev < 0 || !shape_ok(m, n, k)) {
      return -1;
    }
    Operands none{};
    return scratch_bytes(Launch::params(make_args(none, int(m), int(n), int(k)), dev));
  }

  struct Prepared {
    Params params;
  };

  static int32_t prepare(Prepared& prep, Operands const& o, CallArgs const& c, int dev) {
    int32_t status = Launch::prepare(prep.params, make_args(o, int(c.m), int(c.n), int(c.k)),
                                     dev);
    if (status == kOk && scratch_bytes(prep.params) > c.workspace_bytes) {
      return kErrWorkspace;
    }
    return status;
  }

#include "oasr_w8a8/mma_launch.cuh"
};

}  // namespace sm80
}  // namespace oasr_smm
