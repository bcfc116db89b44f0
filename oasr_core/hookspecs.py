"""Every hook an oasr plugin can implement (pluggy project ``oasr``).

The plugin model
----------------

oasr is a small core plus plugins. The core (census, bench, cost model, partition, tuning
database, runtime selection) knows no kernel family by name; everything family-specific comes
from plugins, found through the ``oasr`` entry-point group::

    # pyproject.toml of the plugin distribution oasr-gemm
    [project.entry-points.oasr]
    gemm = "oasr_gemm.hooks"

The entry-point name (``gemm``) is the plugin's name: it is what ``OASR_PLUGINS=gemm``,
``-p no:gemm`` and ``oasr plugins`` call it. The value is the plugin's hooks module, which
marks its implementations with ``from oasr_core import hookimpl`` (see the examples below).

The hooks below are the whole contract. Registration hooks (``oasr_register_*``) return typed,
frozen records from :mod:`oasr_core.types` (:class:`~oasr_core.types.Family`,
:class:`~oasr_core.types.Lane`, :class:`~oasr_core.types.Config`); a record carries all of a
family's or lane's behaviour as data and plain callables. Separate ``firstresult`` hooks exist
only for decisions several plugins may weigh in on; there ``None`` means "no opinion".

Rules every implementation follows:

* Importing a hooks module does no work: no entry-point loading, no compilation, no GPU access,
  no ``import torch`` at module level. The core imports the module when a plugin manager is
  built (:func:`oasr_core.plugins.make_plugin_manager`), long before anything runs.
* An implementation takes only the parameters it names (pluggy passes them by keyword), so the
  core can add parameters to a hook without breaking plugins.
* A plugin that fails (import error, hook raising, wrong return type, duplicate name) is
  skipped with one warning naming it and its distribution; the others keep working.
  ``OASR_STRICT_PLUGINS=1`` turns every such warning into an error.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any

import pluggy

if TYPE_CHECKING:
    from torch import Tensor, nn

    from oasr_core.census.workloads import Workload
    from oasr_core.compile.patterns import Pattern
    from oasr_core.types import Config, Family, Lane, Problem

hookspec = pluggy.HookspecMarker("oasr")


@hookspec
def oasr_register_families() -> Iterable[Family]:
    """Register kernel families.

    **When:** the core calls this when it builds a registry
    (:meth:`oasr_core.registry.Registry.from_plugin_manager`), once per CLI invocation or
    process, after every entry point has loaded. It calls each plugin's implementation on its
    own, so every family is attributed to the plugin and distribution that returned it
    (wrapper implementations are not applied to this hook).

    **Parameters:** none.

    **Returns:** an iterable (list, tuple or generator) of :class:`oasr_core.types.Family`
    *instances*, possibly empty. ``None`` registers nothing. A class instead of an instance, a
    non-iterable, or an item that is not a ``Family`` is a contract violation: that plugin's bad
    records are dropped with one warning naming the plugin, its distribution and this hook. If
    the implementation raises, nothing it returned is used. A family name registered by two
    plugins (or twice by one) is a conflict: both records are dropped and an error line asks
    the user to report it to the plugin authors; it is never resolved by "last wins" or by
    renaming.

    **firstresult:** no; every implementation is called and all results are kept.

    **Example:**

    .. code-block:: python

        from oasr_core import hookimpl

        @hookimpl
        def oasr_register_families():
            from oasr_core.types import Family, Sentinel
            from oasr_gemm import numerics, patches

            return [
                Family(
                    name="gemm", ops=("gemm", "gemm_activation"), dims=("N", "K"),
                    dtypes=("fp16", "bf16"), dtype_classes={"half": ("fp16", "bf16")},
                    sentinels={Sentinel.DEFAULT, Sentinel.TORCH},
                    recorder_patches=patches.recorder_patches,
                    numerics_gate=numerics.allclose_gate,
                )
            ]
    """


@hookspec
def oasr_register_lanes() -> Iterable[Lane]:
    """Register lanes (kernel generations with their config spaces) of any installed family.

    **When:** the core calls this right after :func:`oasr_register_families`, while building a
    registry, once per implementation (as there) so that each lane is attributed to its plugin
    and distribution. A lane may belong to a family another plugin registers: that is how a
    third-party package adds kernels to an installed family without forking it.

    **Parameters:** none.

    **Returns:** an iterable of :class:`oasr_core.types.Lane` *instances*, possibly empty;
    ``None`` registers nothing. The same checks as for families apply: classes instead of
    instances, non-iterables and non-``Lane`` items are dropped with one warning per plugin and
    hook, and a lane name registered twice drops both lanes with an error line. A lane whose
    ``family`` no loaded plugin registers is dropped with a warning. ``Lane.config_space`` is
    explicit data (:class:`~oasr_core.types.Config` records with JSON parameters);
    ``Lane.jit_module``, if set, is a *class* the core instantiates per config when it needs a
    kernel, never an instance and never compiled at import.

    **firstresult:** no; every implementation is called and all results are kept.

    **Example:**

    .. code-block:: python

        from oasr_core import hookimpl

        @hookimpl
        def oasr_register_lanes():
            from oasr_core.types import Config, Lane
            from oasr_gemm_simt import feasibility, jit

            tiles = [(64, 64, 32), (128, 64, 32), (128, 128, 32)]
            space = [Config(id=f"simt_{m}x{n}x{k}", lane="gemm_simt",
                            params={"tile": [m, n, k], "stages": 2}) for m, n, k in tiles]
            return [Lane(name="gemm_simt", family="gemm", arch_families=("sm80", "sm90"),
                         config_space=space, default_config="simt_128x64x32",
                         supports=feasibility.supports, jit_module=jit.SimtGemmModule)]
    """


@hookspec(firstresult=True)
def oasr_select_lane(family: Family, arch: str, lanes: tuple[Lane, ...]) -> str | None:
    """Name the lane a family runs on an arch family, overriding the lanes' ``default_on``.

    **When:** the core calls this from :meth:`oasr_core.registry.Registry.active_lane`, when
    runtime selection, ``oasr tune build`` or ``oasr tune status`` needs the lane that serves
    ``family`` on ``arch`` (the device's arch family, or the one named on the command line).
    Runtime selection asks on the first resolution of a shape in an epoch (the answer is
    memoised with the selection), never per call; answer the same way for the same inputs.

    :param family: the :class:`~oasr_core.types.Family` record being resolved.
    :param arch: the arch family, e.g. ``"sm90"`` (never a SKU such as ``"sm90a"``).
    :param lanes: the registered :class:`~oasr_core.types.Lane` records of ``family`` whose
        ``arch_families`` contain ``arch``, in registration order; possibly empty.

    **Returns:** the *name* (a ``str``) of one lane in ``lanes``, or ``None`` for "no opinion".
    When every implementation returns ``None`` the core uses the unique lane whose
    ``default_on`` contains ``arch``; failing that, the only lane of ``lanes`` if there is
    exactly one; otherwise the family has no active lane on that arch. A name that is not in
    ``lanes`` (or a ``Lane`` object instead of its name) is a contract violation: it is
    ignored with a warning, or raised as ``PluginError`` under ``OASR_STRICT_PLUGINS=1``.

    **firstresult:** yes. Stops at first non-None result; use ``tryfirst``/``trylast`` on the
    implementation to order it against other plugins.

    **Example:**

    .. code-block:: python

        import os

        from oasr_core import hookimpl

        @hookimpl
        def oasr_select_lane(family, arch, lanes):
            # Let an operator pin the gemm lane while a new generation is evaluated.
            wanted = os.environ.get("MY_GEMM_LANE")
            if family.name != "gemm" or not wanted:
                return None
            names = {lane.name for lane in lanes}
            return wanted if wanted in names else None
    """


@hookspec(firstresult=True)
def oasr_model_select(
    family: Family,
    lane: Lane,
    problem: Problem,
    candidates: tuple[Config, ...],
    model: Mapping[str, Any] | None,
) -> Config | None:
    """The cost-model tier: pick a config for a shape no tuning entry covers.

    **When:** runtime selection (:func:`oasr_core.select`) calls this on the first resolution
    of a shape in an epoch, after the user and system tiers of the tuning database both miss
    and before it falls back to the family's untuned selector (the lane default or the shape
    heuristic). The answer is memoised with the selection, so the hook is not on the per-call
    path.

    :param family: the :class:`~oasr_core.types.Family` record of the call.
    :param lane: the active :class:`~oasr_core.types.Lane` the config must belong to.
    :param problem: the call shape, a :class:`~oasr_core.types.Problem` (op, dtype, static
        dims and the dynamic-axis value ``m``).
    :param candidates: the lane's configs that are statically feasible, available in this
        process and support ``problem``, in config-space order; never empty when called.
    :param model: the calibration data of the cost model for this arch and family (a
        read-only JSON mapping), or ``None`` when no calibration is loaded; an implementation
        that cannot work uncalibrated returns ``None``.

    **Returns:** one :class:`~oasr_core.types.Config` *instance* taken from ``candidates``, or
    ``None`` for "no pick", in which case the next tier answers. A config that is not in
    ``candidates`` is never launched: it is treated as ``None``.

    **firstresult:** yes. Stops at first non-None result; a generic model should be marked
    ``trylast=True`` so that a family's own model is asked first.

    **Example:**

    .. code-block:: python

        from math import ceil

        from oasr_core import hookimpl

        @hookimpl
        def oasr_model_select(family, problem, candidates, model):
            if family.name != "gemm" or model is None:
                return None

            def waves(config):
                tile_m, tile_n = config.params["tile"][:2]
                ctas = ceil(problem.m / tile_m) * ceil(problem.dim("N") / tile_n)
                return ceil(ctas / model["sm_count"])

            return min(candidates, key=waves)
    """


@hookspec
def oasr_register_workloads() -> Iterable[Workload]:
    """Register workloads: models ``oasr tune census`` can probe for a deployment's shapes.

    **When:** the core calls this when ``oasr tune census`` resolves ``--workload NAME``
    (through :func:`oasr_core.census.collect_workloads`, which any tool listing workloads
    uses too), once per CLI invocation, after every entry point has loaded. It calls each
    plugin's implementation on its own, so every workload is attributed to the plugin and
    distribution that returned it. The core's reference workloads (``conformer`` and
    ``whisper_encoder``) are not registered through a plugin: ``collect_workloads`` adds them
    itself, before the hook's results, and they take part in the same duplicate check.

    **Parameters:** none.

    **Returns:** an iterable of :class:`oasr_core.census.Workload` *instances*, possibly
    empty; ``None`` registers nothing. A class instead of an instance, or an item that is not
    a ``Workload``, is dropped with one warning naming the plugin; if the implementation
    raises, none of its workloads are used. A workload name registered twice (a built-in's
    included) drops every workload of that name with an error line asking the user to report
    the conflict; it is never resolved by "last wins". ``Workload.factory`` is called only
    when the workload is probed, with ``Workload.params`` overridden by ``--param NAME=VALUE``
    (and ``quantization=`` when ``--quantization`` is given); it returns a
    ``torch.nn.Module`` taking the inputs ``Workload.inputs`` describe. The census builds it
    on the meta device unless ``--probe-device cpu`` is given, so it must not need real
    weights. Import torch and the model code inside the factory, never at module level.

    **firstresult:** no; every implementation is called and all results are kept.

    **Example:**

    .. code-block:: python

        from oasr_core import hookimpl

        @hookimpl
        def oasr_register_workloads():
            from oasr_core.census import Workload
            from my_asr import encoders

            return [Workload(
                name="zipformer_s", factory=encoders.build_zipformer,
                params={"layers": 12, "d_model": 384}, inputs=("B,T,80", "lengths"),
                chunk_frames=encoders.chunk_input_frames,
                description="Zipformer-S encoder; streaming chunks of 2C+7 frames",
            )]
    """


@hookspec(firstresult=True)
def oasr_linear(dtype: str, quantization: str) -> Callable[..., Tensor] | None:
    """Serve the linear layers of the census's reference models with a family's ops.

    **When:** the core calls this when ``oasr tune census`` builds one of its reference
    workloads (``conformer``, ``whisper_encoder``), once per model build and before any probe:
    every linear layer of the model (projections, feed-forward and pointwise layers) then runs
    through the returned function, while convolutions, attention products and the
    subsampling projection stay plain torch. A plugin-registered workload runs its own code
    and never triggers this hook. Which ``--dtype`` and ``--quantization`` values the census
    accepts comes from the families' ``dtypes`` and ``quantizations`` fields, not from here.

    :param dtype: the deployment's activation dtype as ``--dtype`` spells it (``"fp16"``,
        ``"bf16"``); on a ``--probe-device cpu`` probe the tensors are float32 all the same.
    :param quantization: the scheme as ``--quantization`` spells it: ``"none"`` for full
        precision, or a scheme a family lists in ``Family.quantizations`` (``"int8_w8a8"``).

    **Returns:** a callable *instance* (a plain function or an object with ``__call__``, never
    a class) taking ``(x, layer, activation=None)``: an activation ``[..., K]``, the
    ``torch.nn.Linear`` it stands for, and ``None`` or the name of the activation that follows
    the layer (``"relu"``, ``"gelu"``, ``"silu"``); it returns ``activation(layer(x))`` in
    ``x``'s dtype. A callable that also takes keyword arguments ``residual`` and ``alpha``
    is handed the models' residual adds: ``linear(x, layer, residual=r, alpha=a)`` returns
    ``r + a * layer(x)`` (one fused call, e.g. ``oasr_gemm.gemm_residual``); without them
    the model adds the residual itself. It must run on the ``meta`` device (the census probes
    shapes only) and call the ops its family records through ``Family.recorder_patches``,
    reached through their module at call time (the recorder rebinds module attributes), so
    the census sees each call under that family and op. ``None`` means "not mine": another
    plugin may answer. When none does, a ``"none"`` model computes its linears with
    ``torch.nn.functional.linear`` (which a family's patches may still record), and any
    other scheme stops the census with a one-line error naming it.

    **firstresult:** yes. Stops at first non-None result; two plugins serving the same dtype
    and scheme are ordered with ``tryfirst``/``trylast`` on the implementation.

    **Example:**

    .. code-block:: python

        from oasr_core import hookimpl

        @hookimpl
        def oasr_linear(dtype, quantization):
            if quantization != "none" or dtype not in ("fp16", "bf16"):
                return None
            from my_gemm import ops

            def linear(x, layer, activation=None):
                if activation is None:
                    return ops.gemm(x, layer.weight, layer.bias)
                return ops.gemm_activation(x, layer.weight, layer.bias, activation)

            return linear
    """


@hookspec(firstresult=True)
def oasr_layer(kind: str, dtype: str, quantization: str) -> Callable[..., Tensor] | None:
    """Serve a kind of layer of the census's reference models other than ``nn.Linear``.

    **When:** the core calls this when ``oasr tune census`` (or the end-to-end benchmark)
    builds one of its reference workloads, once per layer kind and model build, before any
    probe; and when :func:`oasr_core.route` routes a model's layers (``"Conv1d"``,
    ``"LSTM"``, and with a scheme ``"LayerNorm"`` for a norm whose output only the routed
    quantized linears read). ``kind`` is the class name of the torch module the model holds
    (``"Conv1d"``: the Conformer's depthwise convolution, the Whisper front end's two
    convolutions); linear layers are :func:`oasr_linear`'s. The core names no family here: a
    plugin whose family computes that kind of layer answers for it.

    :param kind: the torch module class name (``"Conv1d"``; ``"Conv2d"``: the Conformer's
        subsampling convs, on NHWC ``(B, H, W, C)`` data, when the model is built with
        ``conv2d_frontend``; ``"LayerNorm"``: a pre-norm block's norm, whose output the
        model hands to linear layers only; ``"LSTM"``: asked by :func:`oasr_core.route` only,
        whose answer carries the routed module's ``forward``, :data:`oasr_core.layers.Layer`).
    :param dtype: the deployment's activation dtype as ``--dtype`` spells it (``"fp16"``).
    :param quantization: the model's scheme (``"none"``, ``"int8_w8a8"``, ...). A scheme
        quantizes only the layers its family lists; when no plugin answers for the scheme,
        the core asks again with ``"none"`` (the layer then stays full precision).

    **Returns:** None ("not mine") or a callable *instance* taking ``(x, layer,
    activation=None)``: a **channels-last** activation ``[B, T, C_in]``, the torch module it
    stands for (in eval mode; the model folds a following BatchNorm into a convolution's
    weight and bias before calling), and None or the name of the activation that follows
    (``"relu"``, ``"gelu"``, ``"silu"``). It returns ``activation(layer(x))`` channels-last,
    ``[B, T_out, C_out]`` in ``x``'s dtype, so an engine never transposes around it. It must
    run on the ``meta`` device and call the ops its family records (``Family.recorder_patches``)
    through their module at call time. Without an answer the model runs torch's module on
    ``[B, C, T]`` data, transposing around it, as the published models do.

    ``"LayerNorm"`` is the exception to "returns ``layer(x)``": a quantized scheme's answer may
    return a :class:`oasr_core.layers.NormedRows` (the norm deferred) that the scheme's
    own linear takes, so that the linears after one norm share one fused norm-and-quantize
    pass; any other consumer takes its ``dense()`` tensor. Without an answer the norm is
    torch's.

    **firstresult:** yes. Stops at first non-None result; two plugins serving the same kind
    are ordered with ``tryfirst``/``trylast`` on the implementation.

    **Example:**

    .. code-block:: python

        from oasr_core import hookimpl

        @hookimpl
        def oasr_layer(kind, dtype, quantization):
            if kind != "Conv1d" or quantization != "none":
                return None
            from my_conv import ops

            def conv(x, layer, activation=None):
                return ops.conv1d_activation(x, layer.weight, layer.bias, activation,
                                             stride=layer.stride[0], padding=layer.padding[0],
                                             dilation=layer.dilation[0], groups=layer.groups)

            return conv
    """


@hookspec
def oasr_compile_patterns(quantization: str) -> Iterable[Pattern] | None:
    """Declare the graph sites a family's ops serve inside ``torch.compile(backend="oasr")``.

    **When:** the core calls this when the oasr compile backend
    (:func:`oasr_core.compile.backend`) builds its post-grad pass, once per backend
    instance, after every entry point has loaded; first with the scheme the user asked for
    (``quantization="fp8_w8a8"``), then with ``"none"`` (a layer the scheme does not
    quantize stays full precision). The core finds the sites (linears with their bias,
    activation and residual epilogue; 1-D convolutions with their activation) and names no
    family.

    :param quantization: ``"none"``, or a scheme a family lists in ``Family.quantizations``.

    **Returns:** an iterable of :class:`oasr_core.compile.Pattern` instances (possibly empty;
    ``None``: nothing). Each names a ``kind`` of site (``"linear"``, ``"conv1d"``) and a
    ``serve(site)`` callable returning a :class:`oasr_core.compile.Served` call of one of
    the family's torch custom ops, or None to leave the site to Inductor. ``serve`` must
    decide with ``site.serves(family, op, dims)`` (the tiers' choice at that shape, what the
    op itself would run), so that an untuned shape stays Inductor's. Import torch and the
    ops inside ``serve`` (or the pattern's module), never in the hooks module. A record that
    is not a ``Pattern``, or an implementation that raises, is skipped with one warning.

    **firstresult:** no; every implementation is called and all patterns are kept, in
    plugin order (the first pattern that serves a site takes it).

    **Example:**

    .. code-block:: python

        from oasr_core import hookimpl

        @hookimpl
        def oasr_compile_patterns(quantization):
            if quantization != "none":
                return None
            from oasr_core.compile import Pattern
            from my_gemm import compiled

            return [Pattern(name="my_gemm.linear", family="my_gemm", kind="linear",
                            serve=compiled.serve_linear)]
    """


_QUANTIZED_LINEAR_DEPRECATED = DeprecationWarning(
    "oasr_quantized_linear is deprecated: implement oasr_linear(dtype, quantization), which "
    "serves full-precision and quantized linears alike, and list the scheme in "
    "Family.quantizations")


@hookspec(firstresult=True, warn_on_impl=_QUANTIZED_LINEAR_DEPRECATED)
def oasr_quantized_linear(quantization: str) -> Callable[[Tensor, nn.Linear], Tensor] | None:
    """Provide the quantized linear layer of a quantization scheme, for the census
    (deprecated: implement :func:`oasr_linear`; registering an implementation warns).

    **When:** the core calls this when ``oasr tune census --quantization NAME`` builds one of
    its reference workloads (``conformer``, ``whisper_encoder``), once per model build and
    before any probe: the full-precision reference model is then quantized online, every
    linear layer its GEMM ops serve (projections, feed-forward and pointwise layers) going
    through the returned function, while convolutions and attention stay full precision. A
    plugin-registered workload quantizes itself and never triggers this hook. The core asks
    it only after no :func:`oasr_linear` implementation answered for the scheme; the scheme
    must still be listed in some family's ``Family.quantizations`` for the census to accept it.

    :param quantization: the scheme's name as ``--quantization`` spells it, e.g.
        ``"int8_w8a8"`` or ``"fp8_w8a8"``; never ``"none"``.

    **Returns:** a callable *instance* (a plain function, or an object with ``__call__``;
    never a class for the core to instantiate) taking ``(x, layer)``, an activation
    ``[..., K]`` and the ``torch.nn.Linear`` it stands for, and returning ``layer(x)``
    computed the quantized way, in ``x``'s dtype. It must run on the ``meta`` device (the
    census probes shapes only) and call the op the plugin's family records through its
    ``Family.recorder_patches``, so that the census sees the quantized GEMM under that
    family. ``None`` means "not mine": another plugin may answer; when none does, the census
    stops with a one-line error naming the scheme.

    **firstresult:** yes. Stops at first non-None result; two plugins serving the same scheme
    are ordered with ``tryfirst``/``trylast`` on the implementation.

    **Example:**

    .. code-block:: python

        from oasr_core import hookimpl

        @hookimpl
        def oasr_quantized_linear(quantization):
            if quantization != "int8_w8a8":
                return None
            from my_int8 import ops, quant

            def linear(x, layer):
                xq, x_scale = quant.per_token(x)
                wq, w_scale = quant.per_channel(layer.weight)
                return ops.scaled_mm(xq, wq, x_scale, w_scale, layer.bias, out_dtype=x.dtype)

            return linear
    """
