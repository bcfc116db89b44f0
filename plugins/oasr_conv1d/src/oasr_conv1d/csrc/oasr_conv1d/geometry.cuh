// oasr_conv1d: the kernel ABI every conv1d unit (dense or depthwise) shares.
//
// A unit exports, beside the kit's call record (oasr_kit/launcher.cuh):
//
//   OASR_EXPORT int32_t <symbol>(const oasr_kit::CallArgs* call, const oasr_conv1d::Geometry* geo,
//                                const void* x, const void* w, const void* bias, void* out,
//                                cudaStream_t stream);
//   OASR_EXPORT int64_t <symbol>_workspace(const oasr_conv1d::Geometry* geo, int32_t dtype);
//
// Operands are in the engine's channels-last layout: x (batch, t_in, c_in) and out
// (batch, t_out, c_out), both contiguous; bias (c_out) in x's dtype or null. The weight is
// packed by the Python side once per layer: dense units take (c_out, kernel, c_in / groups)
// contiguous (oasr_conv1d.dense documents it), depthwise units (kernel, c) contiguous.
// call->m = batch * t_out, call->n = c_out, call->k = c_in / groups * kernel; call->dtype is
// a DType code, call->act an Act code; call->flags may carry oasr_kit::kFlagPdl. Kernels
// accumulate in fp32 and apply act(acc + bias) in fp32 before the one rounding to x's dtype.
// The return value is an oasr_kit::Status; the workspace query returns scratch bytes (-1 for
// a dtype not compiled in or a geometry the unit cannot run).
//
// The Python mirror is oasr_conv1d.geometry (ctypes, field by field): change both together.
#pragma once

#include <cstdint>

namespace oasr_conv1d {

// One convolution call's geometry. `reserved` is zero (keeps the record 8-byte aligned and
// leaves room for one more field without changing the size).
struct Geometry {
  int64_t batch, t_in, t_out;
  int32_t c_in, c_out, kernel, stride, pad, dilation, groups, reserved;
};

static_assert(sizeof(Geometry) == 56, "oasr_conv1d::Geometry is mirrored by ctypes: 56 bytes");
static_assert(alignof(Geometry) == 8, "oasr_conv1d::Geometry is 8-byte aligned");

// DType and Act codes, out_length (oasr_kit/conv/codes.cuh).
#define OASR_CONV_EXTENT_IN t_in
#include "oasr_kit/conv/codes.cuh"

// The geometry is self-consistent: positive sizes, t_out matches torch's formula, channels
// divide by groups, and the call record agrees (m = batch * t_out, n = c_out,
// k = c_in / groups * kernel).
inline bool geometry_ok(Geometry const& g, int64_t m, int64_t n, int64_t k) {
  if (g.batch <= 0 || g.t_in <= 0 || g.c_in <= 0 || g.c_out <= 0 || g.kernel <= 0 ||
      g.stride <= 0 || g.pad < 0 || g.dilation <= 0 || g.groups <= 0) {
    return false;
  }
  if (g.c_in % g.groups != 0 || g.c_out % g.groups != 0) {
    return false;
  }
  if (g.t_out <= 0 || g.t_out != out_length(g.t_in, g.kernel, g.stride, g.pad, g.dilation)) {
    return false;
  }
  if (g.batch * g.t_out > INT32_MAX || g.batch * g.t_in * g.c_in > (int64_t(1) << 40)) {
    return false;
  }
  return m == g.batch * g.t_out && n == g.c_out && k == int64_t(g.c_in / g.groups) * g.kernel;
}

}  // namespace oasr_conv1d
