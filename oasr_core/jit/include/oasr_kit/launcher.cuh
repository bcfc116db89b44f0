// oasr_kit: the C-ABI launcher pieces every kernel family's generated units share.
//
// A family's unit exports two `extern "C"` functions (OASR_EXPORT, hidden visibility for the
// rest): a launcher taking `const oasr_kit::CallArgs*`, the family's operand pointers and a
// `cudaStream_t`, returning a Status; and a workspace query returning the scratch bytes a
// shape needs (-1: dtype not compiled in, bad shape or no device). CallArgs holds what the
// caller fixes per call shape and prepares once (mirrored by oasr_core.jit.kit.CallArgs), so a
// launch crosses the FFI with a handful of pointer-sized arguments.
//
// Launch parameters are prepared once per call key (shape, every pointer, device, workspace)
// and kept in a PreparedCache: a repeated call with the same tensors costs a table probe and
// the launch. Pointers are part of the key because Hopper TMA descriptors embed them: a call
// with new pointers at a known shape builds fresh parameters and never runs with stale ones.
//
// The core adds this directory to every JIT module's include path (oasr_core.jit.spec), so a
// unit writes `#include "oasr_kit/launcher.cuh"`; lane-generation helpers are in
// oasr_kit/sm80.cuh (CUTLASS 2.x) and oasr_kit/sm90.cuh (CUTLASS 3.x).
#pragma once

#include <atomic>
#include <cstdint>
#include <mutex>

#include <cuda_runtime.h>

#ifndef OASR_EXPORT
#define OASR_EXPORT extern "C" __attribute__((visibility("default")))
#endif

namespace oasr_kit {

// Launcher return codes (named for users by oasr_core.jit.kit.STATUS).
enum Status : int32_t {
  kOk = 0,
  kErrDtype = 1,      // dtype code not compiled into this unit
  kErrShape = 2,      // the kernel cannot implement this shape / alignment
  kErrSplit = 3,      // split-K factor not valid for this kernel
  kErrWorkspace = 4,  // workspace or semaphore buffer too small
  kErrInit = 5,       // parameter preparation or function attributes failed
  kErrLaunch = 6,     // the launch itself failed (cudaGetLastError after launch)
  kErrDevice = 7,     // no current CUDA device
};

// What a caller fixes per call shape. `dtype` is the unit's dtype code (the output dtype for
// scaled GEMMs); `act` and `split` are the activation code and split-K factor where a family
// has them (0 and 1 otherwise). `workspace` is scratch (any content); `semaphores` must be
// zero on entry and is zero again when the kernel completes, so one zeroed buffer serves every
// call without a memset on the launch path.
struct CallArgs {
  int64_t m, n, k;
  int32_t dtype, act, split, flags;
  void* workspace;
  int64_t workspace_bytes;
  void* semaphores;
  int64_t semaphore_bytes;
};

// CallArgs::flags bits the kit defines; a family's own bits start at kFlagFamily.
// kFlagPdl: launch with programmatic dependent launch (kernels built with grid-dependency
// control; others ignore it).
enum Flag : int32_t { kFlagPdl = 1, kFlagFamily = 2 };

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

// Raise a kernel's dynamic shared memory limit once per device (Tag makes the flag per kernel
// type: the static lives in the template instantiation).
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

inline int32_t launch_status() {
  return cudaGetLastError() == cudaSuccess ? kOk : kErrLaunch;
}

// Positive sizes that fit int32, N and K multiples of `align` (elements per 16-byte access).
inline bool shape_ok(int64_t m, int64_t n, int64_t k, int64_t align) {
  return m > 0 && n > 0 && k > 0 && n % align == 0 && k % align == 0 && m <= INT32_MAX &&
         n <= INT32_MAX && k <= INT32_MAX;
}

// The identity of one call: every pointer the prepared parameters embed, the sizes, the
// family's small integer arguments (activation, split, a scalar's bits) and the device.
struct CallKey {
  static constexpr int kPointers = 8;
  static constexpr int kInts = 3;
  const void* ptr[kPointers] = {};
  int64_t m = 0, n = 0, k = 0;
  int32_t arg[kInts] = {};
  int32_t device = -1;

  bool operator==(CallKey const& o) const {
    for (int i = 0; i < kPointers; ++i) {
      if (ptr[i] != o.ptr[i]) {
        return false;
      }
    }
    for (int i = 0; i < kInts; ++i) {
      if (arg[i] != o.arg[i]) {
        return false;
      }
    }
    return m == o.m && n == o.n && k == o.k && device == o.device;
  }

  uint64_t hash() const {
    uint64_t h = uint64_t(m) * 0x9E3779B97F4A7C15ull ^ uint64_t(n) << 17 ^ uint64_t(k) << 29;
    for (int i = 0; i < kPointers; ++i) {
      h ^= reinterpret_cast<uintptr_t>(ptr[i]) << i;
    }
    for (int i = 0; i < kInts; ++i) {
      h ^= uint64_t(uint32_t(arg[i])) << (7 + 8 * i);
    }
    h ^= h >> 31;
    h *= 0xBF58476D1CE4E5B9ull;
    h ^= h >> 29;
    return h;
  }
};

// Prepared launch state per kernel type, keyed by call: Buckets x Ways entries, each bucket
// replaced round-robin. Layers of one width share a kernel with distinct weights, so a model's
// steady state keeps many keys alive at once; a miss only costs a rebuild.
template <class Prepared, int Buckets = 16, int Ways = 4>
class PreparedCache {
 public:
  bool find(CallKey const& key, Prepared& out) {
    int b = int(key.hash() % Buckets);
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
    int b = int(key.hash() % Buckets);
    std::lock_guard<std::mutex> guard(mu_);
    int i = b * Ways + next_[b];
    next_[b] = (next_[b] + 1) % Ways;
    keys_[i] = key;
    items_[i] = item;
    used_[i] = true;
  }

 private:
  std::mutex mu_;
  CallKey keys_[Buckets * Ways] = {};
  Prepared items_[Buckets * Ways];
  bool used_[Buckets * Ways] = {};
  int next_[Buckets] = {};
};

// The prepare-once, launch-every-time path of a launcher: `prepare(Prepared&)` returns a
// Status and runs only when `key` is not in `cache` (the caller's static, one per kernel
// type); `launch(Prepared&)` runs on every call with a copy of the prepared state (CUTLASS's
// launch entry points take their parameters by non-const reference).
template <class Prepared, int Buckets, int Ways, class Prepare, class Launch>
inline int32_t run_prepared(PreparedCache<Prepared, Buckets, Ways>& cache, CallKey const& key,
                            Prepare&& prepare, Launch&& launch) {
  Prepared prep;
  if (!cache.find(key, prep)) {
    int32_t status = prepare(prep);
    if (status != kOk) {
      return status;
    }
    cache.put(key, prep);
  }
  return launch(prep);
}

}  // namespace oasr_kit
