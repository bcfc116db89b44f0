// oasr_conv1d dense: what both implicit-GEMM lanes' units share.
//
// A dense conv1d (groups == 1) is the implicit GEMM D[m, n] = sum_k X'[m, k] * W[n, k] with
// m = batch * t_out, n = c_out, k = kernel * c_in, where row m of X' gathers the window of
// x (batch, t_in, c_in) that output step m reads (zeros where it hangs over the padding), and
// W is the weight packed (c_out, kernel, c_in): CUTLASS's KRSC filter with R = 1. No im2col
// buffer exists; the kernels' iterators compute the gather addresses.
//
// The epilogue is act(acc + bias) in fp32 with the activation chosen at run time (one kernel
// per dtype serves conv1d and every conv1d_<act>), built from CUTLASS's own activation
// functors; a null bias is skipped without a load.
#pragma once

#include <cstdint>

#include "cutlass/array.h"
#include "cutlass/cutlass.h"
#include "cutlass/epilogue/thread/activation.h"
#include "cutlass/numeric_types.h"
#include "oasr_conv1d/geometry.cuh"
#include "oasr_kit/launcher.cuh"

namespace oasr_conv1d {
namespace dense {

using namespace oasr_kit;

// The run-time activation of the epilogue: ActArgs, ActOf (oasr_kit/conv/activation.cuh).
#include "oasr_kit/conv/activation.cuh"

// dense_geometry_ok, aligned_to, open_call (oasr_kit/conv/dense.cuh) over the implicit GEMM
// m = batch * t_out, n = c_out, k = c_in * kernel.
#define OASR_CONV_GEMM(g) g->batch * g->t_out, g->c_out, int64_t(g->c_in) * g->kernel
#include "oasr_kit/conv/dense.cuh"

// The call key (oasr_kit/conv/call_key.cuh): batch, t_in and the window in the spare pointer
// slots (stride and pad, dilation and kernel two to a word).
#define OASR_CONV_KEY_LOCALS \
  auto word = [](int64_t v) { return reinterpret_cast<const void*>(uintptr_t(v)); };
#define OASR_CONV_KEY_WINDOW(key, g)                                      \
  key.ptr[4] = word(g.batch);                                             \
  key.ptr[5] = word(g.t_in);                                              \
  key.ptr[6] = word(int64_t(g.stride) << 32 | uint32_t(g.pad));           \
  key.ptr[7] = word(int64_t(g.dilation) << 32 | uint32_t(g.kernel));
#include "oasr_kit/conv/call_key.cuh"

}  // namespace dense
}  // namespace oasr_conv1d
