"""Converter-made int8 models (TFLite converter -> tf2onnx ``--tflite``, opset 17; issue 15) run entirely
in int8 on the NPU and give onnxruntime's integers.

The models are :mod:`converter_models`' small MobileNetV2- and ResNet-50-like networks in that form
(int8 NHWC input through a Transpose, int32 biases through their own DequantizeLinear, ReLU6 as Clip,
Pad before strided convs and the stem's MaxPool, Squeeze + MatMul classifier), with the softmax head
or a conv's int8 tensor as the NHWC output (many more integers to compare). Checked:

* NPU == llvm (:func:`tvm_npu.build_reference`, the same integer rewrite) bit for bit;
* NPU against onnxruntime at both levels (see :mod:`test_quantized_models`: BASIC runs the QDQ graph in
  float, the default level fuses it into integer kernels): >= 99.9 % of the elements identical and none
  more than 1 step apart (issue 15's bar);
* placements: every conv / matmul on the NPU in int8; nothing on the host, not even the softmax head's
  DQ -> Softmax -> Q (its output scale, TFLite's 1/256, is a power of two); the input Transpose read by
  the first conv's DMA and every Pad folded into the conv's / pool's own padding (with the zero point);
* ``-fusion=2`` and layer groups (``-fusion=3``, small SRAM): still bit-exact, still all on the NPU;
* the symbolic batch tf2onnx writes (``unk__12``), given by ``shapes=`` or bound to 1 with a warning;
* single converter-form convs over drawn shapes, strides, pads, depthwise and activations.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Sequence

import numpy as np
import onnx
import pytest
from converter_models import (
    INPUT,
    INPUT_RANGE,
    SYMBOLIC_BATCH,
    Network,
    converter_model,
    mobilenet_v2_like,
    resnet50_like,
    single_conv,
    tflite_activation_quant,
)
from hypothesis import given, settings
from hypothesis import strategies as st
from test_quantized_models import (  # tests/e2e is on sys.path (pytest's prepend import)
    Agreement,
    QuantRun,
    agreement,
    assert_no_host_gemm,
    eight_bit_share,
    run_npu,
    run_onnxruntime,
    run_vm,
)

import tvm_npu
from tvm_npu.core.ops import Conv2dSpec, EpiKind, MatmulSpec, OpSpec, PoolSpec
from tvm_npu.core.plan import PartitionPlan

pytestmark = pytest.mark.slow  # converter-made int8 networks built and run: the quick tier leaves it out

SIZE, SAMPLES, SEED = 32, 8, 0
#: Issue 15: against onnxruntime, >= 99.9 % of the output elements identical, none more than 1 step off.
#: Measured: the NPU equals onnxruntime's integer kernels on every element here, and BASIC agrees on these
#: inputs; on others BASIC is off from onnxruntime's own integer kernels (32 other inputs of
#: mobilenet_v2-nhwc: 99.895 % identical, up to 6 steps: a float rounding tie decided the other way
#: in one layer, amplified by the next convs). A BASIC failure whose message shows onnxruntime's two
#: levels apart too is the reference's, not the compiler's.
MIN_SAME, MAX_STEPS = 0.999, 1
NETWORKS = {"mobilenet_v2": mobilenet_v2_like, "resnet50": resnet50_like}
CASES = [f"{net}-{head}" for net in NETWORKS for head in ("softmax", "nhwc")]
#: The padding of the conv that reads the graph input: TF "SAME" at stride 2 / the stem's Pad(3) folded in.
FIRST_CONV_PADDING = {"mobilenet_v2": (0, 0, 1, 1), "resnet50": (3, 3, 3, 3)}
INPUT_ZERO_POINT = tflite_activation_quant(*INPUT_RANGE).zero_point


# ----------------------------------------------------------------------------------- helpers
def int8_inputs(shape: Sequence[int], count: int, seed: int = 100) -> list[np.ndarray]:
    """Seeded quantized images over the whole int8 range (what calibration's [-1, 1] maps to)."""
    rng = np.random.default_rng(seed)
    return [rng.integers(-128, 128, tuple(shape)).astype(np.int8) for _ in range(count)]


def input_shape(model: onnx.ModelProto, batch: int = 1) -> tuple[int, ...]:
    dims = model.graph.input[0].type.tensor_type.shape.dim
    return (batch, *(d.dim_value for d in dims[1:]))


def compare_with_onnxruntime(npu: np.ndarray, model: onnx.ModelProto, inputs: Sequence[np.ndarray], *,
                             basic: bool) -> tuple[Agreement, Agreement]:
    """(NPU vs onnxruntime at the level, onnxruntime BASIC vs its own integer kernels): the second says
    how far the two references are apart on the same inputs."""
    levels = agreement(run_onnxruntime(model, inputs, basic=True), run_onnxruntime(model, inputs, basic=False))
    return agreement(npu, run_onnxruntime(model, inputs, basic=basic)), levels


def gemm_specs(plans: Sequence[PartitionPlan]) -> list[Conv2dSpec | MatmulSpec]:
    return [op.spec for plan in plans for op in plan.ops if isinstance(op.spec, Conv2dSpec | MatmulSpec)]


def operands_8bit(spec: Conv2dSpec | MatmulSpec) -> bool:
    """8-bit operands, the accumulator requantised on the NPU (the head's matmul then dequantizes in float32)."""
    data, weight = (spec.data, spec.weight) if isinstance(spec, Conv2dSpec) else (spec.a, spec.b)
    return data.dtype.is_quantized and weight.dtype.is_quantized and any(e.kind == EpiKind.REQUANT
                                                                         for e in spec.epilogue)


def reads_graph_input(spec: OpSpec, plan: PartitionPlan, shape: Sequence[int]) -> bool:
    """``spec`` reads the NHWC graph input straight from its DRAM tensor: as NHWC data, or through a
    strided view of it (the Transpose folded into the DMA)."""
    graph_inputs = {t.name for t in plan.inputs if tuple(t.shape) == tuple(shape)}
    data = spec.data
    return (data.name in graph_inputs and data.layout == "NHWC") or \
        (data.view is not None and data.view.base in graph_inputs)


def network(case: str, size: int = SIZE) -> Network:
    net, head = case.split("-")
    return NETWORKS[net](size, head)


@functools.cache
def converted(case: str) -> QuantRun:
    """Build and run each case once for all the tests that read it."""
    model = converter_model(network(case), SEED)
    inputs = int8_inputs(input_shape(model), SAMPLES)
    executable, info = tvm_npu.build_with_info(model, "npu")
    npu, layers = run_npu(executable, inputs)
    return QuantRun(model, inputs, npu, run_vm(tvm_npu.build_reference(model), inputs), layers, info)


@pytest.fixture(scope="module", params=CASES)
def case(request: pytest.FixtureRequest) -> tuple[str, QuantRun]:
    return request.param, converted(request.param)


# ------------------------------------------------------------------------------------- numerics
def test_the_builder_writes_the_converter_form() -> None:
    """The checks below are only as good as the form: the nodes tf2onnx writes, in its arrangement."""
    model = converter_model(network("resnet50-softmax", 16), SEED, batch=SYMBOLIC_BATCH)
    graph = model.graph
    inits = {t.name: onnx.numpy_helper.to_array(t) for t in graph.initializer}
    ops = [n.op_type for n in graph.node if not (n.op_type == "DequantizeLinear" and n.input[0] in inits)]
    assert ops[:6] == ["DequantizeLinear", "Pad", "QuantizeLinear", "Transpose", "DequantizeLinear", "Conv"]
    assert ops[-7:] == ["Squeeze", "DequantizeLinear", "MatMul", "QuantizeLinear", "DequantizeLinear", "Softmax",
                        "QuantizeLinear"]
    dims = graph.input[0].type.tensor_type.shape.dim
    assert graph.input[0].type.tensor_type.elem_type == onnx.TensorProto.INT8 and dims[0].dim_param == SYMBOLIC_BATCH
    biases = [n for n in graph.node if n.op_type == "DequantizeLinear" and inits.get(n.input[0], np.float32(0)).dtype
              == np.int32]
    assert len(biases) == sum(n.op_type == "Conv" for n in graph.node)  # every conv's bias: int32 through a DQ
    for n in biases:
        assert not inits[n.input[2]].any() and inits[n.input[1]].dtype == np.float32
    relu_zero_points = {int(inits[n.input[2]]) for n in graph.node if n.op_type == "QuantizeLinear"
                        and n.input[0].startswith("relu")}
    assert relu_zero_points == {-128}  # TFLite's asymmetric ranges: a Relu's output starts at the bottom


def test_npu_is_bit_exact_with_llvm(case: tuple[str, QuantRun]) -> None:
    """The llvm reference runs the same integer rewrite: any difference is a compiler bug."""
    name, run = case
    assert run.npu.dtype == np.int8 and run.npu.shape == run.llvm.shape
    diff = agreement(run.npu, run.llvm)
    print(f"\n{name}: NPU vs llvm: {diff}")
    assert diff.same == diff.total, f"{name}: NPU vs llvm: {diff}"


@pytest.mark.parametrize("basic", [True, False], ids=["ORT_ENABLE_BASIC", "default_level"])
def test_npu_matches_onnxruntime(case: tuple[str, QuantRun], basic: bool) -> None:
    """Issue 15's bar against an independent implementation, at both of its levels."""
    name, run = case
    got, levels = compare_with_onnxruntime(run.npu, run.model, run.inputs, basic=basic)
    what = f"{name}: NPU vs onnxruntime {'BASIC' if basic else 'default level'}: {got} " \
           f"(onnxruntime BASIC vs its own integer kernels: {levels})"
    print("\n" + what)
    assert got.max_steps <= MAX_STEPS and got.share >= MIN_SAME, what


# ------------------------------------------------------------------------------------ placements
def test_every_conv_and_matmul_runs_int8_on_the_npu(case: tuple[str, QuantRun]) -> None:
    """A layer left in float would still give the right numbers, 4x slower: only placements show it."""
    name, run = case
    specs = gemm_specs(run.info.plans)
    floats = [(s.name, s.out.dtype.name) for s in specs if not operands_8bit(s)]
    assert not floats, f"{name}: convs / matmuls not in 8-bit: {floats}"
    onnx_gemms = sum(n.op_type in ("Conv", "MatMul") for n in run.model.graph.node)
    assert len(specs) >= onnx_gemms, f"{name}: {len(specs)} NPU convs / matmuls for the model's {onnx_gemms}"
    assert eight_bit_share(run.layers) == 1.0, [(x.op, x.dtype, x.macs) for x in run.layers]
    assert_no_host_gemm(run.info)


def test_the_whole_model_is_one_npu_partition(case: tuple[str, QuantRun]) -> None:
    """Tensors stay int8 on the NPU from the graph input to the output: no host Q / DQ / pad / permute,
    the softmax head included, no layout transform, one partition."""
    name, run = case
    info = run.info
    print(f"\n{name}: host {info.host_ops}; NPU {info.npu_ops}; {info.partitions} partition(s)")
    assert info.host_ops == {} and info.layout_transforms == 0 and info.partitions == 1, \
        f"{name}: on the host {info.host_ops}, {info.layout_transforms} layout transforms, {info.partitions} partitions"


def test_every_residual_add_runs_in_a_conv_epilogue(case: tuple[str, QuantRun]) -> None:
    """A residual ``Add(DQ(a), DQ(b)) -> Q`` is a QADD step of the conv computing one of its tensors: when
    the other tensor (the block input) is read again by the next block, the add goes onto the conv of the
    tensor it was written second with (QADD_R, the same float32 sums in the same order); no add runs as an
    operator of its own (a DRAM round trip of a whole activation)."""
    name, run = case
    ops = [op.spec for p in run.info.plans for op in p.ops]
    adds = [s for s in ops for e in s.epilogue if e.kind in (EpiKind.QADD, EpiKind.QADD_R)]
    assert adds and all(isinstance(s, Conv2dSpec) for s in adds), \
        f"{name}: residual adds in {[(s.name, type(s).__name__) for s in adds]}"
    assert any(e.kind == EpiKind.QADD_R for s in adds for e in s.epilogue), name


def test_input_transpose_and_pads_fold_into_the_first_conv(case: tuple[str, QuantRun]) -> None:
    """The first conv's DMA reads the NHWC int8 input itself (the Transpose is its strides), with the
    Pad / TF "SAME" padding as its own, filled with the input's zero point; ResNet's stem Pad becomes
    the MaxPool's padding."""
    name, run = case
    net = name.split("-")[0]
    plan = run.info.plans[0]
    first = plan.ops[0].spec
    assert isinstance(first, Conv2dSpec), plan.text()
    assert reads_graph_input(first, plan, input_shape(run.model)), \
        f"{name}: the first conv reads {first.data}, not the NHWC input\n{plan.text()}"
    assert (first.padding, first.pad_value) == (FIRST_CONV_PADDING[net], INPUT_ZERO_POINT), \
        f"{name}: first conv padding {first.padding} with {first.pad_value}"
    if net == "resnet50":
        pools = [op.spec for p in run.info.plans for op in p.ops if isinstance(op.spec, PoolSpec)
                 and op.spec.kernel == (3, 3)]
        assert [(p.padding, p.strides, p.data.dtype.is_quantized) for p in pools] == [((1, 1, 1, 1), (2, 2), True)]


@pytest.mark.parametrize("options", ["-fusion=2", "-fusion=3 -max-sram-bytes=65536"])
@pytest.mark.parametrize("name", [c for c in CASES if c.endswith("nhwc")])
def test_fusion_levels_stay_int8_on_the_npu(name: str, options: str) -> None:
    """Intermediates kept on chip (2) and layer groups in a small SRAM (3, what the Vela comparison
    runs): the same integers, nothing more on the host, and groups actually formed."""
    run = converted(name)
    executable, info = tvm_npu.build_with_info(run.model, f"npu {options}")
    diff = agreement(run_vm(executable, run.inputs), run.llvm)
    assert diff.same == diff.total, f"{name} {options}: NPU vs llvm: {diff}"
    assert info.host_ops == {}, f"{name} {options}: on the host: {info.host_ops}"
    if "-fusion=3" in options:
        assert any(plan.groups for plan in info.plans), f"{name} {options}: no layer group formed"


# --------------------------------------------------------------------------------- symbolic batch
def test_symbolic_batch_given_or_bound_to_one() -> None:
    """tf2onnx's ``unk__12`` batch: ``shapes=`` compiles batch 2 (onnxruntime's integers); without it
    the batch is 1 with a warning naming the input."""
    model = converter_model(network("mobilenet_v2-nhwc", 16), SEED, batch=SYMBOLIC_BATCH)
    inputs = int8_inputs(input_shape(model, batch=2), 2)
    executable, info = tvm_npu.build_with_info(model, "npu", shapes={INPUT: input_shape(model, batch=2)})
    got, _ = compare_with_onnxruntime(run_vm(executable, inputs), model, inputs, basic=False)
    assert got.max_steps <= MAX_STEPS and got.share >= MIN_SAME, f"batch 2 vs onnxruntime: {got}"
    assert info.host_ops == {}, info.host_ops
    with pytest.warns(tvm_npu.SymbolicShapeWarning, match=re.escape(INPUT)):
        executable = tvm_npu.build(model, "npu")
    one = int8_inputs(input_shape(model), 1)
    got, _ = compare_with_onnxruntime(run_vm(executable, one), model, one, basic=False)
    assert got.max_steps <= MAX_STEPS and got.share >= MIN_SAME, f"batch 1 vs onnxruntime: {got}"


# --------------------------------------------------------------------------------- drawn convs
@settings(max_examples=6, deadline=None)
@given(size=st.integers(6, 20), channels=st.integers(1, 8), out_c=st.integers(1, 24), k=st.sampled_from([1, 3, 5]),
       stride=st.sampled_from([1, 2]), pads=st.lists(st.integers(0, 4), min_size=4, max_size=4),
       depthwise=st.booleans(), act=st.sampled_from(["relu", "relu6", None]))
def test_single_converter_conv(size: int, channels: int, out_c: int, k: int, stride: int, pads: list[int],
                               depthwise: bool, act: str | None) -> None:
    """``Transpose -> DQ -> Conv(+bias) [-> Relu | Clip] -> Q -> Transpose`` over shapes, strides, pads
    (padding up to the kernel extent, asymmetric), depthwise or not: one NPU conv reading and writing
    NHWC through its DMA, onnxruntime's integers."""
    pads = [min(p, k - 1) for p in pads]
    model = converter_model(single_conv(size, channels, out_c, k, stride, pads, depthwise, act), SEED)
    inputs = int8_inputs(input_shape(model), 2)
    executable, info = tvm_npu.build_with_info(model, "npu")
    got, _ = compare_with_onnxruntime(run_vm(executable, inputs), model, inputs, basic=False)
    assert got.max_steps <= MAX_STEPS and got.share >= MIN_SAME, f"vs onnxruntime's integer kernels: {got}"
    assert info.host_ops == {} and info.layout_transforms == 0, info.host_ops
    (plan,) = info.plans
    (conv,) = gemm_specs([plan])
    assert operands_8bit(conv) and reads_graph_input(conv, plan, input_shape(model)), plan.text()
    assert conv.padding == tuple(pads) and (conv.pad_value == INPUT_ZERO_POINT or not any(pads)), \
        (conv.padding, conv.pad_value)
