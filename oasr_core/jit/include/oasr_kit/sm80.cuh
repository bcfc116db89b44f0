// oasr_kit: launching CUTLASS 2.x (GemmUniversal-style) kernels from a family's launcher.
//
// Launch<GemmKernel, StreamK> holds what every 2.x kernel's launcher does the same way: the
// entry point and its dynamic shared memory, the resident CTAs per SM (Stream-K sizes its
// grid by it), parameter preparation and the launch itself. The family keeps its kernel
// definition, its Arguments and its workspace rules.
#pragma once

#include "cutlass/cutlass.h"
#include "cutlass/device_kernel.h"
#include "oasr_kit/launcher.cuh"

namespace oasr_kit {
namespace sm80 {

template <class GemmKernel, bool StreamK>
struct Launch {
  using Arguments = typename GemmKernel::Arguments;
  using Params = typename GemmKernel::Params;
  static constexpr int kSmem = int(sizeof(typename GemmKernel::SharedStorage));

  static const void* entry() {
    return reinterpret_cast<const void*>(cutlass::Kernel2<GemmKernel>);
  }

  static bool allow_smem(int dev) {
    return oasr_kit::allow_smem<GemmKernel>(entry(), kSmem, dev);
  }

  // Resident CTAs per SM, cached per device (1 when the query fails).
  static int occupancy(int dev) {
    static std::atomic<int> cache[64] = {};
    int v = cache[dev & 63].load(std::memory_order_relaxed);
    if (v <= 0) {
      allow_smem(dev);
      if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&v, cutlass::Kernel2<GemmKernel>,
                                                        GemmKernel::kThreadCount,
                                                        kSmem) != cudaSuccess) {
        cudaGetLastError();
        return 1;
      }
      v = v > 0 ? v : 1;
      cache[dev & 63].store(v, std::memory_order_relaxed);
    }
    return v;
  }

  static Params params(Arguments const& args, int dev) {
    return Params(args, sm_count(dev), StreamK ? occupancy(dev) : 1);
  }

  // Checks `args` against the kernel, raises its shared memory limit and builds its Params.
  static int32_t prepare(Params& out, Arguments const& args, int dev) {
    if (GemmKernel::can_implement(args) != cutlass::Status::kSuccess) {
      return kErrShape;
    }
    if (!allow_smem(dev)) {
      return kErrInit;
    }
    out = params(args, dev);
    return kOk;
  }

  // One launch of prepared parameters. Stream-K first points the kernel at its partials in
  // `workspace` and zeroes the barrier flags (a memset node when captured in a CUDA graph), so
  // every launch starts from clean flags.
  static int32_t launch(Params& params, void* workspace, cudaStream_t stream) {
    if constexpr (StreamK) {
      if (params.init_workspace(workspace, stream) != cutlass::Status::kSuccess) {
        return kErrInit;
      }
    }
    dim3 grid = params.get_grid_dims();
    dim3 block(GemmKernel::kThreadCount, 1, 1);
    cutlass::Kernel2<GemmKernel><<<grid, block, kSmem, stream>>>(params);
    return launch_status();
  }
};

}  // namespace sm80
}  // namespace oasr_kit
