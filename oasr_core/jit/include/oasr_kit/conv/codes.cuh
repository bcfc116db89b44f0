// oasr_kit/conv: the call codes and output length every convolution family's ABI shares.
//
// Included by a family's geometry.cuh inside its namespace, after its Geometry record and
// with OASR_CONV_EXTENT_IN defined as the name it gives out_length's input extent (the text
// each family wrote, so its preprocessed units read as before). What it declares is the
// family's: CallArgs::dtype and CallArgs::act codes and torch's output length of one axis.
// No include guard: a family includes it once, inside its own namespace.

// CallArgs::dtype codes.
enum DType : int32_t { kFp16 = 0, kBf16 = 1 };

// CallArgs::act codes: the epilogue act(acc + bias). kGelu is the exact (erf) GELU.
enum Act : int32_t { kActNone = 0, kActRelu = 1, kActGelu = 2, kActSilu = 3 };

// torch's output length along one axis (floor division; <= 0 when the window does not fit).
inline int64_t out_length(int64_t OASR_CONV_EXTENT_IN, int32_t kernel, int32_t stride,
                          int32_t pad, int32_t dilation) {
  int64_t span = int64_t(dilation) * (kernel - 1) + 1;
  int64_t padded = OASR_CONV_EXTENT_IN + 2 * int64_t(pad);
  return padded < span ? 0 : (padded - span) / stride + 1;
}

#undef OASR_CONV_EXTENT_IN
