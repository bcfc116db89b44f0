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
  static constexpr bool kQuant = std::is_same_v<ElementD, E4M3>;
  static constexpr auto kRound = cutlass::FloatRoundStyle::round_to_nearest;
  static constexpr int kEpilogueStages = 1;

  using TileShape = cutlass::gemm::GemmShape<BM, BN, BK>;
  using WarpShape = cutlass::gemm::GemmShape<WM, WN, WK>;
  using InstructionShape = cutlass::gemm::GemmShape<16, 8, 32>;
  using MathOp = std::conditional_t<FastAccum, cutlass::arch::OpMultiplyAddFastAccum,
                                    cutlass::arch::OpMultiplyAdd>;
  using ThreadMap = tb::OutputTileThreadLayout<TileShape, WarpShape, float, 4, kEpilogueStages>;

  using Acc = tb::VisitorAccFetch;
  using AScale = tb::VisitorColBroadcast<ThreadMap, float, Stride<_1, _0, _0>>;
  using RowVector = tb::VisitorRowBroadcast<ThreadMap, float, Stride<_0, _1, _0>>;
  using Multiply = tb::VisitorCompute<cutlass::multiplies, float, float, kRound>;
  using RowScaled = tb::Sm80EVT<Multiply, Acc, AScale>;
  using Scaled = tb::Sm80EVT<Multiply, RowScaled, RowVector>;
  using AddBias = tb::VisitorCompute<cutlass::plus, std::conditional_t<kQuant, float, ElementD>,
                                     float, kRound>;
  using Biased = tb::Sm80EVT<AddBias, Scaled, RowVector>;
  using OutScale = tb::VisitorScalarBroadcast<float>;
  using Divide = tb::VisitorCompute<cutlass::divides, E4M3, float, kRound>;
  using Quantized = tb::Sm80EVT<Divide, Biased, OutScale>;
  using Value = std::conditional_t<kQuant, Quantized, Biased>;
  using Store = tb::VisitorAuxStore<ThreadMap, ElementD, kRound, Stride<int64_t, _1, int64_t>>;
  using Callbacks = tb::Sm80EVT<Store, Value>;

  using Swizzle = cutlass::gemm::threadblock::GemmIdentityThreadblockSwizzle<>;
  using GemmKernel = typename cutlass::gemm::kernel::DefaultGemmWithVisitor<
      E4M3, cutlass::layout::RowMajor, cutlass::ComplexTransform::kNone, 16, E4M3,
      cutlass::layout::ColumnMajor, cutlass::ComplexTransform::kNone, 16, float,
      cutlass::layout::RowMajor, 4, float, float, cutlass::arch::OpClassTensorOp,
      cutlass::arch::Sm89, TileShape, WarpShape, InstructionShape, Callbacks, Swizzle, Stages,
      MathOp, kEpilogueStages>::GemmKernel;
  using Launch = oasr_kit::sm80::Launch<GemmKernel, false>;
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

  static int32_t launch(Prepared& prep, CallArgs const& c, cudaStream_t stream) {
    return Launch::launch(prep.params, c.workspace, stream);
  }

  static int32_t run(Operands const& o, CallArgs const& c, cudaStream_t stream) {
    return run_call<Kernel>(o, c, stream);
  }
};

}  // namespace sm89
}  // namespace oasr_fp8
