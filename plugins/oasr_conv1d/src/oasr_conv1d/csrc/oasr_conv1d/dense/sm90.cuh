// oasr_conv1d dense lane sm90_conv1d: CUTLASS 3.x Hopper implicit-GEMM convolution forward
// (ConvUniversal over a 1-D ConvProblemShape, TMA im2col loads + wgmma).
//
// x (batch, t_in, c_in) and the packed weight (c_out, kernel, c_in) are TensorNWC tensors
// (the filter's "W" is its tap), out (batch, t_out, c_out) too. The main loop is CUTLASS's
// KernelImplicitTmaWarpSpecializedSm90, one producer warpgroup and one consumer warpgroup per
// CTA, not persistent (CUTLASS 4.2's conv dispatch policy rejects the cooperative and
// ping-pong schedules: "Persistent schedules not support for conv yet"). TMA reads 16-byte
// rows: c_in and c_out multiples of 8.
//
// The epilogue is a three-node visitor tree: act(acc + bias) with the bias broadcast along
// c_out (a null bias reads as zeros without a load) and the activation chosen at run time
// (common.cuh). One kernel per dtype serves every op.
//
// Units are compiled with CUTLASS_ENABLE_GDC_FOR_SM90: a kernel launched with programmatic
// dependent launch (kFlagPdl) waits on the previous grid before its first global access.
#pragma once

// CUTLASS 4.2's conv collectives name KernelHardwareInfo without including it.
#include "cutlass/kernel_hardware_info.hpp"

#include "cute/tensor.hpp"
#include "cutlass/cluster_launch.hpp"
#include "cutlass/conv/collective/collective_builder.hpp"
#include "cutlass/conv/convnd_problem_shape.hpp"
#include "cutlass/conv/convolution.h"
#include "cutlass/conv/dispatch_policy.hpp"
#include "cutlass/conv/kernel/conv_universal.hpp"
#include "cutlass/device_kernel.h"
#include "cutlass/epilogue/collective/collective_builder.hpp"
#include "cutlass/epilogue/fusion/operations.hpp"
#include "cutlass/epilogue/fusion/sm90_callbacks_tma_warpspecialized.hpp"
#include "oasr_conv1d/dense/common.cuh"

namespace oasr_conv1d {
namespace dense {
namespace sm90 {

namespace fusion = cutlass::epilogue::fusion;
constexpr auto kRound = cutlass::FloatRoundStyle::round_to_nearest;

template <int Stages, int CarveoutBytes>
using StagesFor = std::conditional_t<
    Stages == 0, cutlass::conv::collective::StageCountAutoCarveout<CarveoutBytes>,
    cutlass::conv::collective::StageCount<(Stages > 0 ? Stages : 2)>>;

// D = act(acc + bias): bias one value per output channel (the GEMM's N).
template <class T, class Tile>
using BiasAct = fusion::Sm90EVT<
    fusion::Sm90Compute<ActOf, T, float, kRound>,
    fusion::Sm90EVT<fusion::Sm90Compute<cutlass::plus, float, float, kRound>, fusion::Sm90AccFetch,
                    fusion::Sm90RowBroadcast<0, Tile, T, float,
                                             cute::Stride<cute::_0, cute::_1, cute::_0>>>>;

template <class T, int TM, int TN, int TK, int CM, int CN, int Stages, class MainloopSchedule,
          class EpilogueSchedule>
struct Kernel {
  static constexpr int kAlign = 8;
  using Layout = cutlass::layout::TensorNWC;
  using TileShape = cute::Shape<cute::Int<TM>, cute::Int<TN>, cute::Shape<cute::Int<TK>>>;
  using ClusterShape = cute::Shape<cute::Int<CM>, cute::Int<CN>, cute::_1>;
  // The conv dispatch policy has its own warp-specialized schedule; the gemm schedule names
  // a config carries map onto it (only the non-persistent one exists for conv).
  static_assert(std::is_same_v<MainloopSchedule, cutlass::gemm::KernelTmaWarpSpecialized>,
                "CUTLASS 4.2 builds Hopper convolutions with the non-persistent schedule only");
  using ConvSchedule = cutlass::conv::KernelImplicitTmaWarpSpecializedSm90;

  using CollectiveEpilogue = typename cutlass::epilogue::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, TileShape, ClusterShape,
      cutlass::epilogue::collective::EpilogueTileAuto, float, float, void, Layout, kAlign, T,
      Layout, kAlign, EpilogueSchedule, BiasAct<T, TileShape>>::CollectiveOp;

  using CollectiveMainloop = typename cutlass::conv::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, cutlass::conv::Operator::kFprop, T,
      Layout, kAlign, T, Layout, kAlign, float, TileShape, ClusterShape,
      StagesFor<Stages, int(sizeof(typename CollectiveEpilogue::SharedStorage))>,
      ConvSchedule>::CollectiveOp;

  using ProblemShape = cutlass::conv::ConvProblemShape<cutlass::conv::Operator::kFprop, 1>;
  using ConvKernel =
      cutlass::conv::kernel::ConvUniversal<ProblemShape, CollectiveMainloop, CollectiveEpilogue>;
  using Arguments = typename ConvKernel::Arguments;
  using Params = typename ConvKernel::Params;

  struct Prepared {
    Params params;
  };

  static ProblemShape problem(Geometry const& g) {
    return ProblemShape(cutlass::conv::Mode::kCrossCorrelation,
                        {int(g.batch), int(g.t_in), g.c_in}, {g.c_out, g.kernel, g.c_in},
                        {g.pad}, {g.pad}, {g.stride}, {g.dilation}, 1);
  }

  static Arguments make_args(Geometry const& g, const void* x, const void* w, const void* bias,
                             void* out, int32_t act, int dev) {
    ProblemShape shape = problem(g);
    typename ConvKernel::StrideD stride_d{};
    // ((q, n), k, l): the output's step and batch strides, from the packed (n, q, k) tensor.
    cute::get<0, 0>(stride_d) = shape.stride_C[ProblemShape::RankT - 2];
    cute::get<0, 1>(stride_d) = shape.stride_C[ProblemShape::RankT - 3];
    cutlass::KernelHardwareInfo hw;
    hw.device_id = dev;
    hw.sm_count = sm_count(dev);
    Arguments args{shape,
                   {static_cast<T const*>(x), static_cast<T const*>(w)},
                   {{}, nullptr, stride_d, static_cast<T*>(out), stride_d},
                   hw};
    args.epilogue.thread = {{{}, {static_cast<T const*>(bias), T(0), {}}, {}}, {act}};
    return args;
  }

  static int64_t workspace(Geometry const* g) {
    int dev = current_device();
    if (dev < 0 || !dense_geometry_ok(g)) {
      return -1;
    }
    Arguments args = make_args(*g, nullptr, nullptr, nullptr, nullptr, kActNone, dev);
    if (!ConvKernel::can_implement(args)) {
      return -1;
    }
    return int64_t(ConvKernel::get_workspace_size(args));
  }

  static int32_t run(CallArgs const* c, Geometry const* g, const void* x, const void* w,
                     const void* bias, void* out, cudaStream_t stream) {
    static PreparedCache<Prepared> cache;
    constexpr int64_t kBytes = kAlign * int64_t(sizeof(T));
    int dev = -1;
    int32_t status = open_call(c, g, x, w, bias, out, kBytes, kBytes, &dev);
    if (status != kOk) {
      return status;
    }
    auto prepare = [&](Prepared& prep) -> int32_t {
      Arguments args = make_args(*g, x, w, bias, out, c->act, dev);
      if (!ConvKernel::can_implement(args)) {
        return kErrShape;
      }
      if (int64_t(ConvKernel::get_workspace_size(args)) > c->workspace_bytes) {
        return kErrWorkspace;
      }
      const void* entry = reinterpret_cast<const void*>(cutlass::device_kernel<ConvKernel>);
      if (!allow_smem<ConvKernel>(entry, ConvKernel::SharedStorageSize, dev)) {
        return kErrInit;
      }
      prep.params = ConvKernel::to_underlying_arguments(args, c->workspace);
      return kOk;
    };
    bool pdl = (c->flags & kFlagPdl) != 0;
    auto launch = [&](Prepared& prep) -> int32_t {
      dim3 grid = ConvKernel::get_grid_shape(prep.params);
      dim3 block = ConvKernel::get_block_shape();
      if (CM * CN == 1 && !pdl) {
        // The launch attributes' path costs a function-attribute call per launch; a single-CTA
        // cluster without programmatic dependent launch needs none of them.
        cutlass::device_kernel<ConvKernel>
            <<<grid, block, ConvKernel::SharedStorageSize, stream>>>(prep.params);
        return launch_status();
      }
      dim3 cluster(CM, CN, 1);
      void* kernel_params[] = {&prep.params};
      const void* entry = reinterpret_cast<const void*>(cutlass::device_kernel<ConvKernel>);
      cutlass::Status status = cutlass::ClusterLauncher::launch(
          grid, cluster, block, ConvKernel::SharedStorageSize, stream, entry, kernel_params, pdl);
      if (status != cutlass::Status::kSuccess) {
        cudaGetLastError();
        return kErrLaunch;
      }
      return launch_status();
    };
    return run_prepared(cache, call_key(*c, *g, x, w, bias, out, dev), prepare, launch);
  }
};

}  // namespace sm90
}  // namespace dense
}  // namespace oasr_conv1d
