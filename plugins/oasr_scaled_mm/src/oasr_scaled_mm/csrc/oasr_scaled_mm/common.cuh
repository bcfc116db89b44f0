// oasr_scaled_mm: pieces shared by both lanes' generated translation units.
//
// The C ABI every unit exports (codegen.py writes the two functions per unit):
//
//   int32_t <sym>(const oasr_smm::CallArgs* call, const void* a, const void* w,
//                 const void* a_scale, const void* w_scale, const void* bias,
//                 const void* out_scale_ptr, float out_scale, void* d, void* stream);
//   int64_t <sym>_workspace(int64_t m, int64_t n, int64_t k, int32_t out_dtype);
//
// A [M, K] int8 row-major, W [N, K] int8 row-major (nn.Linear layout), a_scale float32 [M],
// w_scale float32 [N], bias float32 [N] or nullptr. Every kernel computes, per element,
//
//   v = ((float(acc_int32) * a_scale[m]) * w_scale[n]) + bias_or_0[n]      (one fp32 op each)
//   D = out_dtype(v)                                 scaled_mm: fp16/bf16, round to nearest even
//   D = sat_int8(rne(v / out_scale))                 scaled_mm_quant: IEEE division, saturating
//
// with the ops in exactly that order: units are compiled with --fmad=false, so no multiply
// and add fuse into an FMA, and the torch reference (oasr_scaled_mm.reference) does the same
// fp32 ops in the same order. The accumulator is an exact int32 sum, so every config (and
// Stream-K, which reduces int32 partials) computes the same bits.
//
// out_scale is read from `out_scale_ptr` (a device float32) when it is not null, else the
// value `out_scale` is used. `call` holds what is fixed per shape; the launcher returns a
// Status; the workspace query returns scratch bytes (-1: dtype not compiled in, bad shape,
// no device).
//
// Launch parameters are prepared once per call key (shape, every pointer, out_scale, device,
// workspace) and cached: Hopper TMA descriptors embed the A/W/D pointers, so a call with new
// pointers builds fresh parameters and never runs with stale ones.
#pragma once

#include <atomic>
#include <cstdint>
#include <cstring>
#include <mutex>

#include <cuda_runtime.h>

#include "cutlass/cutlass.h"
#include "cutlass/numeric_types.h"

#ifndef OASR_EXPORT
#define OASR_EXPORT extern "C" __attribute__((visibility("default")))
#endif

namespace oasr_smm {

enum Status : int32_t {
  kOk = 0,
  kErrDtype = 1,      // out dtype code not compiled into this unit
  kErrShape = 2,      // the kernel cannot implement this shape / alignment
  kErrWorkspace = 4,  // workspace too small
  kErrInit = 5,       // parameter preparation or function attributes failed
  kErrLaunch = 6,     // the launch failed
  kErrDevice = 7,     // no current CUDA device
};

enum OutDtype : int32_t { kFloat16 = 0, kBFloat16 = 1, kInt8 = 2 };

// Fixed per call shape (mirrored field by field by oasr_scaled_mm.launch.CallArgs).
struct CallArgs {
  int64_t m, n, k;
  int32_t out_dtype, reserved;
  void* workspace;
  int64_t workspace_bytes;
};

// The tensors of one call.
struct Operands {
  const void* a;
  const void* w;
  const float* a_scale;
  const float* w_scale;
  const float* bias;
  const float* out_scale_ptr;
  float out_scale;
  void* d;
};

inline int current_device() {
  int dev = -1;
  if (cudaGetDevice(&dev) != cudaSuccess) {
    cudaGetLastError();
    return -1;
  }
  return dev;
}

inline int sm_count(int dev) {
  static std::atomic<int> cache[64] = {};
  int slot = dev & 63;
  int v = cache[slot].load(std::memory_order_relaxed);
  if (v <= 0) {
    if (cudaDeviceGetAttribute(&v, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess) {
      cudaGetLastError();
      return 0;
    }
    cache[slot].store(v, std::memory_order_relaxed);
  }
  return v;
}

// Raise a kernel's dynamic shared memory limit once per device; Tag makes the flag per kernel.
template <class Tag>
inline bool allow_smem(const void* fn, int smem_bytes, int dev) {
  static std::atomic<uint64_t> done{0};
  uint64_t bit = uint64_t(1) << (dev & 63);
  if (done.load(std::memory_order_acquire) & bit) {
    return true;
  }
  if (smem_bytes >= (48 << 10)) {
    if (cudaFuncSetAttribute(fn, cudaFuncAttributeMaxDynamicSharedMemorySize, smem_bytes) !=
        cudaSuccess) {
      cudaGetLastError();
      return false;
    }
  }
  done.fetch_or(bit, std::memory_order_acq_rel);
  return true;
}

struct CallKey {
  Operands ops;
  void* workspace;
  int64_t m, n, k;
  int32_t device;

  bool operator==(CallKey const& o) const {
    return ops.a == o.ops.a && ops.w == o.ops.w && ops.a_scale == o.ops.a_scale &&
           ops.w_scale == o.ops.w_scale && ops.bias == o.ops.bias &&
           ops.out_scale_ptr == o.ops.out_scale_ptr &&
           std::memcmp(&ops.out_scale, &o.ops.out_scale, sizeof(float)) == 0 && ops.d == o.ops.d &&
           workspace == o.workspace && m == o.m && n == o.n && k == o.k && device == o.device;
  }
};

// Prepared launch state per kernel type, keyed by call: Buckets x Ways entries, each bucket
// replaced round-robin; a miss only costs a rebuild of the parameters.
template <class Prepared, int Buckets = 16, int Ways = 4>
class PreparedCache {
 public:
  bool find(CallKey const& key, Prepared& out) {
    int b = bucket(key);
    std::lock_guard<std::mutex> guard(mu_);
    for (int i = b * Ways; i < (b + 1) * Ways; ++i) {
      if (used_[i] && keys_[i] == key) {
        out = items_[i];
        return true;
      }
    }
    return false;
  }

  void put(CallKey const& key, Prepared const& item) {
    int b = bucket(key);
    std::lock_guard<std::mutex> guard(mu_);
    int i = b * Ways + next_[b];
    next_[b] = (next_[b] + 1) % Ways;
    keys_[i] = key;
    items_[i] = item;
    used_[i] = true;
  }

 private:
  static int bucket(CallKey const& key) {
    uint64_t h = reinterpret_cast<uintptr_t>(key.ops.a) ^
                 (reinterpret_cast<uintptr_t>(key.ops.w) << 1) ^
                 (reinterpret_cast<uintptr_t>(key.ops.d) << 2) ^
                 (reinterpret_cast<uintptr_t>(key.ops.a_scale) << 3) ^
                 uint64_t(key.m) * 0x9E3779B97F4A7C15ull ^ uint64_t(key.n) << 17 ^
                 uint64_t(key.k) << 29;
    h ^= h >> 31;
    h *= 0xBF58476D1CE4E5B9ull;
    h ^= h >> 29;
    return int(h % Buckets);
  }

  std::mutex mu_;
  CallKey keys_[Buckets * Ways] = {};
  Prepared items_[Buckets * Ways];
  bool used_[Buckets * Ways] = {};
  int next_[Buckets] = {};
};

// N and K multiples of 16: 16-byte rows of int8 A/W (cp.async / TMA) and of an int8 D.
inline bool shape_ok(int64_t m, int64_t n, int64_t k) {
  return m > 0 && n > 0 && k > 0 && n % 16 == 0 && k % 16 == 0 && m <= INT32_MAX &&
         n <= INT32_MAX && k <= INT32_MAX;
}

inline int32_t launch_status() {
  return cudaGetLastError() == cudaSuccess ? kOk : kErrLaunch;
}

}  // namespace oasr_smm
