// oasr_kit/conv: the checks every dense (groups == 1, implicit-GEMM) convolution launch makes.
//
// Included by a family header inside its namespace, after `using namespace oasr_kit;`, the
// family's Geometry, geometry_ok and Act codes, with OASR_CONV_GEMM(g) defined as the m, n, k
// of the implicit GEMM of Geometry* `g` (m = batch * output positions, n = c_out,
// k = c_in * window size). What it declares is the family's; open_call returns an
// oasr_kit::Status.
// No include guard: a family includes it once, inside its own namespace.

// A dense geometry (groups == 1) that is self-consistent: what a workspace query accepts.
inline bool dense_geometry_ok(Geometry const* g) {
  return g != nullptr && g->groups == 1 && geometry_ok(*g, OASR_CONV_GEMM(g));
}

// `p` (null allowed) is aligned to `bytes`.
inline bool aligned_to(const void* p, int64_t bytes) {
  return (reinterpret_cast<uintptr_t>(p) % uintptr_t(bytes)) == 0;
}

// The checks every launch makes before it looks at its kernel: the geometry agrees with the
// call record (groups == 1, a known activation), x and the weight are aligned to `in_bytes`
// and bias and out to `out_bytes` (the vector accesses), and a device is current (`*dev`).
inline int32_t open_call(CallArgs const* c, Geometry const* g, const void* x, const void* w,
                         const void* bias, const void* out, int64_t in_bytes, int64_t out_bytes,
                         int* dev) {
  if (c == nullptr || g == nullptr || g->groups != 1 || c->act < kActNone ||
      c->act > kActSilu || !geometry_ok(*g, c->m, c->n, c->k)) {
    return kErrShape;
  }
  if (!aligned_to(x, in_bytes) || !aligned_to(w, in_bytes) || !aligned_to(bias, out_bytes) ||
      !aligned_to(out, out_bytes)) {
    return kErrShape;
  }
  *dev = current_device();
  return *dev < 0 ? kErrDevice : kOk;
}

#undef OASR_CONV_GEMM
