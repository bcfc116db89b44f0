// oasr_w8a8: the body of a W8A8 format's Hopper kernel type (CUTLASS 3.x CollectiveBuilder,
// TMA + wgmma), written once for int8 and fp8 e4m3.
//
// Included by a family's sm90.cuh inside its `template <class ElementD, int TM, int TN, int TK,
// int CM, int CN, int Stages, class MainloopSchedule, class EpilogueSchedule, ...> struct
// Kernel {`, which defines first what is the format's:
//
//   OASR_W8A8_ELEMENT      the A/W element and the quantizing op's output (int8_t, E4M3)
//   OASR_W8A8_ACCUMULATOR  the tensor cores' accumulator (int32_t, float)
//   OASR_W8A8_FUSION       how the header names cutlass::epilogue::fusion
//   OASR_W8A8_SCHEDULER    the GemmUniversal tile scheduler (the config's, or void)
//
// and undefines them after. The scales are fused as an Sm90 epilogue visitor tree: acc ->
// * a_scale[m] (column broadcast) -> * w_scale[n] (row broadcast) -> + bias[n] (row broadcast,
// zero when null) -> the output dtype, or / out_scale (scalar broadcast: pointer or value) and
// the element's saturating conversion for the quantizing op. Each node is one fp32 op
// (Sm90Compute converts its inputs to float first); with --fmad=false nothing is contracted.
  static constexpr bool kQuant = std::is_same_v<ElementD, OASR_W8A8_ELEMENT>;
  static constexpr auto kRound = cutlass::FloatRoundStyle::round_to_nearest;
  static constexpr int kAlignAB = 16;
  static constexpr int kAlignD = 128 / cutlass::sizeof_bits<ElementD>::value;

  using TileShape = Shape<Int<TM>, Int<TN>, Int<TK>>;
  using ClusterShape = Shape<Int<CM>, Int<CN>, _1>;
  using LayoutA = cutlass::layout::RowMajor;
  using LayoutB = cutlass::layout::ColumnMajor;
  using LayoutD = cutlass::layout::RowMajor;

  using Acc = OASR_W8A8_FUSION::Sm90AccFetch;
  using AScale = OASR_W8A8_FUSION::Sm90ColBroadcast<0, TileShape, float>;
  using RowVector = OASR_W8A8_FUSION::Sm90RowBroadcast<0, TileShape, float>;
  using Multiply = OASR_W8A8_FUSION::Sm90Compute<cutlass::multiplies, float, float, kRound>;
  using RowScaled = OASR_W8A8_FUSION::Sm90EVT<Multiply, Acc, AScale>;
  using Scaled = OASR_W8A8_FUSION::Sm90EVT<Multiply, RowScaled, RowVector>;
  using AddBias = OASR_W8A8_FUSION::Sm90Compute<
      cutlass::plus, std::conditional_t<kQuant, float, ElementD>, float, kRound>;
  using Biased = OASR_W8A8_FUSION::Sm90EVT<AddBias, Scaled, RowVector>;
  using OutScale = OASR_W8A8_FUSION::Sm90ScalarBroadcast<float>;
  using Divide = OASR_W8A8_FUSION::Sm90Compute<cutlass::divides, OASR_W8A8_ELEMENT, float,
                                               kRound>;
  using Quantized = OASR_W8A8_FUSION::Sm90EVT<Divide, Biased, OutScale>;
  using Fusion = std::conditional_t<kQuant, Quantized, Biased>;

  using CollectiveEpilogue = typename cutlass::epilogue::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, TileShape, ClusterShape,
      cutlass::epilogue::collective::EpilogueTileAuto, OASR_W8A8_ACCUMULATOR, float, void,
      LayoutD, kAlignD, ElementD, LayoutD, kAlignD, EpilogueSchedule, Fusion>::CollectiveOp;

  using StageCount = oasr_kit::sm90::StageCountFor<Stages, CollectiveEpilogue>;

  using CollectiveMainloop = typename cutlass::gemm::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, OASR_W8A8_ELEMENT, LayoutA, kAlignAB,
      OASR_W8A8_ELEMENT, LayoutB, kAlignAB, OASR_W8A8_ACCUMULATOR, TileShape, ClusterShape,
      StageCount, MainloopSchedule>::CollectiveOp;

  using GemmKernel = cutlass::gemm::kernel::GemmUniversal<Shape<int, int, int, int>,
                                                          CollectiveMainloop, CollectiveEpilogue,
                                                          OASR_W8A8_SCHEDULER>;
  using Launch = oasr_kit::sm90::Launch<GemmKernel>;
  using Arguments = typename Launch::Arguments;
  using Prepared = typename Launch::Prepared;

  static typename Fusion::Arguments fusion_args(Operands const& o) {
    typename RowScaled::Arguments row_scaled{{}, {o.a_scale, 0.f, {}}, {}};
    typename Scaled::Arguments scaled{row_scaled, {o.w_scale, 0.f, {}}, {}};
    typename Biased::Arguments biased{scaled, {o.bias, 0.f, {}}, {}};
    if constexpr (kQuant) {
      typename OutScale::Arguments out_scale{{o.out_scale}, {o.out_scale_ptr}, {}};
      return typename Quantized::Arguments{biased, out_scale, {}};
    } else {
      return biased;
    }
  }

  static Arguments make_args(Operands const& o, int m, int n, int k, int dev) {
    Arguments args = Launch::args(static_cast<OASR_W8A8_ELEMENT const*>(o.a),
                                  static_cast<OASR_W8A8_ELEMENT const*>(o.w),
                                  static_cast<ElementD*>(o.d), m, n, k, dev);
    args.epilogue.thread = fusion_args(o);
    return args;
  }

  static int64_t workspace(int64_t m, int64_t n, int64_t k) {
    int dev = current_device();
    if (dev < 0 || !shape_ok(m, n, k)) {
      return -1;
    }
    Operands none{};
    return Launch::workspace(make_args(none, int(m), int(n), int(k), dev));
  }

  static int32_t prepare(Prepared& prep, Operands const& o, CallArgs const& c, int dev) {
    prep.args = make_args(o, int(c.m), int(c.n), int(c.k), dev);
    return Launch::prepare(prep, c.workspace, c.workspace_bytes, dev);
  }

  static int32_t launch(Prepared& prep, CallArgs const& c, cudaStream_t stream) {
    return Launch::launch(prep, c.workspace, (c.flags & kFlagPdl) != 0, stream);
  }

  static int32_t run(Operands const& o, CallArgs const& c, cudaStream_t stream) {
    return run_call<Kernel>(o, c, stream);
  }

#undef OASR_W8A8_ELEMENT
#undef OASR_W8A8_ACCUMULATOR
#undef OASR_W8A8_FUSION
#undef OASR_W8A8_SCHEDULER
