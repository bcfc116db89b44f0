// oasr_conv1d depthwise: direct channels-last depthwise 1-D convolution (groups == C_in == C_out).
//
// out[b, t, c] = act(bias[c] + sum_j w[j, c] * x[b, t * stride - pad + j * dilation, c])
//
// x (batch, t_in, c) and out (batch, t_out, c) are contiguous channels-last; w is packed
// (kernel, c) contiguous; bias (c) or null. One CTA computes a tile of T_TILE = TY * TP output
// steps by C_TILE = CV * VEC channels: CV threads along C, each owning VEC contiguous channels
// (one 4/8/16-byte access per row), TY threads along T, each owning TP consecutive outputs.
// The weight tile (kernel x C_TILE) is staged once per CTA in shared memory as fp32.
//
// kStage (how the input window reaches the FMAs):
//   kStageReg:  each thread reads its rows straight from global memory (read-only path) into
//               registers; the halo other threads of the CTA also read is served by L1.
//   kStageSmem: the CTA first copies its (T_TILE - 1) * stride + (kernel - 1) * dilation + 1
//               input rows x C_TILE channels into shared memory (zero rows for the padding),
//               then every thread reads its rows from there.
// TAPS > 0 fixes kernel = TAPS, stride = 1, dilation = 1 and fully unrolls a register
// sliding window: per tap a thread loads one new row (VEC values) and does TP * VEC FMAs, so
// each input row is loaded and converted once per thread. TAPS == 0 is the general kernel
// (any kernel, stride, dilation): a runtime loop over taps, TP rows read per tap.
// Accumulation and the epilogue act(acc + bias) are fp32; one rounding to the output dtype.
#pragma once

#include <cstdint>

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "oasr_conv1d/geometry.cuh"
#include "oasr_kit/launcher.cuh"

namespace oasr_conv1d {
namespace depthwise {

enum Stage : int { kStageReg = 0, kStageSmem = 1 };

template <class T>
struct Half2;

template <>
struct Half2<__half> {
  static __device__ __forceinline__ float2 unpack(uint32_t v) {
    __half2 h = *reinterpret_cast<__half2*>(&v);
    return __half22float2(h);
  }
  static __device__ __forceinline__ uint32_t pack(float a, float b) {
    __half2 h = __floats2half2_rn(a, b);
    return *reinterpret_cast<uint32_t*>(&h);
  }
  static __device__ __forceinline__ float one(__half v) { return __half2float(v); }
};

template <>
struct Half2<__nv_bfloat16> {
  static __device__ __forceinline__ float2 unpack(uint32_t v) {
    __nv_bfloat162 h = *reinterpret_cast<__nv_bfloat162*>(&v);
    return __bfloat1622float2(h);
  }
  static __device__ __forceinline__ uint32_t pack(float a, float b) {
    __nv_bfloat162 h = __floats2bfloat162_rn(a, b);
    return *reinterpret_cast<uint32_t*>(&h);
  }
  static __device__ __forceinline__ float one(__nv_bfloat16 v) { return __bfloat162float(v); }
};

// VEC 16-bit values as one aligned access (VEC = 2, 4 or 8: 4, 8 or 16 bytes).
template <int VEC>
struct alignas(VEC * 2) Pack {
  uint32_t w[VEC / 2];
};

template <int ACT>
__device__ __forceinline__ float activate(float v) {
  if constexpr (ACT == kActRelu) {
    return fmaxf(v, 0.0f);
  } else if constexpr (ACT == kActGelu) {
    return 0.5f * v * (1.0f + erff(v * 0.70710678118654752f));
  } else if constexpr (ACT == kActSilu) {
    return v / (1.0f + __expf(-v));
  } else {
    return v;
  }
}

struct Params {
  const void* x;
  const void* w;
  const void* bias;
  void* out;
  int64_t t_in, t_out;
  int32_t c, kernel, stride, pad, dilation;
};

__device__ __forceinline__ void grid_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

__device__ __forceinline__ void grid_launch_dependents() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

// The input rows a CTA's tile reads.
__host__ __device__ inline int64_t window_rows(int t_tile, int kernel, int stride, int dilation) {
  return int64_t(t_tile - 1) * stride + int64_t(kernel - 1) * dilation + 1;
}

template <class T, int VEC, int CV, int TY, int TP, int TAPS, int STAGE, int ACT>
__global__ void __launch_bounds__(CV * TY) conv_kernel(Params p) {
  constexpr int C_TILE = CV * VEC;
  constexpr int T_TILE = TY * TP;
  using P = Pack<VEC>;
  using H = Half2<T>;
  extern __shared__ __align__(16) unsigned char smem_raw[];

  const int kernel = TAPS > 0 ? TAPS : p.kernel;
  const int stride = TAPS > 0 ? 1 : p.stride;
  const int dilation = TAPS > 0 ? 1 : p.dilation;
  const int tx = threadIdx.x % CV;
  const int ty = threadIdx.x / CV;
  const int c_block = blockIdx.x * C_TILE;
  const int c = c_block + tx * VEC;
  const bool c_ok = c < p.c;
  const int64_t b = blockIdx.z;
  const int64_t t_block = int64_t(blockIdx.y) * T_TILE;
  const int64_t t0 = t_block + int64_t(ty) * TP;
  const int64_t in_block = t_block * stride - p.pad;  // first input row of the CTA's window

  float* w_s = reinterpret_cast<float*>(smem_raw);  // kernel x C_TILE fp32
  P* x_s = reinterpret_cast<P*>(w_s + kernel * C_TILE);  // window rows x CV packs

  grid_wait();

  const T* w_g = static_cast<const T*>(p.w);
  for (int i = threadIdx.x; i < kernel * C_TILE; i += CV * TY) {
    int j = i / C_TILE, cc = c_block + i % C_TILE;
    w_s[i] = cc < p.c ? H::one(w_g[int64_t(j) * p.c + cc]) : 0.0f;
  }

  const P* x_g = reinterpret_cast<const P*>(static_cast<const T*>(p.x) + b * p.t_in * p.c);
  const int c_packs = p.c / VEC;
  const P zero = {};

  if constexpr (STAGE == kStageSmem) {
    const int64_t rows = window_rows(T_TILE, kernel, stride, dilation);
    for (int64_t i = threadIdx.x; i < rows * CV; i += CV * TY) {
      int64_t r = in_block + i / CV;
      int cc = c_block + int(i % CV) * VEC;
      P v = zero;
      if (cc < p.c && r >= 0 && r < p.t_in) {
        v = x_g[r * c_packs + cc / VEC];
      }
      x_s[i] = v;
    }
  }
  __syncthreads();

  // Row `r` (absolute input time) at this thread's channels, from the staged window or memory.
  auto row = [&](int64_t r) -> P {
    if constexpr (STAGE == kStageSmem) {
      return x_s[(r - in_block) * CV + tx];
    } else {
      if (!c_ok || r < 0 || r >= p.t_in) {
        return zero;
      }
      return x_g[r * c_packs + c / VEC];
    }
  };
  auto unpack = [&](P const& v, float (&f)[VEC]) {
#pragma unroll
    for (int q = 0; q < VEC / 2; ++q) {
      float2 two = H::unpack(v.w[q]);
      f[2 * q] = two.x;
      f[2 * q + 1] = two.y;
    }
  };

  float acc[TP][VEC];
#pragma unroll
  for (int i = 0; i < TP; ++i) {
#pragma unroll
    for (int v = 0; v < VEC; ++v) {
      acc[i][v] = 0.0f;
    }
  }
  const float* w_t = w_s + tx * VEC;

  if constexpr (TAPS > 0) {
    // Sliding window over rows t0 - pad + (i + j): win[(i + j) % TP] holds row i + j.
    float win[TP][VEC];
    const int64_t r0 = t0 - p.pad;
#pragma unroll
    for (int i = 0; i < TP - 1; ++i) {
      unpack(row(r0 + i), win[i]);
    }
#pragma unroll
    for (int j = 0; j < TAPS; ++j) {
      unpack(row(r0 + j + TP - 1), win[(j + TP - 1) % TP]);
      float wj[VEC];
#pragma unroll
      for (int v = 0; v < VEC; ++v) {
        wj[v] = w_t[j * C_TILE + v];
      }
#pragma unroll
      for (int i = 0; i < TP; ++i) {
#pragma unroll
        for (int v = 0; v < VEC; ++v) {
          acc[i][v] = fmaf(wj[v], win[(i + j) % TP][v], acc[i][v]);
        }
      }
    }
  } else {
    const int64_t r0 = t0 * stride - p.pad;
#pragma unroll 2
    for (int j = 0; j < kernel; ++j) {
      float wj[VEC];
#pragma unroll
      for (int v = 0; v < VEC; ++v) {
        wj[v] = w_t[j * C_TILE + v];
      }
      const int64_t rj = r0 + int64_t(j) * dilation;
#pragma unroll
      for (int i = 0; i < TP; ++i) {
        float xf[VEC];
        unpack(row(rj + int64_t(i) * stride), xf);
#pragma unroll
        for (int v = 0; v < VEC; ++v) {
          acc[i][v] = fmaf(wj[v], xf[v], acc[i][v]);
        }
      }
    }
  }

  grid_launch_dependents();
  if (!c_ok) {
    return;
  }
  float bias[VEC];
  const T* bias_g = static_cast<const T*>(p.bias);
#pragma unroll
  for (int v = 0; v < VEC; ++v) {
    bias[v] = bias_g != nullptr ? H::one(bias_g[c + v]) : 0.0f;
  }
  P* out_g = reinterpret_cast<P*>(static_cast<T*>(p.out) + b * p.t_out * p.c);
#pragma unroll
  for (int i = 0; i < TP; ++i) {
    int64_t t = t0 + i;
    if (t < p.t_out) {
      P o;
#pragma unroll
      for (int q = 0; q < VEC / 2; ++q) {
        o.w[q] = H::pack(activate<ACT>(acc[i][2 * q] + bias[2 * q]),
                         activate<ACT>(acc[i][2 * q + 1] + bias[2 * q + 1]));
      }
      out_g[t * c_packs + c / VEC] = o;
    }
  }
}

// One depthwise config: the kernel family above at fixed tile, staging and taps, for the
// element type T (__half or __nv_bfloat16). `run` and `workspace` are the unit's ABI.
template <class T, int VEC, int CV, int TY, int TP, int TAPS, int STAGE>
struct Kernel {
  static_assert(VEC == 2 || VEC == 4 || VEC == 8, "VEC is 2, 4 or 8 16-bit values");
  static_assert(CV * TY >= 32 && CV * TY <= 1024, "32..1024 threads per CTA");
  static constexpr int kThreads = CV * TY;
  static constexpr int kCTile = CV * VEC;
  static constexpr int kTTile = TY * TP;
  static constexpr int kMaxSmem = 96 << 10;
  template <int ACT>
  struct SmemTag {};  // allow_smem's once-per-device flag, one per kernel instantiation

  static int64_t smem_bytes(Geometry const& g) {
    int64_t bytes = int64_t(g.kernel) * kCTile * 4;
    if (STAGE == kStageSmem) {
      bytes += window_rows(kTTile, g.kernel, g.stride, g.dilation) * kCTile * 2;
    }
    return bytes;
  }

  // Whether this config computes `g` (a depthwise geometry it was built for).
  static bool implements(Geometry const& g) {
    if (g.groups != g.c_in || g.c_out != g.c_in || g.c_in % VEC != 0) {
      return false;
    }
    if (TAPS > 0 && (g.kernel != TAPS || g.stride != 1 || g.dilation != 1)) {
      return false;
    }
    if ((g.t_out + kTTile - 1) / kTTile > 65535 || g.batch > 65535) {
      return false;
    }
    return smem_bytes(g) <= kMaxSmem;
  }

  template <int ACT>
  static int32_t launch(Params const& p, Geometry const& g, int32_t flags, cudaStream_t stream) {
    auto fn = conv_kernel<T, VEC, CV, TY, TP, TAPS, STAGE, ACT>;
    int dev = oasr_kit::current_device();
    if (dev < 0) {
      return oasr_kit::kErrDevice;
    }
    int smem = int(smem_bytes(g));
    if (!oasr_kit::allow_smem<SmemTag<ACT>>(reinterpret_cast<const void*>(fn), kMaxSmem, dev)) {
      return oasr_kit::kErrInit;
    }
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = dim3(unsigned((g.c_in + kCTile - 1) / kCTile),
                       unsigned((g.t_out + kTTile - 1) / kTTile), unsigned(g.batch));
    cfg.blockDim = dim3(kThreads);
    cfg.dynamicSmemBytes = size_t(smem);
    cfg.stream = stream;
    cudaLaunchAttribute attr[1];
    if (flags & oasr_kit::kFlagPdl) {
      attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
      attr[0].val.programmaticStreamSerializationAllowed = 1;
      cfg.attrs = attr;
      cfg.numAttrs = 1;
    }
    if (cudaLaunchKernelEx(&cfg, fn, p) != cudaSuccess) {
      cudaGetLastError();
      return oasr_kit::kErrLaunch;
    }
    return oasr_kit::launch_status();
  }

  static int32_t run(const oasr_kit::CallArgs* c, const Geometry* g, const void* x,
                     const void* w, const void* bias, void* out, cudaStream_t stream) {
    if (g == nullptr || !geometry_ok(*g, c->m, c->n, c->k) || !implements(*g)) {
      return oasr_kit::kErrShape;
    }
    constexpr uintptr_t kAlign = VEC * 2;
    if ((reinterpret_cast<uintptr_t>(x) | reinterpret_cast<uintptr_t>(out)) % kAlign != 0 ||
        x == nullptr || w == nullptr || out == nullptr) {
      return oasr_kit::kErrShape;
    }
    Params p{x, w, bias, out, g->t_in, g->t_out, g->c_in, g->kernel, g->stride, g->pad,
             g->dilation};
    switch (c->act) {
      case kActNone: return launch<kActNone>(p, *g, c->flags, stream);
      case kActRelu: return launch<kActRelu>(p, *g, c->flags, stream);
      case kActGelu: return launch<kActGelu>(p, *g, c->flags, stream);
      case kActSilu: return launch<kActSilu>(p, *g, c->flags, stream);
      default: return oasr_kit::kErrShape;
    }
  }

  static int64_t workspace(const Geometry* g) {
    return g != nullptr && implements(*g) ? 0 : -1;
  }
};

}  // namespace depthwise
}  // namespace oasr_conv1d
