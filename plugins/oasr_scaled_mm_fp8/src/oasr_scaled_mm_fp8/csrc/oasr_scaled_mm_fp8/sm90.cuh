// oasr_scaled_mm_fp8 lane sm90_fp8_wgmma: CUTLASS 3.x CollectiveBuilder kernels (TMA + wgmma,
// e4m3 x e4m3 -> fp32) for Hopper, with the scales fused as an Sm90 epilogue visitor tree:
//
//   Sm90AccFetch --x a_scale (Sm90ColBroadcast, one value per row of D)
//                --x w_scale (Sm90RowBroadcast, one value per column of D)
//                --+ bias    (Sm90RowBroadcast; nullptr reads as 0)
//     scaled_mm_fp8:       converted to fp16/bf16 (round to nearest even), stored by TMA
//     scaled_mm_fp8_quant: / out_scale (Sm90ScalarBroadcast: pointer or value), then
//                          cvt.rn.satfinite to e4m3, stored by TMA
//
// The main-loop schedule is the config's: KernelTmaWarpSpecialized{,Pingpong,Cooperative},
// optionally their FP8FastAccum twins, which leave the wgmma accumulators unpromoted (the
// tensor core's partial sums keep fewer bits than fp32; faster, see numerics.py).
#pragma once

#include <type_traits>

#include "cute/tensor.hpp"
#include "cutlass/epilogue/collective/collective_builder.hpp"
#include "cutlass/epilogue/fusion/sm90_callbacks_tma_warpspecialized.hpp"
#include "cutlass/functional.h"
#include "cutlass/gemm/dispatch_policy.hpp"
#include "cutlass/gemm/kernel/gemm_universal.hpp"
#include "oasr_kit/sm90.cuh"
#include "oasr_scaled_mm_fp8/common.cuh"

namespace oasr_fp8 {
namespace sm90 {

using namespace cute;
namespace fu = cutlass::epilogue::fusion;

template <class ElementD, int TM, int TN, int TK, int CM, int CN, int Stages,
          class MainloopSchedule, class EpilogueSchedule>
struct Kernel {
  static constexpr bool kQuant = std::is_same_v<ElementD, E4M3>;
  static constexpr auto kRound = cutlass::FloatRoundStyle::round_to_nearest;
  static constexpr int kAlignAB = 16;
  static constexpr int kAlignD = 128 / cutlass::sizeof_bits<ElementD>::value;

  using TileShape = Shape<Int<TM>, Int<TN>, Int<TK>>;
  using ClusterShape = Shape<Int<CM>, Int<CN>, _1>;
  using LayoutA = cutlass::layout::RowMajor;
  using LayoutB = cutlass::layout::ColumnMajor;
  using LayoutD = cutlass::layout::RowMajor;

  using Acc = fu::Sm90AccFetch;
  using AScale = fu::Sm90ColBroadcast<0, TileShape, float>;
  using RowVector = fu::Sm90RowBroadcast<0, TileShape, float>;
  using Multiply = fu::Sm90Compute<cutlass::multiplies, float, float, kRound>;
  using RowScaled = fu::Sm90EVT<Multiply, Acc, AScale>;
  using Scaled = fu::Sm90EVT<Multiply, RowScaled, RowVector>;
  using AddBias = fu::Sm90Compute<cutlass::plus, std::conditional_t<kQuant, float, ElementD>,
                                  float, kRound>;
  using Biased = fu::Sm90EVT<AddBias, Scaled, RowVector>;
  using OutScale = fu::Sm90ScalarBroadcast<float>;
  using Divide = fu::Sm90Compute<cutlass::divides, E4M3, float, kRound>;
  using Quantized = fu::Sm90EVT<Divide, Biased, OutScale>;
  using Fusion = std::conditional_t<kQuant, Quantized, Biased>;

  using CollectiveEpilogue = typename cutlass::epilogue::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, TileShape, ClusterShape,
      cutlass::epilogue::collective::EpilogueTileAuto, float, float, void, LayoutD, kAlignD,
      ElementD, LayoutD, kAlignD, EpilogueSchedule, Fusion>::CollectiveOp;

  using StageCount = oasr_kit::sm90::StageCountFor<Stages, CollectiveEpilogue>;

  using CollectiveMainloop = typename cutlass::gemm::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, E4M3, LayoutA, kAlignAB, E4M3,
      LayoutB, kAlignAB, float, TileShape, ClusterShape, StageCount,
      MainloopSchedule>::CollectiveOp;

  using GemmKernel = cutlass::gemm::kernel::GemmUniversal<Shape<int, int, int, int>,
                                                          CollectiveMainloop, CollectiveEpilogue,
                                                          void>;
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
    Arguments args = Launch::args(static_cast<E4M3 const*>(o.a), static_cast<E4M3 const*>(o.w),
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
}  // namespace oasr_fp8
