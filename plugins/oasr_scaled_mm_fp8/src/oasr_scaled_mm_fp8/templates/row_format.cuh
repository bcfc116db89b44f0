__device__ __forceinline__ float row_scale(float amax) {
  const float s = __fdiv_rn(amax, 448.f);
  return s == 0.f ? 1.f : s;
}

// cvt's .satfinite is the clamp: a finite quotient beyond +-448 and an infinity become +-448
// (what the clamp then rounding gives), a NaN stays NaN.
__device__ __forceinline__ uint32_t quantize_pair(float a, float b, float s) {
  return __nv_cvt_float2_to_fp8x2(make_float2(__fdiv_rn(a, s), __fdiv_rn(b, s)),
                                  __NV_SATFINITE, __NV_E4M3);
}
