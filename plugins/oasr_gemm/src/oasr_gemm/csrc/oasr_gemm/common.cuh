// oasr_gemm: pieces shared by both lanes' generated translation units.
//
// The C ABI every unit exports (codegen.py writes the two functions per compiled config):
//
//   int32_t <sym>(const oasr_gemm::CallArgs* call, const void* a, const void* w,
//                 const void* bias, void* d, void* stream);
//   int64_t <sym>_workspace(int64_t m, int64_t n, int64_t k, int32_t dtype, int32_t split_k,
//                           int64_t* semaphore_bytes);
//
// D[m, n] = act(sum_k A[m, k] * W[n, k] + bias[n]); A, W, D row-major and contiguous, bias
// optional (nullptr). `call` holds what is fixed per shape (sizes, dtype and activation codes,
// split-K factor, launch flags, workspace): the caller prepares it once and passes its address, so a launch
// crosses the FFI with six pointer-sized arguments. `workspace` is scratch (any content);
// `semaphores` must be zero on entry and is zero again when the kernel completes (serial
// split-K locks), so one zeroed buffer serves every call without a memset on the launch path.
// The launcher returns a Status; the workspace query returns the scratch bytes (-1: dtype not
// compiled in, bad shape or no device) and writes the zeroed semaphore bytes.
//
// Launch parameters are prepared once per call key (shape, pointers, device, workspace) and
// cached: a repeated call with the same tensors costs a table probe and the launch. Pointers
// are part of the key because Hopper TMA descriptors embed them: a call with new pointers at a
// known shape builds fresh parameters and can never run with stale ones.
#pragma once

#include <atomic>
#include <cstdint>
#include <mutex>

#include <cuda_runtime.h>

#include "cutlass/array.h"
#include "cutlass/cutlass.h"
#include "cutlass/numeric_types.h"

#ifndef OASR_EXPORT
#define OASR_EXPORT extern "C" __attribute__((visibility("default")))
#endif

namespace oasr_gemm {

enum Status : int32_t {
  kOk = 0,
  kErrDtype = 1,       // dtype code not compiled into this unit
  kErrShape = 2,       // the kernel cannot implement this shape / alignment
  kErrSplit = 3,       // split-K factor not valid for this kernel
  kErrWorkspace = 4,   // workspace or semaphore buffer too small
  kErrInit = 5,        // parameter preparation or function attributes failed
  kErrLaunch = 6,      // the launch itself failed (cudaGetLastError after launch)
  kErrDevice = 7,      // no current CUDA device
};

enum Dtype : int32_t { kFloat16 = 0, kBFloat16 = 1 };

// What a caller fixes per call shape (mirrored field by field by oasr_gemm.launch.CallArgs).
struct CallArgs {
  int64_t m, n, k;
  int32_t dtype, act, split, flags;
  void* workspace;
  int64_t workspace_bytes;
  void* semaphores;
  int64_t semaphore_bytes;
};
// CallArgs::flags bits. kFlagPdl: launch with programmatic dependent launch (3.x kernels;
// the 2.x kernels have no grid-dependency instructions and ignore it). kFlagFused: a 3.x call
// without bias and activation runs the fused-epilogue kernel instead of the plain one (to
// compare the two; the 2.x lane has one epilogue and ignores it).
enum Flag : int32_t { kFlagPdl = 1, kFlagFused = 2 };
enum Act : int32_t { kIdentity = 0, kRelu = 1, kGelu = 2, kSilu = 3 };

// torch semantics: relu keeps NaN, gelu is the exact (erf) form, silu is x * sigmoid(x).
// On the device silu uses the hardware exp2 and reciprocal (__expf, __fdividef): a few fp32 ulp,
// invisible after rounding to fp16/bf16, and far fewer instructions than IEEE expf and division
// in an epilogue that has only the consumer warps to run it.
CUTLASS_HOST_DEVICE float silu(float x) {
#if defined(__CUDA_ARCH__)
  return __fdividef(x, 1.f + __expf(-x));
#else
  return x / (1.f + expf(-x));
#endif
}

CUTLASS_HOST_DEVICE float gelu(float x) { return 0.5f * x * (1.f + erff(x * 0.7071067811865476f)); }

CUTLASS_HOST_DEVICE float relu(float x) { return x < 0.f ? 0.f : x; }

CUTLASS_HOST_DEVICE float apply_act(float x, int kind) {
  switch (kind) {
    case kRelu: return relu(x);
    case kGelu: return gelu(x);
    case kSilu: return silu(x);
    default: return x;
  }
}

struct ActArgs {
  int kind = kIdentity;
};

// An activation chosen at run time, so one kernel per dtype serves gemm and every
// gemm_activation. It follows CUTLASS's "activation with Arguments" convention, which both the
// 2.x LinearCombinationGeneric and the 3.x Sm90Compute epilogue node understand.
template <class T>
struct RuntimeAct {
  static const bool kIsHeavy = true;
  using Arguments = ActArgs;
  CUTLASS_HOST_DEVICE T operator()(T const& x, Arguments const& args = Arguments()) const {
    return T(apply_act(float(x), args.kind));
  }
};

template <float (*F)(float), class T, int N>
CUTLASS_HOST_DEVICE void map(cutlass::Array<T, N> const& x, cutlass::Array<T, N>& y) {
  CUTLASS_PRAGMA_UNROLL
  for (int i = 0; i < N; ++i) {
    y[i] = T(F(float(x[i])));
  }
}

template <class T, int N>
struct RuntimeAct<cutlass::Array<T, N>> {
  static const bool kIsHeavy = true;
  using Arguments = ActArgs;
  CUTLASS_HOST_DEVICE cutlass::Array<T, N> operator()(cutlass::Array<T, N> const& x,
                                                      Arguments const& args = Arguments()) const {
    // One switch per fragment, then a branch-free unrolled loop per activation.
    cutlass::Array<T, N> y;
    switch (args.kind) {
      case kRelu: map<relu>(x, y); break;
      case kGelu: map<gelu>(x, y); break;
      case kSilu: map<silu>(x, y); break;
      default: return x;
    }
    return y;
  }
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

// Raise a kernel's dynamic shared memory limit once per device (per kernel type: the static
// lives in the template instantiation).
template <class Tag>
inline bool ensure_smem_attribute(const void* fn, int smem_bytes, int dev) {
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
  const void* a;
  const void* w;
  const void* bias;
  void* d;
  void* workspace;
  void* semaphores;
  int64_t m, n, k;
  int32_t act, split, device;

  bool operator==(CallKey const& o) const {
    return a == o.a && w == o.w && bias == o.bias && d == o.d && workspace == o.workspace &&
           semaphores == o.semaphores && m == o.m && n == o.n && k == o.k && act == o.act &&
           split == o.split && device == o.device;
  }
};

// Prepared launch state per kernel, keyed by call: 16 buckets of 4 ways (64 calls), each
// bucket replaced round-robin. Layers of one width share a kernel with distinct weights, so a
// model's steady state keeps many keys alive at once; a miss only costs a rebuild.
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
  static int bucket(CallKey const& k) {
    uint64_t h = reinterpret_cast<uintptr_t>(k.a) ^ (reinterpret_cast<uintptr_t>(k.w) << 1) ^
                 (reinterpret_cast<uintptr_t>(k.d) << 2) ^ uint64_t(k.m) * 0x9E3779B97F4A7C15ull ^
                 uint64_t(k.n) << 17 ^ uint64_t(k.k) << 29 ^ uint64_t(k.act) << 7;
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

inline int32_t launch_status() {
  return cudaGetLastError() == cudaSuccess ? kOk : kErrLaunch;
}

inline bool shape_ok(int64_t m, int64_t n, int64_t k) {
  return m > 0 && n > 0 && k > 0 && n % 8 == 0 && k % 8 == 0 && m <= INT32_MAX &&
         n <= INT32_MAX && k <= INT32_MAX;
}

}  // namespace oasr_gemm
