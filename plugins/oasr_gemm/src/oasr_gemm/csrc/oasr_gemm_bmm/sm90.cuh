// oasr_gemm lane sm90_wgmma, op bmm: CUTLASS 3.x batched GEMMs (TMA + wgmma), the batch as
// the problem's L mode.
//
// One Kernel<...> per (config, dtype, layout): the config's tile, cluster, schedule, stage
// count and epilogue subtile, as in oasr_gemm/sm90.cuh, whose pieces it reuses (the epilogue
// subtile, the plain epilogue D = acc, the kit's stage count and launch helpers). Only the
// operand layouts and the problem shape (m, n, k, batch) with packed batch strides differ.
// Swapped kernels compute D^T = B^T A^T per batch, as the gemm lanes' do: the kernel's A is
// then b (K-major for kTN, N-major for kNN: wgmma reads either major for 16-bit types) and
// its B is a, while D keeps its row-major layout. There is no bias and no activation: the
// epilogue stores the accumulator, rounded once. Stream-K configs have no bmm unit (see
// codegen.has_bmm).
#pragma once

#include <type_traits>

#include "oasr_gemm/sm90.cuh"
#include "oasr_gemm_bmm/common.cuh"

namespace oasr_gemm {
namespace bmm {
namespace sm90 {

template <class T, int TM, int TN, int TK, int CM, int CN, int Stages, class MainloopSchedule,
          class EpilogueSchedule, class TileScheduler, bool Swap, int BLayout, int EM = 0,
          int EN = 0>
struct Kernel {
  using RowMajor = cutlass::layout::RowMajor;
  using ColumnMajor = cutlass::layout::ColumnMajor;
  using TileShape = cute::Shape<cute::Int<TM>, cute::Int<TN>, cute::Int<TK>>;
  using ClusterShape = cute::Shape<cute::Int<CM>, cute::Int<CN>, cute::_1>;
  // b as an [n, k] operand: K-major (row-major [n, k]) for kTN, N-major for kNN.
  using LayoutBnk = std::conditional_t<BLayout == kTN, RowMajor, ColumnMajor>;
  // The kernel's A is [m', k] and its B [n', k] in CUTLASS's layout tags (RowMajor A and
  // ColumnMajor B are K-major).
  using LayoutA = std::conditional_t<Swap, LayoutBnk, RowMajor>;
  using LayoutB = std::conditional_t<
      Swap, ColumnMajor, std::conditional_t<BLayout == kTN, ColumnMajor, RowMajor>>;
  using LayoutD = std::conditional_t<Swap, ColumnMajor, RowMajor>;
  static constexpr int kAlign = 8;
  using Fusion = cutlass::epilogue::fusion::ScaledAcc<T, float, float>;

  using CollectiveEpilogue = typename cutlass::epilogue::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, TileShape, ClusterShape,
      typename oasr_gemm::sm90::EpilogueTileOf<EM, EN>::type, float, float, void, LayoutD,
      kAlign, T, LayoutD, kAlign, EpilogueSchedule, Fusion>::CollectiveOp;

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
  static_assert(!Launch::kStreamK, "bmm units are split-free: no Stream-K scheduler");

  // The problem (m', n', k, batch) with packed batch strides: A, B and D are contiguous.
  static Arguments make_args(const void* a, const void* b, void* d, int batch, int m, int n,
                             int k, int dev) {
    int km = Swap ? n : m, kn = Swap ? m : n;
    auto stride_a = cutlass::make_cute_packed_stride(typename GemmKernel::StrideA{},
                                                     cute::make_shape(km, k, batch));
    auto stride_b = cutlass::make_cute_packed_stride(typename GemmKernel::StrideB{},
                                                     cute::make_shape(kn, k, batch));
    auto stride_c = cutlass::make_cute_packed_stride(typename GemmKernel::StrideC{},
                                                     cute::make_shape(km, kn, batch));
    auto stride_d = cutlass::make_cute_packed_stride(typename GemmKernel::StrideD{},
                                                     cute::make_shape(km, kn, batch));
    cutlass::KernelHardwareInfo hw;
    hw.device_id = dev;
    hw.sm_count = sm_count(dev);
    Arguments args{cutlass::gemm::GemmUniversalMode::kGemm,
                   {km, kn, k, batch},
                   {static_cast<T const*>(Swap ? b : a), stride_a,
                    static_cast<T const*>(Swap ? a : b), stride_b},
                   {{}, nullptr, stride_c, static_cast<T*>(d), stride_d},
                   hw};
    args.epilogue.thread.alpha = 1.f;
    return args;
  }

  static int64_t workspace(int64_t m, int64_t n, int64_t k, int64_t batch) {
    int dev = current_device();
    if (dev < 0 || !shape_ok(batch, m, n, k)) {
      return -1;
    }
    return Launch::workspace(
        make_args(nullptr, nullptr, nullptr, int(batch), int(m), int(n), int(k), dev));
  }

  static int32_t run(const void* a, const void* b, void* d, int64_t batch, int64_t m, int64_t n,
                     int64_t k, void* ws, int64_t ws_bytes, int32_t flags, cudaStream_t stream) {
    static oasr_kit::PreparedCache<Prepared> cache;
    if (!shape_ok(batch, m, n, k)) {
      return kErrShape;
    }
    int dev = current_device();
    if (dev < 0) {
      return kErrDevice;
    }
    auto prepare = [&](Prepared& prep) -> int32_t {
      prep.args = make_args(a, b, d, int(batch), int(m), int(n), int(k), dev);
      return Launch::prepare(prep, ws, ws_bytes, dev);
    };
    auto launch = [&](Prepared& prep) -> int32_t {
      return Launch::launch(prep, ws, (flags & kFlagPdl) != 0, stream);
    };
    return oasr_kit::run_prepared(cache, call_key(a, b, d, ws, batch, m, n, k, dev), prepare,
                                  launch);
  }
};

}  // namespace sm90
}  // namespace bmm
}  // namespace oasr_gemm
