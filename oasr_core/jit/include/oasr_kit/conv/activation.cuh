// oasr_kit/conv: the run-time activation of the convolution families' CUTLASS epilogues.
//
// Included by a family header inside its namespace, after cutlass/array.h,
// cutlass/epilogue/thread/activation.h and the family's Act codes (oasr_kit/conv/codes.cuh).
// The epilogue is act(acc + bias) in fp32 with the activation chosen at run time, so one
// kernel per dtype serves the plain op and every <op>_<act>. It follows CUTLASS's "activation
// with Arguments" convention (LinearCombinationGeneric passes its Params, which derive from
// Arguments; the 3.x Sm90Compute node passes Arguments): the activation code is read once per
// fragment, then one of CUTLASS's functors runs over it. cutlass::epilogue::thread::GELU is
// the erf form and ReLu propagates NaN, as torch does.
// No include guard: a family includes it once, inside its own namespace.

struct ActArgs {
  int32_t act = kActNone;
};

template <class T>
struct ActOf {
  static const bool kIsHeavy = true;
  using Arguments = ActArgs;
  CUTLASS_HOST_DEVICE T operator()(T const& x, Arguments const& args = Arguments()) const {
    switch (args.act) {
      case kActRelu: return cutlass::epilogue::thread::ReLu<T>{}(x);
      case kActGelu: return cutlass::epilogue::thread::GELU<T>{}(x);
      case kActSilu: return cutlass::epilogue::thread::SiLu<T>{}(x);
      default: return x;
    }
  }
};

template <class T, int N>
struct ActOf<cutlass::Array<T, N>> {
  static const bool kIsHeavy = true;
  using Arguments = ActArgs;
  using Frag = cutlass::Array<T, N>;
  CUTLASS_HOST_DEVICE Frag operator()(Frag const& x, Arguments const& args = Arguments()) const {
    switch (args.act) {
      case kActRelu: return cutlass::epilogue::thread::ReLu<Frag>{}(x);
      case kActGelu: return cutlass::epilogue::thread::GELU<Frag>{}(x);
      case kActSilu: return cutlass::epilogue::thread::SiLu<Frag>{}(x);
      default: return x;
    }
  }
};
