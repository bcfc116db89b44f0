// oasr_gemm lane sm90_wgmma: the fused-residual kernel of op gemm_residual,
//
//   D = alpha * (acc + bias) + C,
//
// with C the residual (same shape, dtype and layout as D), alpha a run-time scalar and beta
// fixed at 1. One CUTLASS kernel per (config, dtype): the config's tile, cluster, schedule,
// stage count and epilogue subtile, as in sm90.cuh, whose pieces it reuses (the bias leaf and
// acc + bias node, the epilogue subtile, the launch helpers); only the epilogue differs. Its
// visitor tree has four nodes: a fused multiply-add of the scalar alpha, acc + bias (a null
// bias reads as zeros without a load) and C, fetched by the epilogue's TMA load.
//
// A swapped kernel computes D^T = W * A^T and writes D^T column-major (D row-major); C is read
// with D's layout, so it is the residual row-major as well. There is no activation: none of
// the models' residual sites has one after the linear.
//
// Units including this header are separate translation units (`<unit>_res`), so the units of
// gemm and gemm_activation, which include only sm90.cuh, keep their text and object keys.
#pragma once

#include <cstring>

#include "oasr_gemm/sm90.cuh"

namespace oasr_gemm {
namespace sm90 {

// alpha * (acc + bias) + C, computed in fp32 and rounded once to T.
template <class T, bool Swap, class Tile>
using ResidualFusion =
    fusion::Sm90EVT<fusion::Sm90Compute<cutlass::homogeneous_multiply_add, T, float, kRound>,
                    fusion::Sm90ScalarBroadcast<float>, AccPlusBias<T, Swap, Tile>,
                    fusion::Sm90SrcFetch<T>>;

template <class T, int TM, int TN, int TK, int CM, int CN, int Stages, class MainloopSchedule,
          class EpilogueSchedule, class TileScheduler, bool Swap, int EM = 0, int EN = 0>
struct Residual {
  using TileShape = cute::Shape<cute::Int<TM>, cute::Int<TN>, cute::Int<TK>>;
  using ClusterShape = cute::Shape<cute::Int<CM>, cute::Int<CN>, cute::_1>;
  using LayoutA = cutlass::layout::RowMajor;
  using LayoutB = cutlass::layout::ColumnMajor;
  using LayoutD =
      std::conditional_t<Swap, cutlass::layout::ColumnMajor, cutlass::layout::RowMajor>;
  static constexpr int kAlign = 8;
  using Fusion = ResidualFusion<T, Swap, TileShape>;

  using CollectiveEpilogue = typename cutlass::epilogue::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, TileShape, ClusterShape,
      typename EpilogueTileOf<EM, EN>::type, float, float, T, LayoutD, kAlign, T, LayoutD,
      kAlign, EpilogueSchedule, Fusion>::CollectiveOp;

  using StageCount = oasr_kit::sm90::StageCountFor<Stages, CollectiveEpilogue>;

  using CollectiveMainloop = typename cutlass::gemm::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, T, LayoutA, kAlign, T, LayoutB,
      kAlign, float, TileShape, ClusterShape, StageCount, MainloopSchedule>::CollectiveOp;

  using GemmKernel = cutlass::gemm::kernel::GemmUniversal<cute::Shape<int, int, int, int>,
                                                          CollectiveMainloop, CollectiveEpilogue,
                                                          TileScheduler>;
  using Launch = oasr_kit::sm90::Launch<GemmKernel>;
  using Arguments = typename Launch::Arguments;
  using Prepared = typename Launch::Prepared;

  static Arguments make_args(const void* a, const void* w, const void* bias, const void* residual,
                             void* d, float alpha, int m, int n, int k, int split, int dev) {
    Arguments args = Launch::args(static_cast<T const*>(Swap ? w : a),
                                  static_cast<T const*>(Swap ? a : w), static_cast<T*>(d),
                                  Swap ? n : m, Swap ? m : n, k, dev);
    args.epilogue.ptr_C = static_cast<T const*>(residual);
    // Children in order (alpha, acc + bias, C), then the multiply-add node itself.
    args.epilogue.thread = {{{alpha}, {nullptr}, {}},
                            {{}, {static_cast<T const*>(bias), T(0), {}}, {}},
                            {},
                            {}};
    if constexpr (Launch::kStreamK) {
      args.scheduler.splits = split;
    }
    return args;
  }

  static int64_t workspace(int64_t m, int64_t n, int64_t k, int32_t split, int64_t* sem_bytes) {
    if (sem_bytes != nullptr) {
      *sem_bytes = 0;
    }
    int dev = current_device();
    if (dev < 0 || !shape_ok(m, n, k)) {
      return -1;
    }
    return Launch::workspace(make_args(nullptr, nullptr, nullptr, nullptr, nullptr, 1.f, int(m),
                                       int(n), int(k), split, dev));
  }

  static int32_t run(const void* a, const void* w, const void* bias, const void* residual,
                     void* d, float alpha, int64_t m, int64_t n, int64_t k, int32_t split,
                     void* ws, int64_t ws_bytes, void* sem, int64_t, int32_t flags,
                     cudaStream_t stream) {
    static oasr_kit::PreparedCache<Prepared> cache;
    if (!shape_ok(m, n, k) || residual == nullptr) {
      return kErrShape;
    }
    if (split != 1 && !Launch::kStreamK) {
      return kErrSplit;
    }
    int dev = current_device();
    if (dev < 0) {
      return kErrDevice;
    }
    // The prepared parameters embed the residual's TMA descriptor and alpha: both are keyed.
    CallKey key = call_key(a, w, bias, d, ws, sem, m, n, k, kIdentity, split, dev);
    key.ptr[6] = residual;
    std::memcpy(&key.arg[2], &alpha, sizeof(float));
    auto prepare = [&](Prepared& prep) -> int32_t {
      prep.args = make_args(a, w, bias, residual, d, alpha, int(m), int(n), int(k), split, dev);
      return Launch::prepare(prep, ws, ws_bytes, dev);
    };
    auto launch = [&](Prepared& prep) -> int32_t {
      return Launch::launch(prep, ws, (flags & kFlagPdl) != 0, stream);
    };
    return oasr_kit::run_prepared(cache, key, prepare, launch);
  }
};

}  // namespace sm90
}  // namespace oasr_gemm
