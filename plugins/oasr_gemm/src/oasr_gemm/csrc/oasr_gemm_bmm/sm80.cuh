// oasr_gemm lane sm80_mma, op bmm: CUTLASS 2.x GemmUniversal kernels (mma.sync) in batched
// mode (GemmUniversalMode::kBatched: the grid's z index is the batch, with batch strides).
//
// One Kernel<...> per (config, dtype, layout): the config's block, warp and stage count, as
// in oasr_gemm/sm80.cuh; B is column-major per batch for kTN (b [batch, n, k] row-major) and
// row-major for kNN (b [batch, k, n]). The epilogue stores the accumulator, rounded once (no
// bias, no activation). Batched mode takes the grid's z index that serial and parallel
// split-K use for K partitions, so only the data-parallel units (split 1, no Stream-K) have
// a bmm kernel (see codegen.has_bmm).
#pragma once

#include <type_traits>

#include "cutlass/epilogue/thread/linear_combination.h"
#include "cutlass/gemm/device/gemm_universal.h"
#include "cutlass/gemm/kernel/default_gemm_universal.h"
#include "cutlass/gemm/threadblock/threadblock_swizzle.h"
#include "oasr_gemm_bmm/common.cuh"
#include "oasr_kit/sm80.cuh"

namespace oasr_gemm {
namespace bmm {
namespace sm80 {

template <class T, int BM, int BN, int BK, int WM, int WN, int WK, int Stages, int BLayout>
struct Kernel {
  using LayoutB = std::conditional_t<BLayout == kTN, cutlass::layout::ColumnMajor,
                                     cutlass::layout::RowMajor>;
  using OutputOp = cutlass::epilogue::thread::LinearCombination<
      T, 8, float, float, cutlass::epilogue::thread::ScaleType::OnlyAlphaScaling>;
  using GemmKernel = typename cutlass::gemm::kernel::DefaultGemmUniversal<
      T, cutlass::layout::RowMajor, cutlass::ComplexTransform::kNone, 8, T, LayoutB,
      cutlass::ComplexTransform::kNone, 8, T, cutlass::layout::RowMajor, float,
      cutlass::arch::OpClassTensorOp, cutlass::arch::Sm80, cutlass::gemm::GemmShape<BM, BN, BK>,
      cutlass::gemm::GemmShape<WM, WN, WK>, cutlass::gemm::GemmShape<16, 8, 16>, OutputOp,
      cutlass::gemm::threadblock::GemmIdentityThreadblockSwizzle<>, Stages,
      cutlass::arch::OpMultiplyAdd>::GemmKernel;
  using Launch = oasr_kit::sm80::Launch<GemmKernel, false>;
  using Arguments = typename GemmKernel::Arguments;
  using Params = typename GemmKernel::Params;

  // Batched arguments: packed batch strides, leading dimensions of contiguous rows.
  static Arguments make_args(const void* a, const void* b, void* d, int batch, int m, int n,
                             int k) {
    typename OutputOp::Params out(1.f);
    int64_t ldb = BLayout == kTN ? k : n;
    return Arguments(cutlass::gemm::GemmUniversalMode::kBatched,
                     cutlass::gemm::GemmCoord(m, n, k), batch, out, a, b, d, d,
                     int64_t(m) * k, int64_t(n) * k, int64_t(m) * n, int64_t(m) * n, k, ldb,
                     n, n);
  }

  static int64_t workspace(int64_t m, int64_t n, int64_t k, int64_t batch) {
    int dev = current_device();
    if (dev < 0 || !shape_ok(batch, m, n, k)) {
      return -1;
    }
    return 0;
  }

  static int32_t run(const void* a, const void* b, void* d, int64_t batch, int64_t m, int64_t n,
                     int64_t k, void*, int64_t, int32_t, cudaStream_t stream) {
    static oasr_kit::PreparedCache<Params> cache;
    if (!shape_ok(batch, m, n, k)) {
      return kErrShape;
    }
    int dev = current_device();
    if (dev < 0) {
      return kErrDevice;
    }
    auto prepare = [&](Params& params) -> int32_t {
      return Launch::prepare(params, make_args(a, b, d, int(batch), int(m), int(n), int(k)),
                             dev);
    };
    auto launch = [&](Params& params) -> int32_t {
      return Launch::launch(params, nullptr, stream);
    };
    return oasr_kit::run_prepared(cache, call_key(a, b, d, nullptr, batch, m, n, k, dev),
                                  prepare, launch);
  }
};

}  // namespace sm80
}  // namespace bmm
}  // namespace oasr_gemm
