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
  static constexpr bool kQuant = std::is_same_v<ElementD, int8_t>;
  static constexpr auto kRound = cutlass::FloatRoundStyle::round_to_nearest;
  static constexpr int kEpilogueStages = 1;

  using TileShape = cutlass::gemm::GemmShape<BM, BN, BK>;
  using WarpShape = cutlass::gemm::GemmShape<WM, WN, WK>;
  using InstructionShape = cutlass::gemm::GemmShape<16, 8, 32>;
  using ThreadMap = cutlass::epilogue::threadblock::OutputTileThreadLayout<
      TileShape, WarpShape, float, 4, kEpilogueStages>;

  using Acc = cutlass::epilogue::threadblock::VisitorAccFetch;
  using AScale = cutlass::epilogue::threadblock::VisitorColBroadcast<ThreadMap, float,
                                                                     Stride<_1, _0, _0>>;
  using RowVector = cutlass::epilogue::threadblock::VisitorRowBroadcast<ThreadMap, float,
                                                                        Stride<_0, _1, _0>>;
  using Multiply = cutlass::epilogue::threadblock::VisitorCompute<cutlass::multiplies, float,
                                                                  float, kRound>;
  using RowScaled = cutlass::epilogue::threadblock::Sm80EVT<Multiply, Acc, AScale>;
  using Scaled = cutlass::epilogue::threadblock::Sm80EVT<Multiply, RowScaled, RowVector>;
  using AddBias = cutlass::epilogue::threadblock::VisitorCompute<
      cutlass::plus, std::conditional_t<kQuant, float, ElementD>, float, kRound>;
  using Biased = cutlass::epilogue::threadblock::Sm80EVT<AddBias, Scaled, RowVector>;
  using OutScale = cutlass::epilogue::threadblock::VisitorScalarBroadcast<float>;
  using Divide = cutlass::epilogue::threadblock::VisitorCompute<cutlass::divides, int8_t, float,
                                                                kRound>;
  using Quantized = cutlass::epilogue::threadblock::Sm80EVT<Divide, Biased, OutScale>;
  using Value = std::conditional_t<kQuant, Quantized, Biased>;
  using Store = cutlass::epilogue::threadblock::VisitorAuxStore<ThreadMap, ElementD, kRound,
                                                                Stride<int64_t, _1, int64_t>>;
  using Callbacks = cutlass::epilogue::threadblock::Sm80EVT<Store, Value>;

  using Swizzle = std::conditional_t<StreamK,
                                     cutlass::gemm::threadblock::ThreadblockSwizzleStreamK,
                                     cutlass::gemm::threadblock::GemmIdentityThreadblockSwizzle<>>;
  using GemmKernel = typename cutlass::gemm::kernel::DefaultGemmWithVisitor<
      int8_t, cutlass::layout::RowMajor, cutlass::ComplexTransform::kNone, 16, int8_t,
      cutlass::layout::ColumnMajor, cutlass::ComplexTransform::kNone, 16, float,
      cutlass::layout::RowMajor, 4, int32_t, float, cutlass::arch::OpClassTensorOp,
      cutlass::arch::Sm80, TileShape, WarpShape, InstructionShape, Callbacks, Swizzle, Stages,
      cutlass::arch::OpMultiplyAddSaturate, kEpilogueStages>::GemmKernel;
  using Launch = oasr_kit::sm80::Launch<GemmKernel, StreamK>;
  using Arguments = typename GemmKernel::Arguments;
  using Params = typename GemmKernel::Params;

  static typename Callbacks::Arguments callback_args(Operands const& o, int m, int n) {
    typename RowScaled::Arguments row_scaled{{}, {o.a_scale, 0.f, {}}, {}};
    typename Scaled::Arguments scaled{row_scaled, {o.w_scale, 0.f, {}}, {}};
    typename Biased::Arguments biased{scaled, {o.bias, 0.f, {}}, {}};
    typename Store::Arguments store{static_cast<ElementD*>(o.d),
                                    {int64_t(n), _1{}, int64_t(m) * n}};
    if constexpr (kQuant) {
      typename OutScale::Arguments out_scale{{o.out_scale}, {o.out_scale_ptr}, {}};
      typename Quantized::Arguments quantized{biased, out_scale, {}};
      return typename Callbacks::Arguments{quantized, store};
    } else {
      return typename Callbacks::Arguments{biased, store};
    }
  }

  static Arguments make_args(Operands const& o, int m, int n, int k) {
    return Arguments(cutlass::gemm::GemmUniversalMode::kGemm, cutlass::gemm::GemmCoord(m, n, k),
                     1, callback_args(o, m, n), o.a, o.w, nullptr, nullptr, int64_t(m) * k,
                     int64_t(n) * k, 0, 0, int64_t(k), int64_t(k), int64_t(n), int64_t(n));
  }

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

  static int32_t launch(Prepared& prep, CallArgs const& c, cudaStream_t stream) {
    return Launch::launch(prep.params, c.workspace, stream);
  }

  static int32_t run(Operands const& o, CallArgs const& c, cudaStream_t stream) {
    return run_call<Kernel>(o, c, stream);
  }
};

}  // namespace sm80
}  // namespace oasr_smm
