// oasr_scaled_mm lane sm90_int8_wgmma: CUTLASS 3.x CollectiveBuilder kernels (TMA + wgmma,
// int8 x int8 -> int32) for Hopper, with the scales fused as an Sm90 epilogue visitor tree
// passed to the epilogue CollectiveBuilder as its fusion:
//
//   Sm90AccFetch --x a_scale (Sm90ColBroadcast, one value per row of D)
//                --x w_scale (Sm90RowBroadcast, one value per column of D)
//                --+ bias    (Sm90RowBroadcast; nullptr reads as 0)
//     scaled_mm:       converted to fp16/bf16 (round to nearest even), stored by TMA
//     scaled_mm_quant: / out_scale (Sm90ScalarBroadcast: pointer or value), rne + saturate to
//                      int8, stored by TMA
//
// Each node is one fp32 op (Sm90Compute converts its inputs to float first, int32 -> float
// rounding to nearest); with --fmad=false nothing is contracted, so the values are those of
// the 2.x lane and of the torch reference. Stream-K (cooperative kernel + StreamKScheduler)
// reduces int32 partials before the epilogue, so it computes the same bits too.
#pragma once

#include <type_traits>

#include "cute/tensor.hpp"
#include "cutlass/epilogue/collective/collective_builder.hpp"
#include "cutlass/epilogue/fusion/sm90_callbacks_tma_warpspecialized.hpp"
#include "cutlass/functional.h"
#include "cutlass/gemm/dispatch_policy.hpp"
#include "cutlass/gemm/kernel/gemm_universal.hpp"
#include "oasr_kit/sm90.cuh"
#include "oasr_scaled_mm/common.cuh"

namespace oasr_smm {
namespace sm90 {

using namespace cute;

template <class ElementD, int TM, int TN, int TK, int CM, int CN, int Stages,
          class MainloopSchedule, class EpilogueSchedule, class TileScheduler>
struct Kernel {
  static constexpr bool kQuant = std::is_same_v<ElementD, int8_t>;
  static constexpr auto kRound = cutlass::FloatRoundStyle::round_to_nearest;
  static constexpr int kAlignAB = 16;
  static constexpr int kAlignD = 128 / cutlass::sizeof_bits<ElementD>::value;

  using TileShape = Shape<Int<TM>, Int<TN>, Int<TK>>;
  using ClusterShape = Shape<Int<CM>, Int<CN>, _1>;
  using LayoutA = cutlass::layout::RowMajor;
  using LayoutB = cutlass::layout::ColumnMajor;
  using LayoutD = cutlass::layout::RowMajor;

  using Acc = cutlass::epilogue::fusion::Sm90AccFetch;
  using AScale = cutlass::epilogue::fusion::Sm90ColBroadcast<0, TileShape, float>;
  using RowVector = cutlass::epilogue::fusion::Sm90RowBroadcast<0, TileShape, float>;
  using Multiply = cutlass::epilogue::fusion::Sm90Compute<cutlass::multiplies, float, float,
                                                          kRound>;
  using RowScaled = cutlass::epilogue::fusion::Sm90EVT<Multiply, Acc, AScale>;
  using Scaled = cutlass::epilogue::fusion::Sm90EVT<Multiply, RowScaled, RowVector>;
  using AddBias = cutlass::epilogue::fusion::Sm90Compute<
      cutlass::plus, std::conditional_t<kQuant, float, ElementD>, float, kRound>;
  using Biased = cutlass::epilogue::fusion::Sm90EVT<AddBias, Scaled, RowVector>;
  using OutScale = cutlass::epilogue::fusion::Sm90ScalarBroadcast<float>;
  using Divide = cutlass::epilogue::fusion::Sm90Compute<cutlass::divides, int8_t, float, kRound>;
  using Quantized = cutlass::epilogue::fusion::Sm90EVT<Divide, Biased, OutScale>;
  using Fusion = std::conditional_t<kQuant, Quantized, Biased>;

  using CollectiveEpilogue = typename cutlass::epilogue::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, TileShape, ClusterShape,
      cutlass::epilogue::collective::EpilogueTileAuto, int32_t, float, void, LayoutD, kAlignD,
      ElementD, LayoutD, kAlignD, EpilogueSchedule, Fusion>::CollectiveOp;

  using StageCount = oasr_kit::sm90::StageCountFor<Stages, CollectiveEpilogue>;

  using CollectiveMainloop = typename cutlass::gemm::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, int8_t, LayoutA, kAlignAB, int8_t,
      LayoutB, kAlignAB, int32_t, TileShape, ClusterShape, StageCount,
      MainloopSchedule>::CollectiveOp;

  using GemmKernel = cutlass::gemm::kernel::GemmUniversal<Shape<int, int, int, int>,
                                                          CollectiveMainloop, CollectiveEpilogue,
                                                          TileScheduler>;
  using Launch = oasr_kit::sm90::Launch<GemmKernel>;
  using Arguments = typename Launch::Arguments;
  using Prepared = typename Launch::Prepared;

  static typename Fusion::Arguments fusion_args(Operands const& o) {
    typename RowScaled::Arguments row_scaled{{}, {o.a_scale, 0.f, {}}, {}};
    typename Scaled::Arguments scaled{row_scaled, {o.w_scale, 0.f, {}}, {}};
    typename Biased::Arguments biased{scaled, {o.bias, 0.f, {}}, {}};
    if constexpr (kQuant) {
      typename OutScale::Arguments out_scale{{o.out_scale}, {o.out_scale_ptr}, {}};
      return typename Quantized::Arguments{biased, out_scale, {}};
    } else {
      return biased;
    }
  }

  static Arguments make_args(Operands const& o, int m, int n, int k, int dev) {
    Arguments args = Launch::args(static_cast<int8_t const*>(o.a), static_cast<int8_t const*>(o.w),
                                  static_cast<ElementD*>(o.d), m, n, k, dev);
    args.epilogue.thread = fusion_args(o);
    return args;
  }

  static int64_t workspace(int64_t m, int64_t n, int64_t k) {
    int dev = current_device();
    if (dev < 0 || !shape_ok(m, n, k)) {
      return -1;
    }
    Operands none{};
    return Launch::workspace(make_args(none, int(m), int(n), int(k), dev));
  }

  static int32_t prepare(Prepared& prep, Operands const& o, CallArgs const& c, int dev) {
    prep.args = make_args(o, int(c.m), int(c.n), int(c.k), dev);
    return Launch::prepare(prep, c.workspace, c.workspace_bytes, dev);
  }

  static int32_t launch(Prepared& prep, CallArgs const& c, cudaStream_t stream) {
    return Launch::launch(prep, c.workspace, (c.flags & kFlagPdl) != 0, stream);
  }

  static int32_t run(Operands const& o, CallArgs const& c, cudaStream_t stream) {
    return run_call<Kernel>(o, c, stream);
  }
};

}  // namespace sm90
}  // namespace oasr_smm
