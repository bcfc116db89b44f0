// oasr_gemm lane sm90_wgmma, parallel split-K: for shapes with too few output tiles to fill
// the GPU (M ~ 1000-4000 with N <= 1024) and a long K, a tile's K is cut into `split` slices.
//
// The slices are the batch mode of one non-persistent CUTLASS 3.x GEMM: A is viewed as
// (M, K/split, split) with strides (K, 1, K/split), W likewise, so TMA reads each slice in
// place (a slice's K bound is its own, so a partial K tile is zero-filled, never read from the
// next slice). Each slice writes an fp32 partial tile to the workspace; a second kernel sums
// the partials in a fixed order, adds the bias, applies the activation and rounds once: the
// same fp32 math as the fused epilogue, deterministic. Needs K % (8 * split) == 0.
//
// Kept in its own header so the one-kernel units (sm90.cuh) keep their cache keys.
#pragma once

#include "oasr_gemm/sm90.cuh"

namespace oasr_gemm {
namespace sm90 {

// out[r, c] = act(sum_l partials[l, r, c] + bias[c]) for 4 consecutive columns per thread
// (N % 8 == 0, so a group never crosses a row).
template <class T>
__global__ void reduce_partials(const float* __restrict__ partials, const T* __restrict__ bias,
                                T* __restrict__ d, int64_t mn, int64_t n, int splits, int act) {
  int64_t i = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) * 4;
  if (i >= mn) {
    return;
  }
  float4 acc = *reinterpret_cast<const float4*>(partials + i);
  for (int l = 1; l < splits; ++l) {
    float4 v = *reinterpret_cast<const float4*>(partials + int64_t(l) * mn + i);
    acc.x += v.x;
    acc.y += v.y;
    acc.z += v.z;
    acc.w += v.w;
  }
  float r[4] = {acc.x, acc.y, acc.z, acc.w};
  int64_t col = i % n;
  cutlass::AlignedArray<T, 4> out;
  CUTLASS_PRAGMA_UNROLL
  for (int j = 0; j < 4; ++j) {
    float x = bias != nullptr ? r[j] + float(bias[col + j]) : r[j];
    out[j] = T(apply_act(x, act));
  }
  *reinterpret_cast<cutlass::AlignedArray<T, 4>*>(d + i) = out;
}

template <class T, int TM, int TN, int TK, int CM, int CN, int Stages, class MainloopSchedule,
          class EpilogueSchedule, int EM = 0, int EN = 0>
struct SplitKernel {
  using TileShape = cute::Shape<cute::Int<TM>, cute::Int<TN>, cute::Int<TK>>;
  using ClusterShape = cute::Shape<cute::Int<CM>, cute::Int<CN>, cute::_1>;
  using LayoutA = cutlass::layout::RowMajor;
  using LayoutB = cutlass::layout::ColumnMajor;
  using LayoutP = cutlass::layout::RowMajor;
  static constexpr int kAlign = 8;
  static constexpr int kAlignP = 4;
  static constexpr int kThreads = 256;

  using Fusion = cutlass::epilogue::fusion::LinearCombination<float, float>;
  using CollectiveEpilogue = typename cutlass::epilogue::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, TileShape, ClusterShape,
      typename EpilogueTileOf<EM, EN>::type, float, float, void, LayoutP, kAlignP, float, LayoutP,
      kAlignP, EpilogueSchedule, Fusion>::CollectiveOp;
  using StageCount = std::conditional_t<
      Stages == 0,
      cutlass::gemm::collective::StageCountAutoCarveout<
          static_cast<int>(sizeof(typename CollectiveEpilogue::SharedStorage))>,
      cutlass::gemm::collective::StageCount<(Stages > 0 ? Stages : 2)>>;
  using CollectiveMainloop = typename cutlass::gemm::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, T, LayoutA, kAlign, T, LayoutB,
      kAlign, float, TileShape, ClusterShape, StageCount, MainloopSchedule>::CollectiveOp;
  using GemmKernel = cutlass::gemm::kernel::GemmUniversal<cute::Shape<int, int, int, int>,
                                                          CollectiveMainloop, CollectiveEpilogue,
                                                          void>;
  using Adapter = cutlass::gemm::device::GemmUniversalAdapter<GemmKernel>;
  using Arguments = typename GemmKernel::Arguments;
  using Params = typename GemmKernel::Params;

  struct Prepared {
    Params params;
  };

  static bool split_ok(int64_t k, int32_t split) {
    return split >= 2 && k % (int64_t(8) * split) == 0;
  }

  static int64_t partial_bytes(int64_t m, int64_t n, int32_t split) {
    return int64_t(split) * m * n * int64_t(sizeof(float));
  }

  static Arguments make_args(const void* a, const void* w, void* partials, int m, int n, int k,
                             int split, int dev) {
    int ks = k / split;
    auto stride_a = cutlass::make_cute_packed_stride(typename GemmKernel::StrideA{},
                                                     cute::make_shape(m, ks, split));
    auto stride_b = cutlass::make_cute_packed_stride(typename GemmKernel::StrideB{},
                                                     cute::make_shape(n, ks, split));
    // Rows keep the full K pitch; slice l starts l * K/split elements into each row.
    cute::get<0>(stride_a) = int64_t(k);
    cute::get<2>(stride_a) = int64_t(ks);
    cute::get<0>(stride_b) = int64_t(k);
    cute::get<2>(stride_b) = int64_t(ks);
    auto stride_p = cutlass::make_cute_packed_stride(typename GemmKernel::StrideD{},
                                                     cute::make_shape(m, n, split));
    cutlass::KernelHardwareInfo hw;
    hw.device_id = dev;
    hw.sm_count = sm_count(dev);
    Arguments args{cutlass::gemm::GemmUniversalMode::kBatched,
                   {m, n, ks, split},
                   {static_cast<T const*>(a), stride_a, static_cast<T const*>(w), stride_b},
                   {{}, nullptr, stride_p, static_cast<float*>(partials), stride_p},
                   hw};
    args.epilogue.thread.alpha = 1.f;
    args.epilogue.thread.beta = 0.f;
    return args;
  }

  // Scratch: the fp32 partials, then the GEMM's own workspace (none for this kernel today).
  static int64_t workspace(int64_t m, int64_t n, int64_t k, int32_t split, int64_t* sem_bytes) {
    if (sem_bytes != nullptr) {
      *sem_bytes = 0;
    }
    int dev = current_device();
    if (dev < 0 || !shape_ok(m, n, k) || !split_ok(k, split)) {
      return -1;
    }
    Arguments args = make_args(nullptr, nullptr, nullptr, int(m), int(n), int(k), split, dev);
    return partial_bytes(m, n, split) + int64_t(GemmKernel::get_workspace_size(args));
  }

  static int32_t run(const void* a, const void* w, const void* bias, void* d, int64_t m,
                     int64_t n, int64_t k, int32_t act, int32_t split, void* ws, int64_t ws_bytes,
                     void* sem, int64_t sem_bytes, int32_t flags, cudaStream_t stream) {
    static PreparedCache<Prepared> cache;
    if (!shape_ok(m, n, k)) {
      return kErrShape;
    }
    if (!split_ok(k, split)) {
      return kErrSplit;
    }
    int dev = current_device();
    if (dev < 0) {
      return kErrDevice;
    }
    int64_t pbytes = partial_bytes(m, n, split);
    if (ws == nullptr || pbytes > ws_bytes) {
      return kErrWorkspace;
    }
    void* gemm_ws = static_cast<char*>(ws) + pbytes;
    CallKey key{a, w, nullptr, nullptr, ws, sem, m, n, k, 0, split, dev};
    Prepared prep;
    if (!cache.find(key, prep)) {
      Arguments args = make_args(a, w, ws, int(m), int(n), int(k), split, dev);
      if (!GemmKernel::can_implement(args)) {
        return kErrShape;
      }
      if (pbytes + int64_t(GemmKernel::get_workspace_size(args)) > ws_bytes) {
        return kErrWorkspace;
      }
      if (!ensure_smem_attribute<GemmKernel>(
              reinterpret_cast<const void*>(cutlass::device_kernel<GemmKernel>),
              GemmKernel::SharedStorageSize, dev)) {
        return kErrInit;
      }
      prep.params = GemmKernel::to_underlying_arguments(args, gemm_ws);
      cache.put(key, prep);
    }
    bool pdl = (flags & kFlagPdl) != 0;
    if (Adapter::run(prep.params, stream, nullptr, pdl) != cutlass::Status::kSuccess) {
      cudaGetLastError();
      return kErrLaunch;
    }
    // A plain launch (no PDL): it waits for the whole GEMM.
    int64_t mn = m * n;
    int64_t blocks = (mn / 4 + kThreads - 1) / kThreads;
    reduce_partials<T><<<dim3(unsigned(blocks)), dim3(kThreads), 0, stream>>>(
        static_cast<const float*>(ws), static_cast<const T*>(bias), static_cast<T*>(d), mn, n,
        split, act);
    return launch_status();
  }
};

}  // namespace sm90
}  // namespace oasr_gemm
