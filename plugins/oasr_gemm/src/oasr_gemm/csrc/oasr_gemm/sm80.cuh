// oasr_gemm lane sm80_mma: CUTLASS 2.x GemmUniversal kernels (mma.sync) for sm80..sm90.
//
// Three decompositions, fixed per compiled unit (Decomp):
//   0 data-parallel; a run-time split_k > 1 makes it serial split-K: k-partitions of a tile
//     take turns on a semaphore and accumulate through D; the epilogue applies bias once and
//     the activation only in the last partition (set_k_partition). The semaphores come from
//     the caller's zeroed buffer and the last partition resets them.
//   1 Stream-K (ThreadblockSwizzleStreamK): partials and barrier flags in the workspace; the
//     flags are zeroed before each launch.
//   2 parallel split-K: the GEMM writes fp32 partial sums per k-slice into the workspace and a
//     small reduction kernel adds them, the bias and the activation, once.
// The bias is the epilogue's C operand with a zero row stride (a broadcast row).
#pragma once

#include <type_traits>

#include "cutlass/epilogue/thread/linear_combination.h"
#include "cutlass/epilogue/thread/linear_combination_generic.h"
#include "cutlass/gemm/device/gemm_universal.h"
#include "cutlass/gemm/kernel/default_gemm_universal.h"
#include "cutlass/gemm/threadblock/threadblock_swizzle.h"
#include "cutlass/gemm/threadblock/threadblock_swizzle_streamk.h"
#include "oasr_gemm/common.cuh"
#include "oasr_kit/sm80.cuh"

namespace oasr_gemm {
namespace sm80 {

template <class T>
__global__ void splitk_reduce(float const* __restrict__ partials, int splits, int64_t mn, int n,
                              T const* __restrict__ bias, T* __restrict__ out, int act) {
  int64_t i = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) * 4;
  if (i >= mn) {
    return;
  }
  float4 acc = *reinterpret_cast<float4 const*>(partials + i);
  for (int s = 1; s < splits; ++s) {
    float4 p = *reinterpret_cast<float4 const*>(partials + int64_t(s) * mn + i);
    acc.x += p.x;
    acc.y += p.y;
    acc.z += p.z;
    acc.w += p.w;
  }
  float v[4] = {acc.x, acc.y, acc.z, acc.w};
  int col = int(i % n);
  CUTLASS_PRAGMA_UNROLL
  for (int j = 0; j < 4; ++j) {
    float x = v[j] + (bias != nullptr ? float(bias[col + j]) : 0.f);
    out[i + j] = T(apply_act(x, act));
  }
}

template <class T, int BM, int BN, int BK, int WM, int WN, int WK, int Stages, int Decomp>
struct Kernel {
  static constexpr bool kStreamK = Decomp == 1;
  static constexpr bool kParallel = Decomp == 2;
  using OutputOp = cutlass::epilogue::thread::LinearCombinationGeneric<
      RuntimeAct, T, 8, float, float, cutlass::epilogue::thread::ScaleType::Default,
      cutlass::FloatRoundStyle::round_to_nearest, true>;
  using PartialOp = cutlass::epilogue::thread::LinearCombination<float, 4, float, float>;
  using Op = std::conditional_t<kParallel, PartialOp, OutputOp>;
  using ElementOut = std::conditional_t<kParallel, float, T>;
  using Swizzle = std::conditional_t<kStreamK, cutlass::gemm::threadblock::ThreadblockSwizzleStreamK,
                                     cutlass::gemm::threadblock::GemmIdentityThreadblockSwizzle<>>;
  using GemmKernel = typename cutlass::gemm::kernel::DefaultGemmUniversal<
      T, cutlass::layout::RowMajor, cutlass::ComplexTransform::kNone, 8, T,
      cutlass::layout::ColumnMajor, cutlass::ComplexTransform::kNone, 8, ElementOut,
      cutlass::layout::RowMajor, float, cutlass::arch::OpClassTensorOp, cutlass::arch::Sm80,
      cutlass::gemm::GemmShape<BM, BN, BK>, cutlass::gemm::GemmShape<WM, WN, WK>,
      cutlass::gemm::GemmShape<16, 8, 16>, Op, Swizzle, Stages,
      cutlass::arch::OpMultiplyAdd>::GemmKernel;
  using Launch = oasr_kit::sm80::Launch<GemmKernel, kStreamK>;
  using Arguments = typename GemmKernel::Arguments;
  using Params = typename GemmKernel::Params;

  static Arguments make_args(const void* a, const void* w, const void* bias, void* d, void* ws,
                             int m, int n, int k, int act, int split) {
    cutlass::gemm::GemmCoord size(m, n, k);
    if constexpr (kParallel) {
      typename PartialOp::Params partial(1.f, 0.f);
      return Arguments(cutlass::gemm::GemmUniversalMode::kGemmSplitKParallel, size, split,
                       partial, a, w, nullptr, ws, 0, 0, 0, int64_t(m) * n, k, k, n, n);
    } else {
      typename OutputOp::Params out(1.f, bias != nullptr ? 1.f : 0.f);
      out.kind = act;
      if constexpr (kStreamK) {
        return Arguments(cutlass::gemm::GemmUniversalMode::kGemm, size, 1, out, a, w, bias, d, 0,
                         0, 0, 0, k, k, 0, n);
      } else {
        return Arguments(cutlass::gemm::GemmUniversalMode::kGemm, size, split, out, a, w, bias, d,
                         0, 0, 0, 0, k, k, 0, n);
      }
    }
  }

  // Bytes of scratch (Stream-K partials and flags, or fp32 split partials) and of zeroed
  // semaphores (serial split-K) this shape needs.
  static void sizes(Params const& params, int64_t m, int64_t n, int64_t* scratch, int64_t* sems) {
    *scratch = 0;
    *sems = 0;
    if constexpr (kParallel) {
      *scratch = int64_t(params.grid_tiled_shape.k()) * m * n * int64_t(sizeof(float));
    } else if constexpr (kStreamK) {
      *scratch = int64_t(params.get_workspace_size());
    } else {
      *sems = int64_t(params.get_workspace_size());
    }
  }

  static int64_t workspace(int64_t m, int64_t n, int64_t k, int32_t split, int64_t* sem_bytes) {
    int dev = current_device();
    if (dev < 0 || !shape_ok(m, n, k) || split < 1) {
      return -1;
    }
    Arguments args = make_args(nullptr, nullptr, nullptr, nullptr, nullptr, int(m), int(n),
                               int(k), 0, split);
    Params params = Launch::params(args, dev);
    int64_t scratch = 0, sems = 0;
    sizes(params, m, n, &scratch, &sems);
    if (sem_bytes != nullptr) {
      *sem_bytes = sems;
    }
    return scratch;
  }

  struct Prepared {
    Params params;
    int splits = 1;
  };

  static int32_t run(const void* a, const void* w, const void* bias, void* d, int64_t m,
                     int64_t n, int64_t k, int32_t act, int32_t split, void* ws, int64_t ws_bytes,
                     void* sem, int64_t sem_bytes, cudaStream_t stream) {
    static oasr_kit::PreparedCache<Prepared> cache;
    if (!shape_ok(m, n, k)) {
      return kErrShape;
    }
    if (split < 1 || (kStreamK && split != 1) || (kParallel && split < 2)) {
      return kErrSplit;
    }
    int dev = current_device();
    if (dev < 0) {
      return kErrDevice;
    }
    auto prepare = [&](Prepared& prep) -> int32_t {
      Arguments args = make_args(a, w, bias, d, ws, int(m), int(n), int(k), act, split);
      int32_t status = Launch::prepare(prep.params, args, dev);
      if (status != kOk) {
        return status;
      }
      int64_t scratch = 0, sems = 0;
      sizes(prep.params, m, n, &scratch, &sems);
      if (scratch > ws_bytes || sems > sem_bytes) {
        return kErrWorkspace;
      }
      if constexpr (!kStreamK && !kParallel) {
        prep.params.semaphore = sems > 0 ? static_cast<int*>(sem) : nullptr;
      }
      if constexpr (kParallel) {
        prep.splits = prep.params.grid_tiled_shape.k();
      }
      return kOk;
    };
    auto launch = [&](Prepared& prep) -> int32_t {
      int32_t status = Launch::launch(prep.params, ws, stream);
      if constexpr (kParallel) {
        if (status == kOk) {
          int64_t mn = m * n;
          int threads = 256;
          int64_t blocks = (mn / 4 + threads - 1) / threads;
          splitk_reduce<T><<<dim3(unsigned(blocks)), threads, 0, stream>>>(
              static_cast<float const*>(ws), prep.splits, mn, int(n), static_cast<T const*>(bias),
              static_cast<T*>(d), act);
          status = launch_status();
        }
      }
      return status;
    };
    return oasr_kit::run_prepared(cache, call_key(a, w, bias, d, ws, sem, m, n, k, act, split, dev),
                                  prepare, launch);
  }
};

}  // namespace sm80
}  // namespace oasr_gemm
