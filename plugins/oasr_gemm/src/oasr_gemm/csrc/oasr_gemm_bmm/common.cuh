// oasr_gemm op bmm: what both lanes' batched units share.
//
// The C ABI every bmm unit exports (codegen.py writes the two functions per compiled config
// and layout):
//
//   int32_t <sym>(const oasr_kit::CallArgs* call, const void* a, const void* b, void* d,
//                 int64_t batch, void* stream);
//   int64_t <sym>_workspace(int64_t m, int64_t n, int64_t k, int64_t batch, int32_t dtype);
//
// D[l] = A[l] * B[l] for l < batch, fp32 accumulation rounded once, no bias, no activation:
// A [batch, m, k] row-major and contiguous, D [batch, m, n] row-major and contiguous, and B
// in one of two layouts, fixed per unit:
//   kTN: B is [batch, n, k] row-major (torch's b is its transposed view, Q K^T): each batch is
//        the gemm lanes' W, so the kernels are theirs with a batch mode;
//   kNN: B is [batch, k, n] row-major (probs @ V): the B operand is N-major.
// call->m is the per-batch M; call->split is 1 and call->act 0 (no split-K, no epilogue op).
// The workspace query returns the scratch bytes (-1: dtype not compiled in, bad shape or no
// device).
//
// These headers sit outside csrc/oasr_gemm/ and include its headers without changing them, so
// the units of the other ops keep their text and object keys.
#pragma once

#include <cstdint>

#include "oasr_gemm/common.cuh"

namespace oasr_gemm {
namespace bmm {

enum Layout : int { kTN = 0, kNN = 1 };

// Positive sizes within int32, N and K multiples of 8 (16-byte rows of A, B and D in either
// layout), a batch count within int32 (CUTLASS's batch coordinate).
inline bool shape_ok(int64_t batch, int64_t m, int64_t n, int64_t k) {
  return oasr_gemm::shape_ok(m, n, k) && batch > 0 && batch <= INT32_MAX;
}

// The call key of one batched launch: pointers, sizes, batch count, device.
inline CallKey call_key(const void* a, const void* b, void* d, void* ws, int64_t batch,
                        int64_t m, int64_t n, int64_t k, int32_t dev) {
  CallKey key = oasr_gemm::call_key(a, b, nullptr, d, ws, nullptr, m, n, k, kIdentity, 1, dev);
  key.arg[2] = int32_t(batch);
  return key;
}

}  // namespace bmm
}  // namespace oasr_gemm
