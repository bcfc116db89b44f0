// oasr_w8a8: the middle of a W8A8 format's CUTLASS 2.x kernel type (mma.sync, the 2.x epilogue
// visitor tree), written once for int8 (sm80..sm90) and fp8 e4m3 (sm89, sm90).
//
// Included by a family's 2.x header inside its `template <class ElementD, int BM, int BN,
// int BK, int WM, int WN, int WK, int Stages, ...> struct Kernel {`, which defines first what
// is the format's:
//
//   OASR_W8A8_ELEMENT      the A/W element and the quantizing op's output (int8_t, E4M3)
//   OASR_W8A8_TYPES        member types of its own after the shapes (fp8: MathOp), or nothing
//   OASR_W8A8_ACCUMULATOR  the tensor cores' accumulator (int32_t, float)
//   OASR_W8A8_VISITOR      how the header names cutlass::epilogue::threadblock
//   OASR_W8A8_SWIZZLE      the threadblock swizzle (Stream-K's or the identity)
//   OASR_W8A8_ARCH         the CUTLASS arch tag (Sm80, Sm89)
//   OASR_W8A8_MATH_OP      the mma's math operator
//   OASR_W8A8_STREAM_K     whether the kit's 2.x launch takes the Stream-K path
//
// and undefines them after; the family writes workspace, Prepared, prepare, launch and run.
// The visitor tree: AccFetch --x a_scale (ColBroadcast) --x w_scale (RowBroadcast) --+ bias
// (RowBroadcast) --> the output dtype, or / out_scale (ScalarBroadcast) and the element's
// saturating conversion --> AuxStore D. The accumulator tiles go through shared memory in the
// layout of a 32-bit output with 4-element accesses (ElementC = float, alignment 4); D is
// written by the visitor's own store.
  static constexpr bool kQuant = std::is_same_v<ElementD, OASR_W8A8_ELEMENT>;
  static constexpr auto kRound = cutlass::FloatRoundStyle::round_to_nearest;
  static constexpr int kEpilogueStages = 1;

  using TileShape = cutlass::gemm::GemmShape<BM, BN, BK>;
  using WarpShape = cutlass::gemm::GemmShape<WM, WN, WK>;
  using InstructionShape = cutlass::gemm::GemmShape<16, 8, 32>;
  OASR_W8A8_TYPES
  using ThreadMap = OASR_W8A8_VISITOR::OutputTileThreadLayout<TileShape, WarpShape, float, 4,
                                                              kEpilogueStages>;

  using Acc = OASR_W8A8_VISITOR::VisitorAccFetch;
  using AScale = OASR_W8A8_VISITOR::VisitorColBroadcast<ThreadMap, float, Stride<_1, _0, _0>>;
  using RowVector = OASR_W8A8_VISITOR::VisitorRowBroadcast<ThreadMap, float, Stride<_0, _1, _0>>;
  using Multiply = OASR_W8A8_VISITOR::VisitorCompute<cutlass::multiplies, float, float, kRound>;
  using RowScaled = OASR_W8A8_VISITOR::Sm80EVT<Multiply, Acc, AScale>;
  using Scaled = OASR_W8A8_VISITOR::Sm80EVT<Multiply, RowScaled, RowVector>;
  using AddBias = OASR_W8A8_VISITOR::VisitorCompute<
      cutlass::plus, std::conditional_t<kQuant, float, ElementD>, float, kRound>;
  using Biased = OASR_W8A8_VISITOR::Sm80EVT<AddBias, Scaled, RowVector>;
  using OutScale = OASR_W8A8_VISITOR::VisitorScalarBroadcast<float>;
  using Divide = OASR_W8A8_VISITOR::VisitorCompute<cutlass::divides, OASR_W8A8_ELEMENT, float,
                                                   kRound>;
  using Quantized = OASR_W8A8_VISITOR::Sm80EVT<Divide, Biased, OutScale>;
  using Value = std::conditional_t<kQuant, Quantized, Biased>;
  using Store = OASR_W8A8_VISITOR::VisitorAuxStore<ThreadMap, ElementD, kRound,
                                                   Stride<int64_t, _1, int64_t>>;
  using Callbacks = OASR_W8A8_VISITOR::Sm80EVT<Store, Value>;

  using Swizzle = OASR_W8A8_SWIZZLE;
  using GemmKernel = typename cutlass::gemm::kernel::DefaultGemmWithVisitor<
      OASR_W8A8_ELEMENT, cutlass::layout::RowMajor, cutlass::ComplexTransform::kNone, 16,
      OASR_W8A8_ELEMENT, cutlass::layout::ColumnMajor, cutlass::ComplexTransform::kNone, 16,
      float, cutlass::layout::RowMajor, 4, OASR_W8A8_ACCUMULATOR, float,
      cutlass::arch::OpClassTensorOp, cutlass::arch::OASR_W8A8_ARCH, TileShape, WarpShape,
      InstructionShape, Callbacks, Swizzle, Stages, OASR_W8A8_MATH_OP,
      kEpilogueStages>::GemmKernel;
  using Launch = oasr_kit::sm80::Launch<GemmKernel, OASR_W8A8_STREAM_K>;
  using Arguments = typename GemmKernel::Arguments;
  using Params = typename GemmKernel::Params;

  static typename Callbacks::Arguments callback_args(Operands const& o, int m, int n) {
    typename RowScaled::Arguments row_scaled{{}, {o.a_scale, 0.f, {}}, {}};
    typename Scaled::Arguments scaled{row_scaled, {o.w_scale, 0.f, {}}, {}};
    typename Biased::Arguments biased{scaled, {o.bias, 0.f, {}}, {}};
    typename Store::Arguments store{static_cast<ElementD*>(o.d),
                                    {int64_t(n), _1{}, int64_t(m) * n}};
    if constexpr (kQuant) {
      typename OutScale::Arguments out_scale{{o.out_scale}, {o.out_scale_ptr}, {}};
      typename Quantized::Arguments quantized{biased, out_scale, {}};
      return typename Callbacks::Arguments{quantized, store};
    } else {
      return typename Callbacks::Arguments{biased, store};
    }
  }

  static Arguments make_args(Operands const& o, int m, int n, int k) {
    return Arguments(cutlass::gemm::GemmUniversalMode::kGemm, cutlass::gemm::GemmCoord(m, n, k),
                     1, callback_args(o, m, n), o.a, o.w, nullptr, nullptr, int64_t(m) * k,
                     int64_t(n) * k, 0, 0, int64_t(k), int64_t(k), int64_t(n), int64_t(n));
  }

#undef OASR_W8A8_ELEMENT
#undef OASR_W8A8_TYPES
#undef OASR_W8A8_ACCUMULATOR
#undef OASR_W8A8_VISITOR
#undef OASR_W8A8_SWIZZLE
#undef OASR_W8A8_ARCH
#undef OASR_W8A8_MATH_OP
#undef OASR_W8A8_STREAM_K
