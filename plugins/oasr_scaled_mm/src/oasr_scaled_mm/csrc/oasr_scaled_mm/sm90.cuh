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
#define OASR_W8A8_ELEMENT int8_t
#define OASR_W8A8_ACCUMULATOR int32_t
#define OASR_W8A8_FUSION cutlass::epilogue::fusion
#define OASR_W8A8_SCHEDULER TileScheduler
#include "oasr_w8a8/sm90_kernel.cuh"
};

}  // namespace sm90
}  // namespace oasr_smm
