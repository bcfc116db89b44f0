// oasr_conv2d: the kernel ABI every conv2d unit shares.
//
// A unit exports, beside the kit's call record (oasr_kit/launcher.cuh):
//
//   OASR_EXPORT int32_t <symbol>(const oasr_kit::CallArgs* call, const oasr_conv2d::Geometry* geo,
//                                const void* x, const void* w, const void* bias, void* out,
//                                void* stream);
//   OASR_EXPORT int64_t <symbol>_workspace(const oasr_conv2d::Geometry* geo, int32_t dtype);
//
// Operands are NHWC: x (batch, h_in, w_in, c_in) and out (batch, h_out, w_out, c_out), both
// contiguous; bias (c_out) in x's dtype or null. The weight is packed by the Python side once
// per layer as (c_out, kh, kw, c_in) contiguous (CUTLASS's KRSC filter). call->m = batch *
// h_out * w_out, call->n = c_out, call->k = c_in / groups * kh * kw; call->dtype is a DType
// code, call->act an Act code. Kernels accumulate in fp32 and apply act(acc + bias) in fp32
// before the one rounding to x's dtype. The return value is an oasr_kit::Status; the workspace
// query returns scratch bytes (-1 for a dtype not compiled in or a geometry the unit cannot
// run).
//
// The Python mirror is oasr_conv2d.geometry (ctypes, field by field): change both together.
#pragma once

#include <cstdint>

namespace oasr_conv2d {

// One convolution call's geometry (H is the time axis of a speech front end, W the feature
// axis). `reserved` is zero (keeps the record 8-byte aligned).
struct Geometry {
  int64_t batch, h_in, w_in, h_out, w_out;
  int32_t c_in, c_out, kh, kw, sh, sw, ph, pw, dh, dw, groups, reserved;
};

static_assert(sizeof(Geometry) == 88, "oasr_conv2d::Geometry is mirrored by ctypes: 88 bytes");
static_assert(alignof(Geometry) == 8, "oasr_conv2d::Geometry is 8-byte aligned");

// DType and Act codes, out_length (oasr_kit/conv/codes.cuh).
#define OASR_CONV_EXTENT_IN n_in
#include "oasr_kit/conv/codes.cuh"

// The geometry is self-consistent: positive sizes, h_out and w_out match torch's formula,
// channels divide by groups, and the call record agrees (m = batch * h_out * w_out,
// n = c_out, k = c_in / groups * kh * kw).
inline bool geometry_ok(Geometry const& g, int64_t m, int64_t n, int64_t k) {
  if (g.batch <= 0 || g.h_in <= 0 || g.w_in <= 0 || g.c_in <= 0 || g.c_out <= 0 ||
      g.kh <= 0 || g.kw <= 0 || g.sh <= 0 || g.sw <= 0 || g.ph < 0 || g.pw < 0 ||
      g.dh <= 0 || g.dw <= 0 || g.groups <= 0) {
    return false;
  }
  if (g.c_in % g.groups != 0 || g.c_out % g.groups != 0) {
    return false;
  }
  if (g.h_out <= 0 || g.h_out != out_length(g.h_in, g.kh, g.sh, g.ph, g.dh) || g.w_out <= 0 ||
      g.w_out != out_length(g.w_in, g.kw, g.sw, g.pw, g.dw)) {
    return false;
  }
  // CUTLASS's 2.x conv problem size holds int extents.
  if (g.batch > INT32_MAX || g.h_in > INT32_MAX || g.w_in > INT32_MAX ||
      g.batch * g.h_out * g.w_out > INT32_MAX) {
    return false;
  }
  return m == g.batch * g.h_out * g.w_out && n == g.c_out &&
         k == int64_t(g.c_in / g.groups) * g.kh * g.kw;
}

}  // namespace oasr_conv2d
