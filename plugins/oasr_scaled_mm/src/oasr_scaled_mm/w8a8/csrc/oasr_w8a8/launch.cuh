// oasr_w8a8: the launch pieces of every W8A8 format (int8, fp8 e4m3), written once.
//
// Included by a family's common.cuh inside its namespace (oasr_smm, oasr_fp8), after its
// `using namespace oasr_kit;`, element type and OutDtype codes; what it declares is the
// family's: the tensors of one call (Operands), the call key of its prepared parameters, the
// shape check and the launcher body both lanes' kernels run. Nothing here names a format, so
// the preprocessed units of either family read as they did when each wrote this itself.

// The tensors of one call.
struct Operands {
  const void* a;
  const void* w;
  const float* a_scale;
  const float* w_scale;
  const float* bias;
  const float* out_scale_ptr;
  float out_scale;
  void* d;
};

// The call key of one launch: every operand pointer, out_scale's bits, workspace, device.
inline CallKey call_key(Operands const& o, CallArgs const& c, int32_t dev) {
  CallKey key;
  key.ptr[0] = o.a;
  key.ptr[1] = o.w;
  key.ptr[2] = o.a_scale;
  key.ptr[3] = o.w_scale;
  key.ptr[4] = o.bias;
  key.ptr[5] = o.out_scale_ptr;
  key.ptr[6] = o.d;
  key.ptr[7] = c.workspace;
  std::memcpy(&key.arg[0], &o.out_scale, sizeof(float));
  key.m = c.m;
  key.n = c.n;
  key.k = c.k;
  key.device = dev;
  return key;
}

// N and K multiples of 16: 16-byte rows of the 8-bit A/W (cp.async / TMA) and of an 8-bit D.
inline bool shape_ok(int64_t m, int64_t n, int64_t k) {
  return oasr_kit::shape_ok(m, n, k, 16);
}

// The launcher body of both lanes: the shape and device checks, then the kit's prepare-once /
// launch-every-time path over Kernel::prepare(prep, o, c, dev) and Kernel::launch(prep, c,
// stream), with one parameter cache per kernel type.
template <class Kernel>
inline int32_t run_call(Operands const& o, CallArgs const& c, cudaStream_t stream) {
  static oasr_kit::PreparedCache<typename Kernel::Prepared> cache;
  if (!shape_ok(c.m, c.n, c.k)) {
    return kErrShape;
  }
  int dev = current_device();
  if (dev < 0) {
    return kErrDevice;
  }
  return oasr_kit::run_prepared(
      cache, call_key(o, c, dev),
      [&](typename Kernel::Prepared& prep) { return Kernel::prepare(prep, o, c, dev); },
      [&](typename Kernel::Prepared& prep) { return Kernel::launch(prep, c, stream); });
}
