// oasr_scaled_mm: pieces shared by both lanes' generated translation units.
//
// The C ABI every unit exports (codegen.py writes the two functions per unit; the call record,
// status codes and parameter cache are the kit's, oasr_kit/launcher.cuh):
//
//   int32_t <sym>(const oasr_kit::CallArgs* call, const void* a, const void* w,
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
// value `out_scale` is used. `call` holds what is fixed per shape (its `dtype` is the output
// dtype code); the launcher returns a Status; the workspace query returns scratch bytes (-1:
// dtype not compiled in, bad shape, no device). The call key of the prepared parameters holds
// every pointer and out_scale's bits.
#pragma once

#include <cstdint>
#include <cstring>

#include "cutlass/cutlass.h"
#include "cutlass/numeric_types.h"
#include "oasr_kit/launcher.cuh"

namespace oasr_smm {

using namespace oasr_kit;

enum OutDtype : int32_t { kFloat16 = 0, kBFloat16 = 1, kInt8 = 2 };

// Operands, call_key, shape_ok and run_call: the W8A8 code base's, one text for every
// format.
#include "oasr_w8a8/launch.cuh"

}  // namespace oasr_smm
