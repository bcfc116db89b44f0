// oasr_kit/conv: the call key of a dense convolution launch's prepared parameters.
//
// Included by a family header inside its namespace, after `using namespace oasr_kit;` and its
// Geometry, with two macros defined: OASR_CONV_KEY_WINDOW(key, g) assigns key.ptr[4..7], the
// geometry words m, n, k alone do not fix (batch, the input extents, the window) from
// Geometry `g`; OASR_CONV_KEY_LOCALS declares what those assignments use (may be empty).
// The key holds the four operand pointers, those words, m, n, k, the activation, c_in and the
// device. No include guard: a family includes it once, inside its own namespace.

inline CallKey call_key(CallArgs const& c, Geometry const& g, const void* x, const void* w,
                        const void* bias, void* out, int32_t dev) {
  OASR_CONV_KEY_LOCALS
  CallKey key;
  key.ptr[0] = x;
  key.ptr[1] = w;
  key.ptr[2] = bias;
  key.ptr[3] = out;
  OASR_CONV_KEY_WINDOW(key, g)
  key.m = c.m;
  key.n = c.n;
  key.k = c.k;
  key.arg[0] = c.act;
  key.arg[1] = g.c_in;
  key.device = dev;
  return key;
}

#undef OASR_CONV_KEY_LOCALS
#undef OASR_CONV_KEY_WINDOW
