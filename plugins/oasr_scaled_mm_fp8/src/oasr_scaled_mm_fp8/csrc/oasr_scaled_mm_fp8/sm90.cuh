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
#define OASR_W8A8_ELEMENT E4M3
#define OASR_W8A8_ACCUMULATOR float
#define OASR_W8A8_FUSION fu
#define OASR_W8A8_SCHEDULER void
#include "oasr_w8a8/sm90_kernel.cuh"
};

}  // namespace sm90
}  // namespace oasr_fp8
