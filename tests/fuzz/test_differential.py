"""Differential fuzzing of the whole compiler (in the manner of NNSmith).

Random valid ONNX graphs (``graphs.py``) are built for a random ``npu`` target string and run against
llvm (``tvm_npu.build_reference``) and onnxruntime (``oracle.py``). Every case must match, raise one
of the project's own errors, or fall back to the host with a ``HostFallbackWarning``; a foreign
exception, a timeout or a wrong number fails, and hypothesis shrinks it to a minimal graph, printed
as the ``GraphBuilder`` program that rebuilds it (paste it into ``regressions/test_regressions.py``).

The same graphs also run quantized (int8 / uint8 QDQ from onnxruntime's quantizer, and int16 / uint16:
each activation tensor 8 or 16 bits, A16W8: bit-exact against llvm, within a quantization step of
onnxruntime) and converted to fp16 (within a few ulps of llvm); see ``oracle.py``.

The default run is short and deterministic (``derandomize``); the long run is marked ``benchmark``
(``pytest -m benchmark tests/fuzz``, ``FUZZ_EXAMPLES`` cases, default 300, ``FUZZ_PRECISIONS`` a
comma-separated subset of fp32,int8,uint8,fp16,int16,uint16, default fp32); ``benchmarks/fuzz.py`` runs a
campaign in a separate worker process (crashes and hangs included) and saves reproductions.
A case that hits a bug listed in ``known_bugs.py`` does not fail these tests (its strict-xfail
regression test tracks it) but is reported as a ``KnownBugHit`` warning.
"""

from __future__ import annotations

import collections
import os
import warnings

import hypothesis
import numpy as np
import onnx
import pytest
from hypothesis import HealthCheck, given, note, settings
from hypothesis import strategies as st
from onnx import TensorProto

import tvm_npu
from tvm_npu.testing.graphs import (
    OPSETS,
    PRECISIONS,
    TARGET_OPTIONS,
    WIDE,
    GraphBuilder,
    ceil_mode_is_ambiguous,
    graphs,
    pool_out,
    rebuild,
    targets,
)
from tvm_npu.testing.known_bugs import known_bug
from tvm_npu.testing.oracle import (
    OWN_ERRORS,
    model_precision,
    output_units,
    own_errors_cross_ffi,
    random_inputs,
    run_case,
    run_onnxruntime,
)

pytestmark = pytest.mark.slow  # random graphs built for the NPU, llvm and onnxruntime: not in the quick tier

SUPPRESS = [HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much]
#: per case (build for llvm and the NPU, three runs); a hang is a failure, not a stuck suite
CASE_TIMEOUT = 300.0
#: cases per other precision in the default suite (about 2 s each: quantizing, two builds, three runs)
PRECISION_EXAMPLES = 10


class KnownBugHit(UserWarning):
    """A fuzz case hit a bug listed in ``known_bugs.py`` (not a failure: its regression test xfails)."""


def _check(graph, target: str, seed: int, hits: list[str]) -> None:
    note(f"target = {target!r}, input seed = {seed}")
    outcome = run_case(graph.model, target, seed, timeout=CASE_TIMEOUT)
    note(outcome.report())
    bug = known_bug(outcome)
    if bug is not None:
        hits.append(f"{bug.id} ({target!r}): {graph!r}")
        return
    assert outcome.ok, f"{target!r}, input seed {seed}:\n{outcome.report()}"


def _report(hits: list[str]) -> None:
    for hit in dict.fromkeys(hits):
        warnings.warn(f"known bug: {hit}", KnownBugHit, stacklevel=2)


def test_npu_matches_llvm_and_onnxruntime() -> None:
    hits: list[str] = []

    @settings(max_examples=40, deadline=None, derandomize=True, database=None, suppress_health_check=SUPPRESS)
    @given(graph=graphs(), target=targets(), seed=st.integers(0, 2**16))
    def fuzz(graph, target: str, seed: int) -> None:
        _check(graph, target, seed, hits)

    fuzz()
    _report(hits)


@pytest.mark.parametrize("precision", ["int8", "uint8", "fp16", "int16", "uint16"])
def test_npu_matches_in_other_precisions(precision: str) -> None:
    """The generated graphs quantized (QDQ) or converted to fp16: a few cases each (graphs of up to
    five nodes, which build faster); ``benchmarks/fuzz.py --precision`` runs more."""
    hits: list[str] = []

    @settings(max_examples=PRECISION_EXAMPLES, deadline=None, derandomize=True, database=None,
              suppress_health_check=SUPPRESS)
    @given(graph=graphs(max_nodes=5, precisions=(precision,)), target=targets(), seed=st.integers(0, 2**16))
    def fuzz(graph, target: str, seed: int) -> None:
        _check(graph, target, seed, hits)

    fuzz()
    _report(hits)


@pytest.mark.benchmark
def test_npu_matches_llvm_and_onnxruntime_long() -> None:
    """``FUZZ_EXAMPLES`` cases (300), hypothesis seed ``FUZZ_SEED`` (0), ``FUZZ_EXTENDED=1`` for the
    extended target options, ``FUZZ_PRECISIONS`` the precisions drawn (fp32)."""
    hits: list[str] = []
    extended = os.environ.get("FUZZ_EXTENDED", "0") == "1"
    precisions = tuple(os.environ.get("FUZZ_PRECISIONS", "fp32").split(","))
    assert set(precisions) <= set(PRECISIONS), precisions

    @settings(max_examples=int(os.environ.get("FUZZ_EXAMPLES", "300")), deadline=None, database=None,
              suppress_health_check=SUPPRESS)
    @hypothesis.seed(int(os.environ.get("FUZZ_SEED", "0")))
    @given(graph=graphs(precisions=precisions), target=targets(extended), seed=st.integers(0, 2**16))
    def fuzz(graph, target: str, seed: int) -> None:
        _check(graph, target, seed, hits)

    fuzz()
    _report(hits)


# ------------------------------------------------------------------------------ the generator itself
@settings(max_examples=300, deadline=None, derandomize=True, database=None, suppress_health_check=SUPPRESS)
@given(graph=graphs(), target=targets())
def test_generated_graphs_are_valid(graph, target: str) -> None:
    """Checker (full) and strict shape inference pass (``GraphBuilder.model`` checks both), onnxruntime
    runs the graph, every value is finite, the builder program rebuilds the same model, targets parse."""
    model = graph.model
    assert 1 <= len(model.graph.node) <= 8
    assert model.opset_import[0].version in OPSETS
    (x,) = model.graph.input
    assert x.type.tensor_type.shape.dim[0].dim_value in (1, 2)
    outputs = run_onnxruntime(model, random_inputs(model, 0))
    assert all(np.isfinite(o).all() for o in outputs)
    assert rebuild(graph.source).SerializeToString() == model.SerializeToString()
    tvm_npu.parse_target(target)


@settings(max_examples=24, deadline=None, derandomize=True, database=None, suppress_health_check=SUPPRESS)
@given(graph=graphs(max_nodes=5, precisions=PRECISIONS[1:]))
def test_converted_graphs_are_valid(graph) -> None:
    """A quantized or fp16 graph passes the full checker (``convert_precision`` checks), onnxruntime
    runs it (QDQ as written) to finite values, the oracle reads its precision off it (fp32 when the
    quantizer found nothing to quantize, e.g. a lone Relu), and its program, the conversion included,
    rebuilds the same model."""
    model = graph.model
    quantized = any(n.op_type == "QuantizeLinear" for n in model.graph.node)
    wide = any(n.op_type == "QuantizeLinear" and _zero_point_type(model, n) in (TensorProto.INT16, TensorProto.UINT16)
               for n in model.graph.node)
    expected = WIDE[graph.precision] if graph.precision in WIDE and not wide else graph.precision
    assert model_precision(model) == (expected if quantized or graph.precision == "fp16" else "fp32")
    outputs = run_onnxruntime(model, random_inputs(model, 0), basic=graph.precision != "fp16")
    assert all(np.isfinite(o).all() for o in outputs)
    assert rebuild(graph.source).SerializeToString() == model.SerializeToString()


def _zero_point_type(model: onnx.ModelProto, node: onnx.NodeProto) -> int:
    inits = {i.name: i for i in model.graph.initializer}
    return inits[node.input[2]].data_type if len(node.input) > 2 else TensorProto.UINT8


@pytest.mark.parametrize("precision", ["int16", "uint16"])
def test_mixed_graphs_draw_8_and_16_bits_per_tensor(precision: str) -> None:
    """Over a fixed sample of int16 / uint16 graphs: all-16-bit, all-8-bit and mixed graphs appear, the
    mixed ones with an 8 -> 16 and a 16 -> 8-bit boundary (a node reading a dequantized tensor of one width
    whose result is quantized to the other), every 16-bit tensor of the signedness asked for."""
    kinds: collections.Counter[str] = collections.Counter()
    boundaries: set[tuple[int, int]] = set()
    signed = precision == "int16"

    @settings(max_examples=30, deadline=None, derandomize=True, database=None, suppress_health_check=SUPPRESS)
    @given(graph=graphs(max_nodes=4, precisions=(precision,)))
    def sample(graph) -> None:
        model = graph.model
        bits = {n.output[0]: 16 if _zero_point_type(model, n) in (TensorProto.INT16, TensorProto.UINT16) else 8
                for n in model.graph.node if n.op_type == "QuantizeLinear"}
        assert {_zero_point_type(model, n) for n in model.graph.node if n.op_type == "QuantizeLinear"} <= (
            {TensorProto.INT8, TensorProto.INT16} if signed else {TensorProto.UINT8, TensorProto.UINT16})
        if bits:
            kinds[{frozenset({16}): "16", frozenset({8}): "8"}.get(frozenset(bits.values()), "mixed")] += 1
        width = {n.output[0]: bits[n.input[0]] for n in model.graph.node
                 if n.op_type == "DequantizeLinear" and n.input[0] in bits}  # dequantized value: its width
        for n in model.graph.node:
            if n.op_type == "QuantizeLinear" and n.input[0] not in width:  # a quantized operator's result
                producer = next((p for p in model.graph.node if n.input[0] in p.output), None)
                for i in producer.input if producer is not None else ():
                    if i in width:
                        boundaries.add((width[i], bits[n.output[0]]))

    sample()
    assert {"16", "8", "mixed"} <= set(kinds), kinds
    assert {(8, 16), (16, 8), (16, 16)} <= boundaries, boundaries


def test_model_precision_reads_16_bit_activations() -> None:
    """A QDQ model with any 16-bit QuantizeLinear is judged as mixed 8/16 bits, of its signedness."""
    b = GraphBuilder(seed=0, opset=13)
    x = b.input((1, 3, 6, 6))
    t = b.conv(x, out_channels=4, kernel=(3, 3), strides=(1, 1), dilations=(1, 1), pads=(1, 1, 1, 1),
               group=1, bias=True)
    y = b.unary(t, "Relu")  # (the quantizer quantizes the conv and relu as one: y, not t)
    for precision, wide, want in (("int16", (y.name,), "int16"), ("uint16", ("x0",), "uint16"), ("int16", (), "int8")):
        b.precision(precision, wide=wide)
        assert model_precision(b.model()) == want


def test_a_tie_rounded_apart_in_a_float_region_is_ill_conditioned() -> None:
    """Found by the fuzzer (int16): a float average pool of the float input, quantized to int16, lands
    within 5e-4 of a step of a tie (20074.4995 steps); the NPU and llvm sum the window in another order,
    so their float32 results fall either side of it and the 16-bit values differ by one. The tie arbiter
    between the NPU and llvm finds that tensor first, every difference a tie: ill-conditioned, not a
    wrong number (a difference there that is no tie stays a mismatch-vs-llvm)."""
    b = GraphBuilder(seed=6682, opset=13)
    x0 = b.input((1, 7, 7, 13))
    t0 = b.pool(x0, "AveragePool", kernel=(4, 3), strides=(3, 3), pads=(0, 1, 0, 1), count_include_pad=1,
                ceil_mode=0)
    t2 = b.conv(t0, out_channels=7, kernel=(3, 3), strides=(1, 1), dilations=(2, 1), pads=(2, 0, 2, 2), group=1,
                bias=False, batchnorm=True)
    b.binary(t0, t2, "Add")
    b.precision("int16", per_channel=False, calibration_seed=8745, wide=("t0", "t1", "t3"))
    outcome = run_case(b.model(), "npu -fusion=0 -pipeline-stages=1 -layout-pref=NCHW -max-sram-bytes=16384", 77)
    if outcome.status != "match":  # (a plan that sums the window in llvm's order would agree with it)
        assert (outcome.status, outcome.kind) == ("ill-conditioned", "ties"), outcome.report()
        assert "the NPU and llvm differ in is t0_QuantizeLinear_Output: 1/70" in outcome.detail, outcome.detail


def test_fp16_conversion_of_a_max_reading_an_output() -> None:
    """onnxconverter_common keeps Max/Min in fp32 between casts but leaves out the cast of an input that
    is a graph output too: an invalid model (found by the fuzzer); ``convert_precision`` then converts
    Max/Min to fp16 as well."""
    b = GraphBuilder(seed=0, opset=13)
    x = b.input((1, 2, 3, 3))
    t = b.unary(x, "Relu")
    b.binary(t, x, "Max")
    b.output(t)
    b.precision("fp16")
    assert [n.op_type for n in b.model().graph.node] == ["Relu", "Max"]  # (the checker passed)


def test_generator_covers_the_operators() -> None:
    """Over a fixed sample, every operator the brief lists appears (and fan-out, repeated operands)."""
    seen: collections.Counter[str] = collections.Counter()
    fanout = repeated = 0

    @settings(max_examples=200, deadline=None, derandomize=True, database=None, suppress_health_check=SUPPRESS)
    @given(graph=graphs())
    def sample(graph) -> None:
        nonlocal fanout, repeated
        nodes = graph.model.graph.node
        seen.update(n.op_type for n in nodes)
        readers = collections.Counter(i for n in nodes for i in n.input if i)
        fanout += any(k > 1 for name, k in readers.items() if not name.startswith(("w", "bias", "k", "shape")))
        repeated += any(len(n.input) == 2 and n.input[0] == n.input[1] for n in nodes)
        seen.update(f"{n.op_type}:group" for n in nodes if n.op_type == "Conv" and
                    any(a.name == "group" and a.i > 1 for a in n.attribute))

    sample()
    wanted = {"Conv", "Conv:group", "BatchNormalization", "Relu", "Clip", "Sigmoid", "Tanh", "Add", "Sub", "Mul",
              "Max", "Min", "MaxPool", "AveragePool", "GlobalAveragePool", "Flatten", "Gemm", "MatMul"}
    assert wanted <= set(seen), wanted - set(seen)
    assert fanout and repeated, (fanout, repeated)


def test_targets_cover_the_options() -> None:
    seen: set[str] = set()

    @settings(max_examples=100, deadline=None, derandomize=True, database=None)
    @given(target=targets())
    def sample(target: str) -> None:
        seen.update(target.split()[1:])

    sample()
    assert seen == {f"-{k}={v}" for k, values in TARGET_OPTIONS.items() for v in values if v is not None}


def test_pool_output_size_follows_onnx() -> None:
    """The builder's pooling sizes agree with onnx's strict shape inference, ceil_mode included."""
    assert pool_out(5, 2, 2, 0, 0, ceil_mode=False) == 2
    assert pool_out(5, 2, 2, 0, 0, ceil_mode=True) == 3
    assert ceil_mode_is_ambiguous(3, 2, 2, 1, 1)  # a third window would start in the right padding
    assert not ceil_mode_is_ambiguous(5, 2, 2, 0, 0)
    b = GraphBuilder()
    b.pool(b.input((1, 1, 5, 7)), "MaxPool", (2, 3), (2, 2), (0, 1, 0, 1), ceil_mode=1)
    b.model()  # raises if strict shape inference disagrees


# --------------------------------------------------------------------------------- the oracle itself
def test_oracle_classifies_a_simple_graph_as_a_match() -> None:
    b = GraphBuilder(seed=0, opset=13)
    x = b.input((1, 4, 6, 6))
    b.unary(b.conv(x, out_channels=8, kernel=(3, 3), pads=(1, 1, 1, 1)), "Relu")
    outcome = run_case(b.model(), "npu")
    assert outcome.status == "match", outcome.report()
    assert outcome.npu_runs >= 1 and "conv2d" in outcome.npu_layers


def test_oracle_reports_a_fallback() -> None:
    """A 40x40 kernel needs 6400 bytes of weights: more than a 4 KiB SRAM; the conv stays on the host."""
    b = GraphBuilder(seed=0, opset=13)
    b.conv(b.input((1, 1, 40, 40)), out_channels=1, kernel=(40, 40))
    outcome = run_case(b.model(), "npu -max-sram-bytes=4096")
    assert outcome.status == "fallback", outcome.report()
    assert outcome.fallbacks


def test_oracle_tolerates_a_nearly_constant_output() -> None:
    """((x + k) - x) @ W is the same number for both batch rows up to a few ulps: its range is 1e-8, and
    llvm and onnxruntime round differently (found by the fuzzer as a false reference mismatch)."""
    b = GraphBuilder(seed=0, opset=13)
    x0 = b.input((2, 61))
    t0 = b.unary(x0, "Clip", lo=0.0, hi=6.0)
    t1 = b.binary_const(t0, "Mul", shape=(61,), const_first=False)
    t2 = b.binary_const(t1, "Add", shape=(61,), const_first=False)
    t3 = b.binary(t2, t1, "Sub")
    b.matmul_const(t3, out_features=1, bias=False)
    outcome = run_case(b.model(), "npu")
    assert outcome.status == "match", outcome.report()


def test_oracle_settles_cancellation_in_float64() -> None:
    """(x @ x) @ (x @ x) has entries in the hundreds; the conv after it leaves a 0.034 made of cancelling
    terms where llvm (fp32 sums) is 1.2e-4 off the float64 value and the NPU (wide accumulator) 3e-5:
    beyond rtol 1e-4 of each other, found by the fuzzer; not a wrong number of the NPU."""
    b = GraphBuilder(seed=0, opset=13)
    x0 = b.input((1, 1, 14, 14))
    t0 = b.reshape(x0, (1, 14, 14))
    t2 = b.reshape(b.matmul(t0, t0), (1, 1, 14, 14))
    t3 = b.reshape(t2, (1, 14, 14))
    t5 = b.reshape(b.matmul(t3, t3), (1, 1, 14, 14))
    b.conv(t5, out_channels=11, kernel=(2, 1), strides=(1, 1), dilations=(2, 1), pads=(0, 0, 0, 0), group=1,
           bias=False, batchnorm=True)
    outcome = run_case(b.model(), "npu", seed=15)
    assert outcome.status in ("match", "ill-conditioned"), outcome.report()


def test_oracle_catches_a_wrong_number(monkeypatch: pytest.MonkeyPatch) -> None:
    """A compiler that adds 1e-3 to every output is caught against llvm."""
    real = tvm_npu.build_reference

    b = GraphBuilder(seed=0, opset=13)
    x = b.input((1, 2, 3, 3))
    model = b.model([b.unary(x, "Relu")])
    off = onnx.ModelProto.FromString(model.SerializeToString())
    off.graph.initializer.append(onnx.numpy_helper.from_array(np.array(1e-3, np.float32), "eps"))
    off.graph.node.append(onnx.helper.make_node("Add", [off.graph.node[-1].output[0], "eps"], ["y"]))
    off.graph.output[0].name = "y"
    monkeypatch.setattr(tvm_npu, "build", lambda m, target: real(off))
    outcome = run_case(model, "npu")
    assert outcome.status == "failure" and outcome.kind == "mismatch-vs-llvm", outcome.report()


def _quantized_residual(precision: str = "int8") -> onnx.ModelProto:
    """x -> conv -> relu -> add(x, .), and Sub(x, conv): a quantized output and a float one."""
    b = GraphBuilder(seed=0, opset=13)
    x = b.input((1, 4, 6, 6))
    y = b.unary(b.conv(x, out_channels=4, kernel=(3, 3), pads=(1, 1, 1, 1)), "Relu")
    b.binary(x, y, "Add")
    b.binary(x, y, "Sub")
    b.precision(precision, per_channel=True, calibration_seed=0)
    return b.model()


def test_oracle_units_of_quantized_outputs() -> None:
    """The Add's output is dequantized from 8 bits (one step: its scale); the Sub stays float, computed
    from two dequantized tensors, each of which may be a step off: two steps of the larger scale."""
    model = _quantized_residual()
    (add_q, add_step, add_steps), (sub_q, sub_step, sub_steps) = output_units(model)
    assert add_q and add_steps == 1 and add_step > 0
    assert not sub_q and sub_steps == 2 and sub_step > 0
    outcome = run_case(model, "npu")
    assert outcome.status == "match", outcome.report()
    assert outcome.npu_runs >= 1 and "conv2d" in outcome.npu_layers


def test_oracle_catches_one_quantization_step(monkeypatch: pytest.MonkeyPatch) -> None:
    """A compiler whose 8-bit output is one step off (a zero point off by one) is caught against llvm,
    although onnxruntime would accept the step on a few elements."""
    real = tvm_npu.build_reference
    model = _quantized_residual("uint8")
    off = onnx.ModelProto.FromString(model.SerializeToString())
    out = off.graph.output[0].name
    last = next(n for n in off.graph.node if n.op_type == "DequantizeLinear" and n.output[0] == out)
    zero_point = next(onnx.numpy_helper.to_array(i) for i in off.graph.initializer if i.name == last.input[2])
    off.graph.initializer.append(onnx.numpy_helper.from_array(zero_point + np.uint8(1), "zero_point_off"))
    last.input[2] = "zero_point_off"  # the QuantizeLinear before it shares the original
    monkeypatch.setattr(tvm_npu, "build", lambda m, target: real(off))
    outcome = run_case(model, "npu")
    assert outcome.status == "failure" and outcome.kind == "mismatch-vs-llvm", outcome.report()
    assert "steps of" in outcome.detail


def test_oracle_reports_a_quantized_fallback() -> None:
    """A conv with 16-bit activations whose int8 weights have a zero point that moves them outside int8 has
    no integer form: documented fallback to float between dequantize and quantize, and the numbers still
    meet the rules. (The 8-bit broadcast add and then the A16W8 conv this test used to take run as integer
    operators now: issue 28.)"""
    rng = np.random.default_rng(0)
    inits = [onnx.numpy_helper.from_array(np.asarray(v), n) for n, v in [
        ("s", np.float32(0.001)), ("z", np.int16(0)), ("sw", np.float32(0.01)), ("zw", np.int8(100)),
        ("w", rng.integers(-100, 100, (4, 4, 1, 1)).astype(np.int8))]]
    make = onnx.helper.make_node
    nodes = [make("QuantizeLinear", ["x", "s", "z"], ["xq"]), make("DequantizeLinear", ["xq", "s", "z"], ["xd"]),
             make("DequantizeLinear", ["w", "sw", "zw"], ["wd"]), make("Conv", ["xd", "wd"], ["c"]),
             make("QuantizeLinear", ["c", "s", "z"], ["cq"]), make("DequantizeLinear", ["cq", "s", "z"], ["y"])]
    io = [onnx.helper.make_tensor_value_info(n, onnx.TensorProto.FLOAT, [1, 4, 6, 6]) for n in ("x", "y")]
    model = onnx.helper.make_model(onnx.helper.make_graph(nodes, "a16w8", io[:1], io[1:], inits),
                                   opset_imports=[onnx.helper.make_opsetid("", 21)])
    model.ir_version = 10
    outcome = run_case(model, "npu")
    assert outcome.status == "fallback", outcome.report()
    assert any("the weight zero point moves weights outside int8" in f for f in outcome.fallbacks)


def test_oracle_judges_fp16_in_ulps(monkeypatch: pytest.MonkeyPatch) -> None:
    """An fp16 conv matches; a compiler that adds 2% of the output's magnitude (20 ulps) is caught."""
    b = GraphBuilder(seed=0, opset=13)
    b.conv(b.input((1, 8, 6, 6)), out_channels=8, kernel=(3, 3), pads=(1, 1, 1, 1))
    b.precision("fp16")
    model = b.model()
    assert run_case(model, "npu").status == "match"
    real = tvm_npu.build_reference
    off = onnx.ModelProto.FromString(model.SerializeToString())
    magnitude = float(np.abs(run_onnxruntime(model, random_inputs(model, 0))[0].astype(np.float64)).max())
    off.graph.initializer.append(onnx.numpy_helper.from_array(np.array(0.02 * magnitude, np.float16), "eps"))
    off.graph.node.append(onnx.helper.make_node("Add", [off.graph.node[-1].output[0], "eps"], ["y"]))
    off.graph.output[0].name = "y"
    monkeypatch.setattr(tvm_npu, "build", lambda m, target: real(off))
    outcome = run_case(model, "npu")
    assert outcome.status == "failure" and outcome.kind == "mismatch-vs-llvm", outcome.report()


def test_own_errors_keep_their_type_across_the_ffi() -> None:
    """A project error raised in a callback TVM calls comes back as itself while a case runs (and
    as TVM's plain RuntimeError/ValueError otherwise): the classification relies on it."""
    import tvm_ffi
    from tvm_npu.simulator import HazardError

    names = {cls.__name__ for cls in OWN_ERRORS}
    assert {"PlanError", "EmitError", "NoTileFits", "HazardError", "InstructionError", "DeadlockError"} <= names

    def raise_hazard() -> None:
        raise HazardError("read-after-write", "sram[0, 64)", (1, "DMA_LOAD", "dma_load"), (2, "MATMUL", "tensor"),
                          5, 9)

    func = tvm_ffi.convert(raise_hazard)
    with own_errors_cross_ffi(), pytest.raises(HazardError, match="read-after-write"):
        func()
    with pytest.raises(Exception) as info:
        func()
    assert not isinstance(info.value, HazardError)
