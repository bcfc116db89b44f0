__device__ __forceinline__ float row_scale(float amax) {
  const float s = __fdiv_rn(amax, 127.f);
  return s > 0.f ? s : 1.f;
}

__device__ __forceinline__ uint32_t quantize_one(float v, float s) {
  const float r = rintf(__fdiv_rn(v, s));
  return uint8_t(static_cast<int8_t>(fminf(fmaxf(r, -127.f), 127.f)));
}

__device__ __forceinline__ uint32_t quantize_pair(float a, float b, float s) {
  return quantize_one(a, s) | (quantize_one(b, s) << 8);
}
