// oasr_gemm lane sm90_wgmma: CUTLASS 3.x CollectiveBuilder kernels (TMA + wgmma) for Hopper.
//
// One Kernel<...> per (config, dtype), holding two CUTLASS kernels that differ only in the
// epilogue (FusionOf below):
//   * Plain, D = acc, for calls without bias and activation;
//   * Fused, D = act(acc + bias): a three-node epilogue visitor tree (accumulator, bias
//     broadcast along N, or along the kernel's M when A and W are swapped; a null bias reads as
//     zeros without a load) under a run-time activation.
// CUTLASS's own LinCombPerColBiasEltAct (act(alpha * acc + beta * C + bias)) made every kernel
// 6-8% slower over the reference shapes on the H200, with or without a bias
// (benchmarks/results/h200_gemm_epilogue_variants.md); the variants measured there stay
// selectable at compile time (-DOASR_GEMM_SM90_FUSED=E) for that probe.
// run() takes Plain when there is neither bias nor activation, unless kFlagFused asks for the
// fused kernel (benchmarks and tests compare the two).
// Swapped kernels compute D^T = W * A^T, so a small M becomes the kernel's N (narrow tiles)
// while D keeps its row-major layout (it is D^T column-major).
//
// EM x EN is the epilogue subtile (0 x 0: CUTLASS's automatic 64x32, 128x32 when
// cooperative): each subtile is one registers -> smem -> TMA store round with a warpgroup
// barrier, so a wider one makes fewer rounds over a tile at the cost of shared memory.
//
// Units are compiled with CUTLASS_ENABLE_GDC_FOR_SM90: the kernels wait on the previous grid
// (griddepcontrol.wait) before their first global access and let the next one launch after
// their main loop. Launched with programmatic dependent launch (kFlagPdl), a kernel that
// follows another oasr kernel on the stream sets up while that one finishes; otherwise both
// instructions are no-ops.
#pragma once

#include <type_traits>

#include "cutlass/epilogue/collective/collective_builder.hpp"
#include "cutlass/epilogue/fusion/operations.hpp"
#include "cutlass/gemm/dispatch_policy.hpp"
#include "cutlass/gemm/kernel/gemm_universal.hpp"
#include "oasr_gemm/common.cuh"
#include "oasr_kit/sm90.cuh"

namespace oasr_gemm {
namespace sm90 {

template <int EM, int EN>
struct EpilogueTileOf {
  using type = cute::Shape<cute::Int<EM>, cute::Int<EN>>;
};
template <>
struct EpilogueTileOf<0, 0> {
  using type = cutlass::epilogue::collective::EpilogueTileAuto;
};

namespace fusion = cutlass::epilogue::fusion;
constexpr auto kRound = cutlass::FloatRoundStyle::round_to_nearest;

// The epilogue of one CUTLASS kernel (see the top of this file); Fused is E=1 in production.
enum Epilogue : int { kPlain = 0, kBiasAct = 1, kLibraryBiasAct = 2, kBiasOnly = 3 };

#ifndef OASR_GEMM_SM90_FUSED
#define OASR_GEMM_SM90_FUSED kBiasAct
#endif

// The bias: a broadcast row (one value per column of D) or, swapped, a broadcast column of
// D^T; a null pointer reads as zeros without a load.
template <class T, bool Swap, class Tile>
using BiasLeaf = std::conditional_t<
    Swap, fusion::Sm90ColBroadcast<0, Tile, T, float, cute::Stride<cute::_1, cute::_0, cute::_0>>,
    fusion::Sm90RowBroadcast<0, Tile, T, float, cute::Stride<cute::_0, cute::_1, cute::_0>>>;
template <class T, bool Swap, class Tile>
using AccPlusBias = fusion::Sm90EVT<fusion::Sm90Compute<cutlass::plus, float, float, kRound>,
                                    fusion::Sm90AccFetch, BiasLeaf<T, Swap, Tile>>;

template <class T, bool Swap, class Tile, int E>
struct FusionOf;
// D = acc.
template <class T, bool Swap, class Tile>
struct FusionOf<T, Swap, Tile, kPlain> {
  using type = fusion::ScaledAcc<T, float, float>;
  template <class A>
  static void set(A& a, const void*, int) {
    a.alpha = 1.f;
  }
};
// D = act(acc + bias), a tree of three nodes: no alpha, beta or C.
template <class T, bool Swap, class Tile>
struct FusionOf<T, Swap, Tile, kBiasAct> {
  using type = fusion::Sm90EVT<fusion::Sm90Compute<RuntimeAct, T, float, kRound>,
                               AccPlusBias<T, Swap, Tile>>;
  template <class A>
  static void set(A& a, const void* bias, int act) {
    a = {{{}, {static_cast<T const*>(bias), T(0), {}}, {}}, {act}};
  }
};
// CUTLASS's D = act(alpha * acc + beta * C + bias) (kept to measure against).
template <class T, bool Swap, class Tile>
struct FusionOf<T, Swap, Tile, kLibraryBiasAct> {
  using type = std::conditional_t<
      Swap, fusion::LinCombPerRowBiasEltAct<RuntimeAct, T, float, T, T, float>,
      fusion::LinCombPerColBiasEltAct<RuntimeAct, T, float, T, T, float>>;
  template <class A>
  static void set(A& a, const void* bias, int act) {
    a.alpha = 1.f;
    a.beta = 0.f;
    a.bias_ptr = static_cast<T const*>(bias);
    a.activation.kind = act;
  }
};
// D = acc + bias (measurement only: ignores the activation).
template <class T, bool Swap, class Tile>
struct FusionOf<T, Swap, Tile, kBiasOnly> {
  using type = fusion::Sm90EVT<
      fusion::Sm90Compute<cutlass::epilogue::thread::Identity, T, float, kRound>,
      AccPlusBias<T, Swap, Tile>>;
  template <class A>
  static void set(A& a, const void* bias, int) {
    a = {{{}, {static_cast<T const*>(bias), T(0), {}}, {}}, {}};
  }
};

// One CUTLASS kernel: the config's tile, schedule and cluster with epilogue E.
template <class T, int TM, int TN, int TK, int CM, int CN, int Stages, class MainloopSchedule,
          class EpilogueSchedule, class TileScheduler, bool Swap, int EM, int EN, int E>
struct Gemm {
  using TileShape = cute::Shape<cute::Int<TM>, cute::Int<TN>, cute::Int<TK>>;
  using ClusterShape = cute::Shape<cute::Int<CM>, cute::Int<CN>, cute::_1>;
  using LayoutA = cutlass::layout::RowMajor;
  using LayoutB = cutlass::layout::ColumnMajor;
  using LayoutD =
      std::conditional_t<Swap, cutlass::layout::ColumnMajor, cutlass::layout::RowMajor>;
  static constexpr int kAlign = 8;
  using FusionArgs = FusionOf<T, Swap, TileShape, E>;
  using Fusion = typename FusionArgs::type;

  using CollectiveEpilogue = typename cutlass::epilogue::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, TileShape, ClusterShape,
      typename EpilogueTileOf<EM, EN>::type, float, float, void, LayoutD, kAlign, T,
      LayoutD, kAlign, EpilogueSchedule, Fusion>::CollectiveOp;

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

  static Arguments make_args(const void* a, const void* w, const void* bias, void* d, int m, int n,
                             int k, int act, int split, int dev) {
    Arguments args = Launch::args(static_cast<T const*>(Swap ? w : a),
                                  static_cast<T const*>(Swap ? a : w), static_cast<T*>(d),
                                  Swap ? n : m, Swap ? m : n, k, dev);
    FusionArgs::set(args.epilogue.thread, bias, act);
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
    return Launch::workspace(make_args(nullptr, nullptr, nullptr, nullptr, int(m), int(n), int(k),
                                       0, split, dev));
  }

  static int32_t run(const void* a, const void* w, const void* bias, void* d, int64_t m,
                     int64_t n, int64_t k, int32_t act, int32_t split, void* ws, int64_t ws_bytes,
                     void* sem, int64_t, int32_t flags, cudaStream_t stream) {
    static oasr_kit::PreparedCache<Prepared> cache;
    if (!shape_ok(m, n, k)) {
      return kErrShape;
    }
    if (split != 1 && !Launch::kStreamK) {
      return kErrSplit;
    }
    int dev = current_device();
    if (dev < 0) {
      return kErrDevice;
    }
    auto prepare = [&](Prepared& prep) -> int32_t {
      prep.args = make_args(a, w, bias, d, int(m), int(n), int(k), act, split, dev);
      return Launch::prepare(prep, ws, ws_bytes, dev);
    };
    auto launch = [&](Prepared& prep) -> int32_t {
      return Launch::launch(prep, ws, (flags & kFlagPdl) != 0, stream);
    };
    return oasr_kit::run_prepared(cache, call_key(a, w, bias, d, ws, sem, m, n, k, act, split, dev),
                                  prepare, launch);
  }
};

// A config's kernel pair for dtype T (see the top of this file): the unit's launcher calls
// run(), which picks Plain or Fused per call.
template <class T, int TM, int TN, int TK, int CM, int CN, int Stages, class MainloopSchedule,
          class EpilogueSchedule, class TileScheduler, bool Swap, int EM = 0, int EN = 0>
struct Kernel {
  using Fused = Gemm<T, TM, TN, TK, CM, CN, Stages, MainloopSchedule, EpilogueSchedule,
                     TileScheduler, Swap, EM, EN, OASR_GEMM_SM90_FUSED>;
  using Plain = Gemm<T, TM, TN, TK, CM, CN, Stages, MainloopSchedule, EpilogueSchedule,
                     TileScheduler, Swap, EM, EN, kPlain>;

  static int64_t workspace(int64_t m, int64_t n, int64_t k, int32_t split, int64_t* sem_bytes) {
    int64_t fused = Fused::workspace(m, n, k, split, sem_bytes);
    int64_t plain = Plain::workspace(m, n, k, split, nullptr);
    return fused < 0 || plain < 0 ? -1 : (fused > plain ? fused : plain);
  }

  static int32_t run(const void* a, const void* w, const void* bias, void* d, int64_t m,
                     int64_t n, int64_t k, int32_t act, int32_t split, void* ws, int64_t ws_bytes,
                     void* sem, int64_t sem_bytes, int32_t flags, cudaStream_t stream) {
    if (bias == nullptr && act == kIdentity && (flags & kFlagFused) == 0) {
      return Plain::run(a, w, bias, d, m, n, k, act, split, ws, ws_bytes, sem, sem_bytes, flags,
                        stream);
    }
    return Fused::run(a, w, bias, d, m, n, k, act, split, ws, ws_bytes, sem, sem_bytes, flags,
                      stream);
  }
};

}  // namespace sm90
}  // namespace oasr_gemm
