// oasr_gemm lane sm80_mma, op group_gemm: CUTLASS 2.x GemmGrouped kernels (mma.sync, the
// problem visitor scheduling tiles on the device), running on sm80..sm90.
//
// The C ABI every group_gemm unit exports (codegen.py writes the two functions per config):
//
//   int32_t <sym>(const oasr_kit::CallArgs* call, const void* const* xs,
//                 const void* const* ws, const void* const* bs, void* const* ds,
//                 const int64_t* rows, int64_t groups, void* stream);
//   int64_t <sym>_workspace(int64_t groups, int64_t n, int64_t k, int32_t dtype);
//
// D_g = X_g W_g^T (+ b_g) for g < groups: X_g [rows[g], k], W_g [n, k], D_g [rows[g], n]
// row-major and contiguous, b_g [n] (bs nullptr: no bias on any problem). xs, ws, bs, ds and
// rows are host arrays of `groups` entries. call->n and call->k are the problems' (equal)
// sizes; call->workspace holds the problem records the kernel reads (workspace query: their
// bytes). A problem of 0 rows is skipped.
//
// The records (sizes, pointers, leading dimensions) reach the device by value: they are the
// parameter of a one-CTA copy kernel launched on the call's stream before the grouped kernel,
// so a CUDA graph that captures a call replays its own records and reads no host buffer a
// later call may rewrite; the host arrays are read only during the call. The kernel
// parameter limit bounds the group: kMaxGroups problems (kErrShape above).
#pragma once

#include <cstdint>

#include "cutlass/epilogue/thread/linear_combination.h"
#include "cutlass/gemm/device/gemm_grouped.h"
#include "cutlass/gemm/kernel/default_gemm_grouped.h"
#include "cutlass/gemm/threadblock/threadblock_swizzle.h"
#include "oasr_gemm/common.cuh"

namespace oasr_gemm {
namespace group {

constexpr int kMaxGroups = 32;

// What the grouped kernel reads for one group, laid out in the workspace as written here
// (CUTLASS's argument arrays are of non-const pointers; the kernel only reads A, B and C).
struct Records {
  cutlass::gemm::GemmCoord sizes[kMaxGroups];
  void* a[kMaxGroups];
  void* b[kMaxGroups];
  void* c[kMaxGroups];
  void* d[kMaxGroups];
  int64_t lda[kMaxGroups];
  int64_t ldb[kMaxGroups];
  int64_t ldc[kMaxGroups];
  int64_t ldd[kMaxGroups];
};

namespace {

// Internal linkage: every group unit of a module defines its own copy.
__global__ void write_records(Records records, Records* out) {
  // 4-byte words, one per thread stride: the struct is a multiple of 8 bytes.
  const uint32_t* src = reinterpret_cast<const uint32_t*>(&records);
  uint32_t* dst = reinterpret_cast<uint32_t*>(out);
  for (int i = threadIdx.x; i < int(sizeof(Records) / 4); i += blockDim.x) {
    dst[i] = src[i];
  }
}

}  // namespace

inline int64_t workspace_bytes(int64_t groups, int64_t n, int64_t k) {
  if (groups < 1 || groups > kMaxGroups || !oasr_gemm::shape_ok(1, n, k)) {
    return -1;
  }
  return int64_t(sizeof(Records));
}

namespace sm80 {

template <class T, int BM, int BN, int BK, int WM, int WN, int WK, int Stages>
struct Kernel {
  // beta scales C, the bias broadcast over rows (ldc 0); 0 without bias.
  using OutputOp = cutlass::epilogue::thread::LinearCombination<T, 8, float, float>;
  using GemmKernel = typename cutlass::gemm::kernel::DefaultGemmGrouped<
      T, cutlass::layout::RowMajor, cutlass::ComplexTransform::kNone, 8, T,
      cutlass::layout::ColumnMajor, cutlass::ComplexTransform::kNone, 8, T,
      cutlass::layout::RowMajor, float, cutlass::arch::OpClassTensorOp, cutlass::arch::Sm80,
      cutlass::gemm::GemmShape<BM, BN, BK>, cutlass::gemm::GemmShape<WM, WN, WK>,
      cutlass::gemm::GemmShape<16, 8, 16>, OutputOp,
      cutlass::gemm::threadblock::GemmIdentityThreadblockSwizzle<1>, Stages,
      cutlass::gemm::kernel::GroupScheduleMode::kDeviceOnly>::GemmKernel;
  using Device = cutlass::gemm::device::GemmGrouped<GemmKernel>;
  using Arguments = typename GemmKernel::Arguments;
  using Params = typename GemmKernel::Params;
  static constexpr int kSmem = int(sizeof(typename GemmKernel::SharedStorage));

  static int64_t workspace(int64_t groups, int64_t n, int64_t k) {
    return current_device() < 0 ? -1 : workspace_bytes(groups, n, k);
  }

  // Resident CTAs of the grouped kernel on the device (0: it cannot run).
  static int threadblocks(int dev) {
    static std::atomic<int> cache[64] = {};
    int v = cache[dev & 63].load(std::memory_order_relaxed);
    if (v <= 0) {
      if (!oasr_kit::allow_smem<GemmKernel>(
              reinterpret_cast<const void*>(cutlass::Kernel<GemmKernel>), kSmem, dev)) {
        return 0;
      }
      int per_sm = Device::maximum_active_blocks();
      v = per_sm > 0 ? per_sm * sm_count(dev) : 0;
      cache[dev & 63].store(v, std::memory_order_relaxed);
    }
    return v;
  }

  static int32_t run(const void* const* xs, const void* const* ws, const void* const* bs,
                     void* const* ds, const int64_t* rows, int64_t groups, int64_t n,
                     int64_t k, void* workspace, int64_t bytes, cudaStream_t stream) {
    if (xs == nullptr || ws == nullptr || ds == nullptr || rows == nullptr
        || workspace_bytes(groups, n, k) < 0) {
      return kErrShape;
    }
    if (workspace == nullptr || bytes < int64_t(sizeof(Records))) {
      return kErrWorkspace;
    }
    int dev = current_device();
    if (dev < 0) {
      return kErrDevice;
    }
    Records records = {};
    int count = 0;
    for (int64_t g = 0; g < groups; ++g) {
      if (rows[g] < 0 || rows[g] > INT32_MAX) {
        return kErrShape;
      }
      if (rows[g] == 0) {
        continue;
      }
      records.sizes[count] = cutlass::gemm::GemmCoord(int(rows[g]), int(n), int(k));
      records.a[count] = const_cast<void*>(xs[g]);
      records.b[count] = const_cast<void*>(ws[g]);
      records.c[count] = bs != nullptr ? const_cast<void*>(bs[g]) : ds[g];
      records.d[count] = ds[g];
      records.lda[count] = k;
      records.ldb[count] = k;
      records.ldc[count] = bs != nullptr ? 0 : n;
      records.ldd[count] = n;
      ++count;
    }
    if (count == 0) {
      return kOk;
    }
    int blocks = threadblocks(dev);
    if (blocks <= 0) {
      return kErrInit;
    }
    auto* dev_records = static_cast<Records*>(workspace);
    write_records<<<1, 256, 0, stream>>>(records, dev_records);
    if (cudaGetLastError() != cudaSuccess) {
      return kErrLaunch;
    }
    typename OutputOp::Params out(1.f, bs != nullptr ? 1.f : 0.f);
    Arguments args(dev_records->sizes, count, blocks, out,
                   reinterpret_cast<T**>(dev_records->a), reinterpret_cast<T**>(dev_records->b),
                   reinterpret_cast<T**>(dev_records->c), reinterpret_cast<T**>(dev_records->d),
                   dev_records->lda, dev_records->ldb, dev_records->ldc, dev_records->ldd);
    Params params(args, nullptr, 0);
    dim3 grid(blocks, 1, 1);
    dim3 block(GemmKernel::kThreadCount, 1, 1);
    cutlass::Kernel<GemmKernel><<<grid, block, kSmem, stream>>>(params);
    return launch_status();
  }
};

}  // namespace sm80
}  // namespace group
}  // namespace oasr_gemm
