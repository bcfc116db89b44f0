// oasr_scaled_mm_fp8: pieces shared by both lanes' generated translation units.
//
// The C ABI every unit exports (codegen.py writes the two functions per unit; the call record,
// status codes and parameter cache are the kit's, oasr_kit/launcher.cuh):
//
//   int32_t <sym>(const oasr_kit::CallArgs* call, const void* a, const void* w,
//                 const void* a_scale, const void* w_scale, const void* bias,
//                 const void* out_scale_ptr, float out_scale, void* d, void* stream);
//   int64_t <sym>_workspace(int64_t m, int64_t n, int64_t k, int32_t out_dtype);
//
// A [M, K] and W [N, K] fp8 e4m3 row-major (nn.Linear layout), a_scale float32 [M], w_scale
// float32 [N], bias float32 [N] or nullptr. The tensor cores accumulate the fp8 products in
// fp32 (at reduced precision under the fast-accumulation schedules); then, per element, one
// fp32 op each, in this order (units compile with --fmad=false):
//
//   v = ((acc * a_scale[m]) * w_scale[n]) + bias_or_0[n]
//   D = out_dtype(v)                        scaled_mm_fp8: bf16/fp16, round to nearest even
//   D = e4m3(v / out_scale)                 scaled_mm_fp8_quant: IEEE division, then
//                                           cvt.rn.satfinite: |x| > 448 (and +-inf) saturate to
//                                           +-448, NaN stays NaN
//
// out_scale is read from `out_scale_ptr` (a device float32) when it is not null, else the
// value `out_scale` is used. The call key of the prepared parameters holds every pointer and
// out_scale's bits.
#pragma once

#include <cstdint>
#include <cstring>

#include "cutlass/cutlass.h"
#include "cutlass/float8.h"
#include "cutlass/numeric_types.h"
#include "oasr_kit/launcher.cuh"

namespace oasr_fp8 {

using namespace oasr_kit;

using E4M3 = cutlass::float_e4m3_t;

enum OutDtype : int32_t { kFloat16 = 0, kBFloat16 = 1, kFp8 = 2 };

// Operands, call_key, shape_ok and run_call: the W8A8 code base's, one text for every
// format.
#include "oasr_w8a8/launch.cuh"

}  // namespace oasr_fp8
