// oasr_kit: launching CUTLASS 3.x (GemmUniversal + CollectiveBuilder) kernels from a family's
// launcher.
//
// Launch<GemmKernel> holds what every 3.x kernel's launcher does the same way: packed-stride
// arguments for D = A * B^T (A [m, k] row-major, B [n, k], D [m, n] in the kernel's layout),
// the workspace query, parameter preparation (can_implement, workspace size, shared memory,
// to_underlying_arguments) and the launch, with or without programmatic dependent launch.
// StageCountFor is the main loop's stage count: 0 carves the epilogue's shared memory out of
// an automatic count. The family keeps its kernel definition and its epilogue arguments.
#pragma once

#include <type_traits>

#include "cute/tensor.hpp"
#include "cutlass/gemm/collective/collective_builder.hpp"
#include "cutlass/gemm/device/gemm_universal_adapter.h"
#include "cutlass/gemm/kernel/tile_scheduler.hpp"
#include "cutlass/util/packed_stride.hpp"
#include "oasr_kit/launcher.cuh"

namespace oasr_kit {
namespace sm90 {

template <int Stages, class CollectiveEpilogue>
using StageCountFor = std::conditional_t<
    Stages == 0,
    cutlass::gemm::collective::StageCountAutoCarveout<
        static_cast<int>(sizeof(typename CollectiveEpilogue::SharedStorage))>,
    cutlass::gemm::collective::StageCount<(Stages > 0 ? Stages : 2)>>;

template <class TileScheduler>
inline constexpr bool kIsStreamK = std::is_same_v<TileScheduler, cutlass::gemm::StreamKScheduler>;

template <class GemmKernel>
struct Launch {
  using Adapter = cutlass::gemm::device::GemmUniversalAdapter<GemmKernel>;
  using Arguments = typename GemmKernel::Arguments;
  using Params = typename GemmKernel::Params;
  static constexpr bool kStreamK = kIsStreamK<typename GemmKernel::TileSchedulerTag>;

  struct Prepared {
    Arguments args;
    Params params;
  };

  // Arguments of D = A * B^T with packed strides; the caller fills args.epilogue.thread.
  template <class TA, class TB, class TD>
  static Arguments args(TA const* a, TB const* b, TD* d, int m, int n, int k, int dev) {
    auto stride_a = cutlass::make_cute_packed_stride(typename GemmKernel::StrideA{},
                                                     cute::make_shape(m, k, 1));
    auto stride_b = cutlass::make_cute_packed_stride(typename GemmKernel::StrideB{},
                                                     cute::make_shape(n, k, 1));
    auto stride_c = cutlass::make_cute_packed_stride(typename GemmKernel::StrideC{},
                                                     cute::make_shape(m, n, 1));
    auto stride_d = cutlass::make_cute_packed_stride(typename GemmKernel::StrideD{},
                                                     cute::make_shape(m, n, 1));
    cutlass::KernelHardwareInfo hw;
    hw.device_id = dev;
    hw.sm_count = sm_count(dev);
    return Arguments{cutlass::gemm::GemmUniversalMode::kGemm,
                     {m, n, k, 1},
                     {a, stride_a, b, stride_b},
                     {{}, nullptr, stride_c, d, stride_d},
                     hw};
  }

  static int64_t workspace(Arguments const& args) {
    return int64_t(GemmKernel::get_workspace_size(args));
  }

  // Checks prep.args against the kernel and the workspace, raises the shared memory limit
  // and builds prep.params.
  static int32_t prepare(Prepared& prep, void* workspace, int64_t workspace_bytes, int dev) {
    if (!GemmKernel::can_implement(prep.args)) {
      return kErrShape;
    }
    if (int64_t(GemmKernel::get_workspace_size(prep.args)) > workspace_bytes) {
      return kErrWorkspace;
    }
    if (!allow_smem<GemmKernel>(reinterpret_cast<const void*>(cutlass::device_kernel<GemmKernel>),
                                GemmKernel::SharedStorageSize, dev)) {
      return kErrInit;
    }
    prep.params = GemmKernel::to_underlying_arguments(prep.args, workspace);
    return kOk;
  }

  // One launch of prepared parameters; `pdl` launches with programmatic dependent launch
  // (only for kernels built with grid-dependency control).
  static int32_t launch(Prepared& prep, void* workspace, bool pdl, cudaStream_t stream) {
    if constexpr (kStreamK) {
      // Stream-K's barrier flags count arrivals and are not reset by the kernel: zero them
      // before every launch (a memset node inside a CUDA graph).
      if (GemmKernel::initialize_workspace(prep.args, workspace, stream) !=
          cutlass::Status::kSuccess) {
        return kErrInit;
      }
    }
    if (Adapter::run(prep.params, stream, nullptr, pdl) != cutlass::Status::kSuccess) {
      cudaGetLastError();
      return kErrLaunch;
    }
    return kOk;
  }
};

}  // namespace sm90
}  // namespace oasr_kit
