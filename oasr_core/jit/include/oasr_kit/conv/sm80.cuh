// oasr_kit/conv: the CUTLASS 2.x implicit-GEMM convolution forward kernel type
// (ImplicitGemmConvolution, mma.sync, NHWC) of the dense lanes for sm80..sm90, and its launch.
//
// Included by a family header inside its namespace, after the CUTLASS 2.x conv headers, the
// run-time activation (oasr_kit/conv/activation.cuh), dense_geometry_ok, open_call and
// call_key, with OASR_CONV_EXTENTS(g) defined as the family's problem as CUTLASS's 2-D fprop
// sees it: N, H, W, C, K, R, S, P, Q, pad_h, pad_w, stride_h, stride_w, dilation_h,
// dilation_w of Geometry `g` (a conv1d is H = R = P = 1). What it declares is the family's.
// No include guard: a family includes it once, inside its own namespace.
//
// The iterator algorithm is fixed per unit:
//   kOptimized    precomputed masks and incremental offsets; c_in a multiple of the access
//                 width and every window extent <= 32 (the mask bits of
//                 Conv2dFpropActivation...Optimized);
//   kAnalytic     coordinates recomputed per access; any window;
//   kFewChannels  (window, c_in) flattened into one K dimension read AlignIn channels at a
//                 time, for front ends with c_in < 8 (raw audio, one log-mel plane), where
//                 the other two would spend a whole K tile per filter tap.
// AlignIn is the access width in elements of x and the weight (c_in must be a multiple);
// AlignOut that of the output and bias (c_out must be a multiple). The multistage main loop
// copies with cp.async, which moves 4, 8 or 16 bytes: an AlignIn of one 16-bit element needs
// the two-stage main loop (Stages == 2, ImplicitGemmPipelined, register-staged loads).
//
// The bias is the epilogue's source tensor with a zero stride (one row broadcast over every
// output position); without a bias beta is zero and the epilogue reads no source.

enum Algo : int { kAnalytic = 0, kOptimized = 1, kFewChannels = 2 };

template <int A>
constexpr cutlass::conv::IteratorAlgorithm kIterator =
    A == kOptimized    ? cutlass::conv::IteratorAlgorithm::kOptimized
    : A == kFewChannels ? cutlass::conv::IteratorAlgorithm::kFewChannels
                        : cutlass::conv::IteratorAlgorithm::kAnalytic;

template <class T, int BM, int BN, int BK, int WM, int WN, int WK, int Stages, int A,
          int AlignIn, int AlignOut>
struct Kernel {
  static_assert(Stages >= 3 || Stages == 2, "CUTLASS 2.x main loops have two or more stages");
  static_assert(Stages == 2 || AlignIn * int(sizeof(T)) >= 4,
                "cp.async moves 4, 8 or 16 bytes: AlignIn 1 needs the two-stage main loop");

  using OutputOp = cutlass::epilogue::thread::LinearCombinationGeneric<
      ActOf, T, AlignOut, float, float, cutlass::epilogue::thread::ScaleType::Default,
      cutlass::FloatRoundStyle::round_to_nearest, true>;
  using ConvKernel = typename cutlass::conv::kernel::DefaultConv2dFprop<
      T, cutlass::layout::TensorNHWC, T, cutlass::layout::TensorNHWC, T,
      cutlass::layout::TensorNHWC, float, cutlass::arch::OpClassTensorOp, cutlass::arch::Sm80,
      cutlass::gemm::GemmShape<BM, BN, BK>, cutlass::gemm::GemmShape<WM, WN, WK>,
      cutlass::gemm::GemmShape<16, 8, 16>, OutputOp,
      cutlass::gemm::threadblock::GemmIdentityThreadblockSwizzle<4>, Stages,
      cutlass::arch::OpMultiplyAdd, kIterator<A>, cutlass::conv::StrideSupport::kStrided,
      AlignIn, AlignIn>::Kernel;
  using Device = cutlass::conv::device::ImplicitGemmConvolution<ConvKernel>;
  using Arguments = typename ConvKernel::Arguments;
  using Params = typename ConvKernel::Params;
  static constexpr int kSmem = int(sizeof(typename ConvKernel::SharedStorage));
  static constexpr int kThreads = ConvKernel::kThreadCount;

  static cutlass::conv::Conv2dProblemSize problem(Geometry const& g) {
    return cutlass::conv::Conv2dProblemSize(OASR_CONV_EXTENTS(g),
                                            cutlass::conv::Mode::kCrossCorrelation, 1, 1);
  }

  static Arguments make_args(Geometry const& g, const void* x, const void* w, const void* bias,
                             void* out, int32_t act) {
    using Layout = cutlass::layout::TensorNHWC;
    auto size = problem(g);
    T* xp = static_cast<T*>(const_cast<void*>(x));
    T* wp = static_cast<T*>(const_cast<void*>(w));
    T* bp = static_cast<T*>(const_cast<void*>(bias));
    T* op = static_cast<T*>(out);
    typename OutputOp::Params epilogue(1.f, bias != nullptr ? 1.f : 0.f);
    epilogue.act = act;
    return Arguments(size, {xp, Layout::packed(size.activation_extent())},
                     {wp, Layout::packed(size.filter_extent())},
                     {bp, Layout(typename Layout::Stride(0))},
                     {op, Layout::packed(size.output_extent())}, epilogue);
  }

  static int64_t workspace(Geometry const* g) {
    if (!dense_geometry_ok(g)) {
      return -1;
    }
    Arguments args = make_args(*g, nullptr, nullptr, nullptr, nullptr, kActNone);
    return Device::can_implement(args) == cutlass::Status::kSuccess ? 0 : -1;
  }

  static int32_t run(CallArgs const* c, Geometry const* g, const void* x, const void* w,
                     const void* bias, void* out, cudaStream_t stream) {
    static PreparedCache<Params> cache;
    int dev = -1;
    int32_t status = open_call(c, g, x, w, bias, out, AlignIn * int64_t(sizeof(T)),
                               AlignOut * int64_t(sizeof(T)), &dev);
    if (status != kOk) {
      return status;
    }
    auto prepare = [&](Params& params) -> int32_t {
      Arguments args = make_args(*g, x, w, bias, out, c->act);
      if (Device::can_implement(args) != cutlass::Status::kSuccess) {
        return kErrShape;
      }
      const void* entry = reinterpret_cast<const void*>(cutlass::Kernel<ConvKernel>);
      if (!allow_smem<ConvKernel>(entry, kSmem, dev)) {
        return kErrInit;
      }
      params = Params(args, nullptr);
      return kOk;
    };
    auto launch = [&](Params& params) -> int32_t {
      typename ConvKernel::ThreadblockSwizzle swizzle;
      dim3 grid = swizzle.get_grid_shape(params.grid_tiled_shape);
      cutlass::Kernel<ConvKernel><<<grid, dim3(kThreads, 1, 1), kSmem, stream>>>(params);
      return launch_status();
    };
    return run_prepared(cache, call_key(*c, *g, x, w, bias, out, dev), prepare, launch);
  }
};

#undef OASR_CONV_EXTENTS
