"""The ``tvm-npu`` command line: compile, run, profile, benchmark, quantize and compare models for the simulated NPU.

Every figure comes from :mod:`tvm_npu.tools.bench`, which the scripts in ``benchmarks/`` share,
so the command line and the benchmarks cannot disagree. Errors are reported as one line
on stderr with exit status 1 (``--verbose`` adds the traceback); progress bars go to
stderr, and only when it is a terminal.
"""

from __future__ import annotations

import argparse
import functools
import json
import statistics
import sys
import textwrap
import traceback
import warnings
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path

import numpy as np
import onnx
import tvm

from tvm_npu.compiler.driver import host_target
from tvm_npu.compiler.onnx_import import bind_input_shapes
from tvm_npu.compiler.shapes import check_shapes, parse_input_shapes
from tvm_npu.config import parse_target, target_help
from tvm_npu.models.light import randomize_weights
from tvm_npu.relay_patterns import HostFallbackWarning
from tvm_npu.report.layers import ModelReport, partition_labels, report
from tvm_npu.report.roofline import plot_roofline
from tvm_npu.report.trace import chrome_trace
from tvm_npu.runtime import jit
from tvm_npu.runtime.execute import PartitionRun, Profile
from tvm_npu.runtime.npu_module import load_module
from tvm_npu.tools.bench import (
    BUNDLED,
    LoadedModel,
    TensorSpec,
    bench,
    build_model,
    check_inputs,
    compare,
    default_inputs,
    elapsed_bar,
    end_to_end,
    host_latency,
    host_text,
    input_shapes,
    library_inputs,
    model_inputs,
    model_report,
    op_counts,
    profile_model,
    random_inputs,
    read_inputs,
    resolve_model,
    runnable_host,
    runnable_triple,
    show_progress,
    wall_time,
)
from tvm_npu.tools.export import export_library
from tvm_npu.tools.inspection import inspect_model
from tvm_npu.tools.precision_search import choose_precisions
from tvm_npu.tools.quant_error import ENGINES, layer_errors, match_tensors, reference_engine, table
from tvm_npu.tools.quantize import (
    ACTIVATIONS,
    INSTALL_HINT,
    MIN_OPSET,
    calibration_samples,
    npz_samples,
    opset,
    qdq_counts,
    quantize_model,
    random_samples,
    require_onnxruntime,
)
from tvm_npu.tools.shape_runs import (
    ShapeOptions,
    bench_shape,
    jit_lines,
    measure_shape,
    model_jit_lines,
    run_shapes,
    shape_inputs,
    shape_options,
    shapes_text,
)
from tvm_npu.tools.sqnr_report import layer_sqnr, plot_sqnr, sqnr_table

PROG = "tvm-npu"
DEMO_MODEL = "tiny_convnet"
RTOL, ATOL = 1e-4, 1e-5  # the project's float32 tolerance against llvm


def _target_epilog() -> str:
    rows = target_help()
    width = max(len(k) for k, _, _ in rows)
    lines = [f"  {key.ljust(width)}  {meaning} (default {default})" for key, default, meaning in rows]
    return "target options (--target 'npu -key=value ...'):\n" + "\n".join(lines)


def _model_args(p: argparse.ArgumentParser, several: str = "run") -> None:
    p.add_argument("model", metavar="MODEL",
                   help=f"an ONNX model file (.onnx), or a bundled model name: {', '.join(BUNDLED)}")
    p.add_argument("--target", default="npu",
                   help="NPU target: 'npu' followed by -key=value options, listed below (default: %(default)s)")
    p.add_argument("--randomize-weights", type=int, metavar="SEED",
                   help="replace the model's constant weights by seeded random values first (the light "
                        "models ship with constant weights, whose outputs a broken compiler can also match)")
    _input_shape_arg(p, several=several)


def _host_arg(p: argparse.ArgumentParser, runs: bool = True) -> None:
    p.add_argument("--host-target", metavar="LLVM",
                   help="llvm target of the operators left on the host: TVM's dict form as JSON "
                        "('{\"kind\": \"llvm\", \"mcpu\": \"znver3\", \"num-cores\": 2}') or "
                        "'llvm -mcpu=znver3 -num-cores=2' (default: generic llvm for this machine)"
                        + ("; it must run here (the host part is measured)" if runs else
                           "; an -mtriple of another machine cross-compiles (export to a .tar of objects)"))


def _input_shape_arg(p: argparse.ArgumentParser, library: bool = False, several: str = "") -> None:
    p.add_argument("--input-shape", action="append", default=[], metavar="NAME=D0,D1,...",
                   help=("shape of an input with symbolic dimensions, for the random inputs (repeatable)" if library
                         else "static shape of an input, binding its symbolic dimensions (repeatable; without it a "
                              "symbolic batch dimension is 1, with a warning, and a model with any other symbolic "
                              "dimension is built once for every shape, its NPU partitions compiled on first call"
                         + ("; the same input repeated: several shapes, each "
                            + {"compile": "compiled ahead of time into the library",
                               "tune": "tuned (the records apply to run-time compiles of the same operators)",
                               "inspect": "listed as compiled ahead; operators shown at the first",
                               }.get(several, "run: first call against steady state")
                            if several else "") + ")"))


def _inputs_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("--inputs", metavar="NPZ", type=Path,
                   help="input arrays (.npz), by input name or saved positionally with np.savez(path, *arrays); "
                        "default: the ONNX backend-test inputs (arange / size)")


_Command = Callable[..., argparse.ArgumentParser]


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of every subcommand (also used to render ``--help``)."""
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("-v", "--verbose", action="store_true", help="on error, print the full traceback")
    parser = argparse.ArgumentParser(prog=PROG, description="Compile, run, profile, benchmark, quantize and "
                                     "compare models for the simulated NPU.",
                                     formatter_class=argparse.RawDescriptionHelpFormatter,
                                     epilog=f"run '{PROG} COMMAND --help' for each command's options")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    command = functools.partial(_subcommand, sub, common)
    for add in (_compile_command, _inspect_command, _run_command, _profile_command, _bench_command, _tune_command,
                _quantize_command, _compare_command, _demo_command):
        add(command)
    return parser


def _subcommand(sub: argparse._SubParsersAction, common: argparse.ArgumentParser, name: str, summary: str,
                details: str, targets: bool = True) -> argparse.ArgumentParser:
    """A subcommand's parser: its one-line summary, then its details, then the target options unless
    ``targets`` is False; with the ``common`` options (``-v``)."""
    return sub.add_parser(name, parents=[common], help=summary,
                          description=f"{summary}\n{textwrap.dedent(details)}",
                          formatter_class=argparse.RawDescriptionHelpFormatter,
                          epilog=_target_epilog() if targets else None)


def _compile_command(command: _Command) -> None:
    """The ``compile`` subcommand and its arguments."""
    p = command("compile", "Compile an ONNX model for the NPU and export it as a shared library.", """
        Prints which operators went to the NPU and which stayed on the host (llvm), the share
        of MACs on the NPU and the time of every build stage. Load the library with
        'tvm-npu run', or in Python after 'import tvm_npu' with tvm_npu.runtime.npu_module.load_module.""")
    _model_args(p, "compile")
    p.add_argument("-o", "--output", required=True, type=Path, metavar="LIB.so",
                   help="shared library to write (.tar: the object files, unlinked, e.g. of a cross build)")
    _host_arg(p, runs=False)
    p.add_argument("--database", type=Path, metavar="DIR",
                   help="apply what 'tvm-npu tune' recorded in this work directory for the same target")
    p.add_argument("--dump-dir", type=Path, metavar="DIR",
                   help="write every intermediate form there: Relax IR after each stage and, per NPU operator, "
                        "its spec, scheduled and lowered TIR, schedule trace and program disassembly")
    p.set_defaults(func=cmd_compile)


def _inspect_command(command: _Command) -> None:
    """The ``inspect`` subcommand and its arguments."""
    p = command("inspect", "Show a model's inputs and outputs, where each operator runs, and its device memory.", """
        Lists the inputs and outputs (names, shapes, dtypes; initializers are weights, not
        inputs), every operator in program order: on the NPU (which partition, the epilogue
        fused into it) or on the host (llvm) and why (an unsupported operator, dtype or
        attribute, or no tile fitting -max-sram-bytes), the MACs on each side, the
        partitions, and what the model needs on the device: DRAM for the weights, the peak of
        the live activations and the NPU programs, and the SRAM high-water mark. Runs the
        build up to the NPU code generation (the host part is not compiled). A model with
        symbolic dimensions also gets them listed (where they are, the shapes compiled ahead),
        its operators shown at one shape. MODEL may also be a library written by 'tvm-npu
        compile' (LIB.so): its inputs and, when it was built for every shape, its symbolic
        dimensions, their bounds, the compiled shapes and the tuning records it keeps.""")
    _model_args(p, "inspect")
    p.add_argument("--json", type=Path, metavar="OUT.json", help="also write everything as JSON")
    p.set_defaults(func=cmd_inspect)


def _run_command(command: _Command) -> None:
    """The ``run`` subcommand and its arguments."""
    p = command("run", "Run an exported model (NPU partitions on the simulator, the rest on the CPU).", """
        Prints a summary of every output and the simulated NPU time; '--stats' adds the
        simulator's statistics for every NPU partition run. The target is the one the
        library was compiled for.""", targets=False)
    p.add_argument("library", metavar="LIB.so", type=Path, help="a library written by 'tvm-npu compile'")
    given = p.add_mutually_exclusive_group()
    given.add_argument("--inputs", type=Path, metavar="NPZ",
                       help="input arrays (.npz), by input name or saved positionally with np.savez(path, *arrays); "
                            "without it (or --random-inputs) the command lists the inputs the model takes")
    given.add_argument("--random-inputs", type=int, metavar="SEED",
                       help="run on seeded random inputs: standard normal for float inputs, the whole range for "
                            "8-bit integers")
    p.add_argument("-o", "--output", type=Path, metavar="OUT.npz", help="save the outputs as output_0, output_1, ...")
    _input_shape_arg(p, library=True)
    p.add_argument("--stats", action="store_true",
                   help="print per NPU partition run: cycles, roofline bound and efficiency, DMA traffic and "
                        "descriptors, wasted burst bytes, SRAM high-water mark, instructions, engine utilisation")
    p.set_defaults(func=cmd_run)


def _profile_command(command: _Command) -> None:
    """The ``profile`` subcommand and its arguments."""
    p = command("profile", "Build, run once with a timeline and report every NPU layer against the roofline.", """
        Prints first the end-to-end latency of one inference (the simulated NPU part plus the
        host part measured on this CPU, median of --repeat runs, and its operators), then
        the per-layer table (MACs, DRAM traffic, SRAM peak, the cycles in which the layer's
        instructions work with their span and the overlap with other layers, the datasheet
        bound, efficiency and the binding resource, the bound on the engines that run the layer
        and the efficiency against it), one row per layer group
        (-fusion=3: slicing, SRAM peak, DRAM bytes saved, cycles against the group's bound and
        the planner's prediction), the whole-model figures and the device memory as 'inspect'
        shows it (weights, peak live activations, NPU programs, SRAM high-water).""")
    _model_args(p)
    _inputs_arg(p)
    p.add_argument("--trace", type=Path, metavar="OUT.json",
                   help="write the timeline as a Chrome/Perfetto trace (one process per partition run; "
                        "open it in ui.perfetto.dev)")
    p.add_argument("--plot", type=Path, metavar="ROOFLINE.png",
                   help="write a roofline plot: per layer, MACs per DRAM byte against achieved MACs per cycle, "
                        "under the compute roof and the DRAM bandwidth slope")
    p.add_argument("--json", type=Path, metavar="REPORT.json",
                   help="write the report as JSON: {'model': {...}, 'layers': [{...}, ...], 'groups': [{...}, ...]}")
    p.add_argument("--timing-only", action="store_true",
                   help="skip the NPU numerics (faster; the cycles are identical, the outputs are not computed)")
    p.add_argument("--repeat", type=int, default=5, metavar="N",
                   help="runs timing the host part; the median is reported (default: %(default)s)")
    _host_arg(p)
    p.set_defaults(func=cmd_profile)


def _bench_command(command: _Command) -> None:
    """The ``bench`` subcommand and its arguments."""
    p = command("bench", "End-to-end latency of the NPU build against llvm and onnxruntime on this CPU.", """
        Prints first the end-to-end latency of one inference: the NPU part (simulated, at the
        configured clock) plus the host part (measured on this CPU: the run's wall time minus
        the time inside NPU calls; median of --repeat runs) and which operators the host part
        runs. Then the references, each the median of --repeat runs: TVM's untuned default
        llvm build of the same model, and onnxruntime on the CPU with 1 thread and with every
        core (ONNX models; needs 'pip install "tvm-npu[benchmark]"'). Then build times, the
        largest difference between the NPU's and llvm's outputs, the share of MACs on the
        NPU, the simulator's wall time per inference and the roofline efficiency.""")
    _model_args(p)
    _inputs_arg(p)
    p.add_argument("--repeat", type=int, default=10, metavar="N",
                   help="timed runs of the NPU build's host part, llvm and onnxruntime, each after one warm-up; "
                        "the medians are reported (default: %(default)s)")
    p.add_argument("--json", type=Path, metavar="OUT.json", help="also write the figures as JSON")
    _host_arg(p)
    p.set_defaults(func=cmd_bench)


def _tune_command(command: _Command) -> None:
    """The ``tune`` subcommand and its arguments."""
    p = command("tune", "Autotune the model's NPU operators and plans with TVM's meta_schedule.", """
        Every distinct NPU operator is a meta_schedule task: its template's parameters (tile
        sizes, loop order, pipeline stages, engine) are searched by evolutionary search with an
        XGBoost cost model, each candidate compiled and timed on the simulator (timing-only:
        cycles are deterministic). Then the plan of every partition (fusion level, layer groups
        and their slice counts) is searched by measuring whole partitions. Everything goes to
        --work-dir (meta_schedule's JSON database plus npu_plans.json); an interrupted run
        keeps what it measured. Measurement runs in one process per core, or on the servers
        registered with a TVM RPC tracker (--rpc; start servers with
        'python -m tvm_npu.tuning.rpc_server --tracker HOST:PORT --key npu-sim').
        Apply with 'tvm-npu compile MODEL --database DIR' or build(..., database=DIR).""")
    _model_args(p, "tune")
    p.add_argument("--work-dir", required=True, type=Path, metavar="DIR",
                   help="tuning work directory (created; records of other targets in it are kept and ignored)")
    p.add_argument("--trials", type=int, default=64, metavar="N",
                   help="meta_schedule's global trial budget for the operators (default: %(default)s)")
    p.add_argument("--rpc", metavar="HOST:PORT", help="measure through the TVM RPC tracker at HOST:PORT")
    p.add_argument("--key", default="npu-sim", help="the servers' key at the tracker (default: %(default)s)")
    p.add_argument("--workers", type=int, metavar="N", help="local measuring processes (default: one per core)")
    p.add_argument("--no-plans", action="store_true", help="tune the operators only, not the partitions' plans")
    p.add_argument("--timeout", type=float, default=600.0, metavar="SECONDS",
                   help="a candidate's build or measurement taking longer is a failed trial (default: %(default)s)")
    p.set_defaults(func=cmd_tune)


def _quantize_command(command: _Command) -> None:
    """The ``quantize`` subcommand and its arguments."""
    p = command("quantize", "Quantize an fp32 ONNX model to int8 QDQ with onnxruntime's quantize_static.", f"""
        Weights are symmetric int8, per output channel unless --per-tensor; activations are
        asymmetric int8 or uint8, their ranges calibrated (min/max) on --calibration arrays
        or on --random seeded standard-normal inputs. Models below opset {MIN_OPSET} are upgraded
        first; batch-norms are folded into their convolutions. The fp32 tensor names are
        kept, so '{PROG} compare' can match every layer.
        Needs onnxruntime: {INSTALL_HINT}.""",
                targets=False)
    p.add_argument("model", metavar="MODEL",
                   help=f"an fp32 ONNX model file (.onnx), or a bundled model name: {', '.join(BUNDLED)}")
    p.add_argument("-o", "--output", required=True, type=Path, metavar="OUT.onnx", help="quantized model to write")
    source = p.add_mutually_exclusive_group(required=True)
    source.add_argument("--calibration", type=Path, metavar="NPZ",
                        help="calibration arrays (.npz) named by graph input, each one sample or N samples "
                             "along a leading axis")
    source.add_argument("--random", type=int, metavar="N",
                        help="calibrate on N seeded standard-normal samples of every input")
    p.add_argument("--seed", type=int, default=0, help="seed of --random (default: %(default)s)")
    p.add_argument("--activations", choices=ACTIVATIONS, default="int8",
                   help="activation type (default: %(default)s)")
    p.add_argument("--per-tensor", action="store_true", help="one scale per weight tensor, not per output channel")
    p.add_argument("--exclude", action="append", default=[], metavar="NODE",
                   help="leave node NODE in float (repeatable): its name, or an unnamed node's first output")
    p.add_argument("--target-sqnr", type=float, metavar="DB",
                   help="choose 16-bit activations (A16W8) for the tensors that add most output error per NPU "
                        "cycle until the output's SQNR against fp32 on the calibration samples reaches DB; "
                        "prints the choices")
    _input_shape_arg(p)
    p.set_defaults(func=cmd_quantize)


def _compare_command(command: _Command) -> None:
    """The ``compare`` subcommand and its arguments."""
    p = command("compare", "Layer-by-layer error of a quantized or fp16 ONNX model against its fp32 reference.", """
        Matches every fp32 tensor of the reference with the tensor of MODEL that carries it
        (the DequantizeLinear output of a QDQ model from 'tvm-npu quantize', or the same name
        in an fp16 model), runs both on the same input and prints per tensor, in graph order:
        max and mean |error|, SNR in dB, cosine similarity and, for QDQ tensors, max |error|
        in quantization steps. MODEL runs on the NPU simulator (--engine npu) or on
        onnxruntime (--engine onnxruntime: the QDQ graph as written, so the quantization
        error alone, without the compiler's); the reference on onnxruntime, or on llvm
        without it. Every compared tensor becomes a graph output, so on the NPU each one
        leaves the chip to DRAM and is not fused with its consumers: the numbers are those
        of the model, the placement and cycles are not.""")
    p.add_argument("model", metavar="MODEL", help="the quantized (QDQ) or fp16 ONNX model (.onnx); in the "
                   "two-model form, the fp32 model")
    p.add_argument("quantized", nargs="?", metavar="QUANTIZED",
                   help="two-model form (MODEL QUANTIZED): per quantized layer, the SQNR of QUANTIZED against "
                        "MODEL accumulated and of the layer alone on MODEL's inputs, beside its cycles in int8, "
                        "16-bit and fp16 by the datasheet bound; both run on onnxruntime, on --inputs or "
                        "--samples seeded standard-normal samples")
    p.add_argument("--reference", metavar="REFERENCE",
                   help=f"the fp32 model it was made from (.onnx, or a bundled name: {', '.join(BUNDLED)})")
    p.add_argument("--samples", type=int, default=8, metavar="N",
                   help="two-model form without --inputs: N random samples (default: %(default)s)")
    p.add_argument("--plot", type=Path, metavar="FILE.png", help="two-model form: also plot the figures")
    given = p.add_mutually_exclusive_group()
    given.add_argument("--inputs", type=Path, metavar="NPZ",
                       help="input arrays (.npz) named by graph input (with a leading sample axis, the first "
                            "sample is used)")
    given.add_argument("--seed", type=int, default=0,
                       help="seed of the standard-normal inputs used without --inputs (default: %(default)s)")
    _input_shape_arg(p)
    p.add_argument("--target", default="npu",
                   help="NPU target: 'npu' followed by -key=value options, listed below (default: %(default)s)")
    p.add_argument("--engine", choices=ENGINES, default="npu", help="what runs MODEL (default: %(default)s)")
    p.add_argument("--top", type=int, default=0, metavar="K", help="also list the K tensors of lowest SNR")
    p.set_defaults(func=cmd_compare)


def _demo_command(command: _Command) -> None:
    """The ``demo`` subcommand and its arguments."""
    p = command("demo", f"The README's main job: {DEMO_MODEL} on the NPU simulator against llvm.", f"""
        Compiles the bundled model {DEMO_MODEL} for the NPU and for llvm, runs both on the
        same seeded input, prints the comparison ('tvm-npu bench') and the per-layer report,
        and fails (exit status 1) when the outputs differ by more than the float32
        tolerance (rtol {RTOL:g}, atol {ATOL:g}).""")
    p.add_argument("--target", default="npu",
                   help="NPU target: 'npu' followed by -key=value options, listed below (default: %(default)s)")
    p.add_argument("--repeat", type=int, default=10, metavar="N",
                   help="timed runs of each build after one warm-up; the median is reported (default: %(default)s)")
    _host_arg(p)
    p.set_defaults(func=cmd_demo)


# ------------------------------------------------------------------------------ helpers
def target_option(args: argparse.Namespace) -> str:
    """``--target``, parsed (a bad one is an error naming the option)."""
    try:
        return str(parse_target(args.target))
    except ValueError as e:
        raise ValueError(f"--target {args.target!r}: {e}") from None


def host_option(args: argparse.Namespace) -> tvm.target.Target:
    """``--host-target``, parsed (a bad one is an error naming the option)."""
    try:
        return host_target(args.host_target)
    except ValueError as e:
        raise ValueError(f"--host-target {args.host_target!r}: {e}") from None


def _load(args: argparse.Namespace, lean: bool = False) -> tuple[str, ShapeOptions, str]:
    """(name, the model with ``--input-shape`` applied, normalised target) of a model command; the target is
    checked before any work. ``lean`` (a command that only compiles): a file's weights stay in it until the
    compiler reads them once."""
    target = target_option(args)
    name, model = resolve_model(args.model, lean=lean and args.randomize_weights is None)
    if args.randomize_weights is not None:
        model = randomize_weights(model, args.randomize_weights)
        name = f"{name} (weights seed {args.randomize_weights})"
    opts = shape_options(model, args.input_shape)
    if opts.jit and lean and args.randomize_weights is None:  # the JIT route imports the model whole
        opts = shape_options(resolve_model(args.model)[1], args.input_shape)
    return name, opts, target


def _inputs(args: argparse.Namespace, model: LoadedModel) -> list[np.ndarray]:
    if not args.inputs:
        return default_inputs(model)
    specs = model_inputs(model)
    inputs = read_inputs(args.inputs, [s.name for s in specs])
    check_inputs(inputs, specs)
    return inputs


def _writable(path: Path | None, option: str) -> None:
    """Refuse an output in a directory that does not exist before any work: a typo in the path would
    otherwise create directories nobody asked for (as ``cp`` and compilers do, we never create them)."""
    if path is not None and not path.parent.is_dir():
        raise FileNotFoundError(f"{option} {path}: directory {str(path.parent)!r} does not exist; create it first")


def _stages(seconds: dict[str, float]) -> str:
    return ", ".join(f"{k} {v:.2f}" for k, v in seconds.items())


def _npu_time(runs: Sequence[PartitionRun]) -> str:
    if not runs:
        return "nothing ran on the NPU"
    hw = parse_target(runs[0].artifact.target).hw
    cycles = sum(r.stats.total_cycles for r in runs)
    return (f"{len(runs)} NPU partition runs, {cycles:,} cycles = {hw.cycles_to_seconds(cycles) * 1e3:.3f} ms "
            f"at {hw.clock_mhz} MHz")


def _stats_table(runs: Sequence[PartitionRun]) -> str:
    head = ("partition", "cycles", "bound", "eff", "load KiB", "store KiB", "descr", "waste KiB", "SRAM KiB",
            "instr", "util tensor/vector/DRAM", "layers")
    rows = [head]
    for r, label in zip(runs, partition_labels(runs), strict=True):
        s = r.stats
        util = "/".join(f"{s.utilisation.get(k, 0.0):.2f}" for k in ("TENSOR", "VECTOR", "DRAM"))
        layers = op_counts(Counter(x.op for x in r.artifact.layers))
        rows.append((label, f"{s.total_cycles:,}", f"{s.lower_bound_cycles:,.0f}", f"{s.efficiency:.3f}",
                     f"{s.dma_load_bytes / 1024:.0f}", f"{s.dma_store_bytes / 1024:.0f}",
                     f"{s.dma_load_descriptors + s.dma_store_descriptors}", f"{s.wasted_burst_bytes / 1024:.0f}",
                     f"{s.sram_high_water / 1024:.0f}", str(s.instructions), util, layers))
    widths = [max(len(r[i]) for r in rows) for i in range(len(head))]
    lines = ["  ".join(c.rjust(w) if i else c.ljust(w) for i, (c, w) in enumerate(zip(r, widths, strict=True)))
             for r in rows]
    return "\n".join(lines)


def _summary(i: int, a: np.ndarray) -> str:
    text = f"output_{i}: {a.dtype} {tuple(a.shape)}"
    if a.size and np.issubdtype(a.dtype, np.number):
        text += f"  min {a.min():.4g}  max {a.max():.4g}  mean {a.mean():.4g}  argmax {int(np.argmax(a))}"
    return text


# ----------------------------------------------------------------------------- commands
def cmd_compile(args: argparse.Namespace) -> int:
    name, opts, target = _load(args, lean=True)
    model = opts.model
    _writable(args.output, "-o")
    host = host_option(args)  # checked before any work
    cross = runnable_triple(host) is not None
    if cross and args.output.suffix != ".tar":
        raise ValueError(f"--host-target {args.host_target}: a cross-compiled host part cannot be linked here; "
                         f"write its object files with -o {args.output.with_suffix('.tar')} and link them on the "
                         f"target (tvm.runtime.load_module needs a shared library built there)")
    executable, info, seconds = build_model(model, target, dump_dir=args.dump_dir, database=args.database, host=host,
                                            shapes=opts.build_shapes())
    del model  # (with the build's modules, which hold the weights as Relax constants: not needed to export)
    info = replace(info, partitioned=None, compiled=None)
    export_library(executable, args.output)  # the weights' blob in memory once (tvm_npu.tools.export)
    total = info.npu_macs + info.host_macs
    print(f"compiled {name} for '{target}' in {seconds:.1f} s ({_stages(info.stage_seconds)}); "
          f"host part for {host_text(host)}" + (" (cross-compiled: runs on that machine only)" if cross else ""))
    print(f"NPU:  {info.partitions} partitions: {op_counts(info.npu_ops)}")
    print(f"host: {op_counts(info.host_ops)}")
    print(f"MACs: {info.npu_macs / 1e6:,.1f} M on the NPU ({info.npu_macs / total if total else 0:.1%}), "
          f"{info.host_macs / 1e6:,.1f} M on the host" if not opts.jit else
          "MACs: they depend on the input shape ('tvm-npu profile --input-shape ...' reports them per shape)")
    print(f"layout: {info.transforms_inserted} transforms inserted by planning, "
          f"{info.layout_transforms} left on the host after folding")
    programs = jit.programs_of(executable)
    print("\n".join(jit_lines(programs)))
    if args.database is not None and programs:
        print(f"tuning: the records of {args.database} for this target are kept in the library and applied to "
              f"every NPU partition compiled for a shape")
    elif args.database is not None:
        ops = sum(len(p.ops) for p in info.plans)
        print(f"tuning: {info.tuned_ops} of {ops} NPU operators use a tile tuned in {args.database} "
              f"(the others: no record for this target, or the cost model's tile was the best measured); "
              f"{info.tuned_plans} of {info.partitions} partitions use a searched plan")
    if args.dump_dir is not None:
        print(f"intermediate forms in {args.dump_dir}")
    print(f"wrote {args.output} ({args.output.stat().st_size / 1024:.0f} KiB)")
    return 0


def cmd_inspect(args: argparse.Namespace) -> int:
    if Path(args.model).suffix in (".so", ".tar"):
        return _inspect_library(args)
    name, opts, target = _load(args)
    _writable(args.json, "--json")
    model, symbolic = opts.model, []
    if opts.jit:  # operators as a static build at one shape places them, after the symbolic dimensions
        shapes = run_shapes(model, opts.listed)[0]
        symbolic = [*model_jit_lines(model, opts.listed), f"operators below: at {shapes_text(shapes)} (a static "
                    f"build's placement at that shape; give --input-shape for another)", ""]
        model = bind_input_shapes(model, shapes, "--input-shape")
    with elapsed_bar("partitioning and generating NPU code"), warnings.catch_warnings():
        warnings.simplefilter("ignore", HostFallbackWarning)  # the table gives every host operator's reason
        result = inspect_model(model, target, name)
    print("\n".join([*symbolic, result.text()]))
    if args.json is not None:
        args.json.write_text(json.dumps({**result.to_json(), "symbolic": symbolic}, indent=1))
        print(f"wrote {args.json}")
    return 0


def _inspect_library(args: argparse.Namespace) -> int:
    """``inspect LIB.so``: an exported model's inputs and, for one built for every shape, its JIT programs."""
    library = _library(Path(args.model))
    lines = [f"library {args.model}", "inputs:", *(f"  {s.text()}" for s in library_inputs(library))]
    programs = jit.programs_of(library)
    lines += jit_lines(programs) if programs else ["NPU partitions compiled for static shapes"]
    print("\n".join(lines))
    if args.json is not None:
        args.json.write_text(json.dumps({"library": str(args.model), "lines": lines}, indent=1))
        print(f"wrote {args.json}")
    return 0


def _library(path: Path) -> tvm.runtime.Module:
    """The exported model at ``path``; a missing file or an ONNX model is an error saying what to pass."""
    if not path.is_file():
        raise FileNotFoundError(f"library {str(path)!r} does not exist")
    if path.suffix == ".onnx":
        raise ValueError(f"{path} is an ONNX model; 'run' takes a library: compile it first with "
                         f"'{PROG} compile {path} -o {path.with_suffix('.so')}'")
    return load_module(path)


def cmd_run(args: argparse.Namespace) -> int:
    _writable(args.output, "-o")
    library = _library(args.library)
    specs = library_inputs(library)
    shapes = check_shapes({s.name: s.shape for s in specs}, parse_input_shapes(args.input_shape), "--input-shape")
    specs = [TensorSpec(s.name, shapes.get(s.name, s.shape), s.dtype) for s in specs]
    if args.inputs is not None:
        inputs = read_inputs(args.inputs, [s.name for s in specs])
    elif args.random_inputs is not None:
        inputs = random_inputs(specs, args.random_inputs)
    else:
        raise ValueError(f"the model takes {len(specs)} input(s): {'; '.join(s.text() for s in specs)}; give them "
                         f"with --inputs NPZ (np.savez(path, name=array, ...)) or --random-inputs SEED")
    check_inputs(inputs, specs)
    jit.check_bounds(jit.programs_of(library), {s.name: a for s, a in zip(specs, inputs, strict=True)})
    outputs, prof, seconds = profile_model(library, inputs)
    for i, a in enumerate(outputs):
        print(_summary(i, a))
    print(f"{_npu_time(prof.runs)}; {wall_time(seconds)} wall")
    if args.stats and prof.runs:
        print(_stats_table(prof.runs))
    if args.output is not None:
        np.savez(args.output, **{f"output_{i}": a for i, a in enumerate(outputs)})
        print(f"wrote {args.output}")
    return 0


def cmd_profile(args: argparse.Namespace) -> int:
    name, opts, target = _load(args)
    model = opts.model
    for path, option in ((args.trace, "--trace"), (args.plot, "--plot"), (args.json, "--json")):
        _writable(path, option)
    if args.repeat < 1:
        raise ValueError(f"--repeat must be at least 1, not {args.repeat}")
    host = host_option(args)
    runnable_host(host)
    if opts.jit:
        prof, rep, data = _profile_shapes(args, name, opts, target, host)
    else:
        inputs = _inputs(args, model)
        executable, info, build_s = build_model(model, target, host=host)
        with elapsed_bar("simulating"):
            _, prof, _ = profile_model(executable, inputs, trace=True, timing_only=args.timing_only)
            _, _, seconds, host_s = host_latency(executable, inputs, args.repeat, functional=not args.timing_only)
        rep = model_report(prof, info, input_shapes(model, inputs))
        print(f"{name} on '{target}'")
        print("\n".join(end_to_end(prof, info, host_s, args.repeat, host).lines()))
        print(rep.table())
        print(f"{name}: built in {build_s:.1f} s; {_npu_time(prof.runs)}; simulator {wall_time(seconds)} wall")
        data = rep.to_json()
    if args.trace is not None:
        args.trace.write_text(json.dumps(chrome_trace(prof)))
        print(f"wrote {args.trace} (open in ui.perfetto.dev)")
    if args.plot is not None:
        n = plot_roofline(prof, rep, args.plot, f"{name} on '{target}'")
        print(f"wrote {args.plot} ({n} layers)")
    if args.json is not None:
        args.json.write_text(json.dumps(data, indent=1))
        print(f"wrote {args.json}")
    return 0


def _shape_list(args: argparse.Namespace, opts: ShapeOptions) -> list[tuple[dict[str, tuple[int, ...]],
                                                                              list[np.ndarray]]]:
    """(shapes, inputs) to run a model built for every shape on: ``--inputs`` (their shapes), else each
    ``--input-shape`` set (or the example shape) with seeded random inputs."""
    if args.inputs:
        specs = model_inputs(opts.model)
        inputs = read_inputs(args.inputs, [s.name for s in specs])
        check_inputs(inputs, specs)
        return [({s.name: tuple(a.shape) for s, a in zip(specs, inputs, strict=True)}, inputs)]
    return [(shapes, shape_inputs(opts.model, shapes)) for shapes in run_shapes(opts.model, opts.listed)]


def _profile_shapes(args: argparse.Namespace, name: str, opts: ShapeOptions, target: str, host: tvm.target.Target
                    ) -> tuple[Profile, ModelReport, dict]:
    """``profile`` of a model built for every shape: per shape the first call (compile seconds per partition)
    against the steady state, and the per-layer report naming its shape. (the first shape's profile and report,
    the JSON of all)."""
    executable, info, build_s = build_model(opts.model, target, host=host, shapes=opts.measured_shapes())
    print(f"{name} on '{target}': built in {build_s:.1f} s for every input shape")
    print("\n".join(jit_lines(jit.programs_of(executable))))
    data: dict[str, list] = {"shapes": [], "reports": []}
    first = None
    for shapes, inputs in _shape_list(args, opts):
        run = measure_shape(executable, shapes, inputs, args.repeat)
        with elapsed_bar("simulating"):
            _, prof, _ = profile_model(executable, inputs, trace=True, timing_only=args.timing_only)
        rep = report(prof, info.host_macs, info.layout_transforms, shape=run.shape)  # (memory: per shape)
        print(f"\n{run.line()}")
        print(rep.table())
        data["shapes"].append(run.to_json())
        data["reports"].append(rep.to_json())
        first = first or (prof, rep)
    assert first is not None
    return first[0], first[1], data


def cmd_bench(args: argparse.Namespace) -> int:
    name, opts, target = _load(args)
    _writable(args.json, "--json")
    if opts.jit:
        data = _bench_shapes(args, name, opts, target)
    else:
        result = bench(name, opts.model, target, _inputs(args, opts.model), repeat=args.repeat,
                       host=host_option(args))
        print("\n".join(result.lines()))
        data = result.to_json()
    if args.json is not None:
        args.json.write_text(json.dumps(data, indent=1))
        print(f"wrote {args.json}")
    return 0


def _bench_shapes(args: argparse.Namespace, name: str, opts: ShapeOptions, target: str) -> dict:
    """``bench`` of a model built for every shape: the build, then per shape the first call (its NPU partitions
    compiled for the shape) against the steady state, and llvm built for that shape."""
    if args.repeat < 1:
        raise ValueError(f"--repeat must be at least 1, not {args.repeat}")
    host = host_option(args)
    runnable_host(host)
    executable, info, build_s = build_model(opts.model, target, host=host, shapes=opts.measured_shapes())
    print(f"model        {name}   target: {target}")
    print(f"build        {build_s:.1f} s once for every input shape ({info.partitions} NPU partitions, host: "
          f"{op_counts(info.host_ops)})")
    rows = []
    for shapes, _ in _shape_list(args, opts):
        with elapsed_bar(f"{shapes_text(shapes)}"):
            row = bench_shape(executable, opts.model, shapes, args.repeat, host)
        print(f"shape        {row.line()}")
        rows.append({**row.run.to_json(), "llvm_s": row.llvm_s, "max_abs_error": row.max_abs_error})
    return {"model": name, "target": target, "build_s": build_s, "partitions": info.partitions,
            "host_ops": dict(info.host_ops), "shapes": rows}


def cmd_tune(args: argparse.Namespace) -> int:
    from tvm_npu.tuning.tuner import tune

    name, opts, target = _load(args)
    if opts.jit and not opts.listed:
        raise ValueError(f"{name} has symbolic dimensions: tuning measures concrete shapes; give the shapes to tune "
                         f"with --input-shape (repeatable: NAME=D0,D1,... once per shape)")
    sets = run_shapes(opts.model, opts.listed) if opts.jit else [None]
    results = []
    for shapes in sets:  # records accumulate in one work directory; a JIT build applies them to every compile
        if shapes is not None:
            print(f"tuning at {shapes_text(shapes)}", flush=True)
        results += tune(opts.model, target, args.work_dir, args.trials, rpc=args.rpc, key=args.key,
                        workers=args.workers, plans=not args.no_plans, timeout_sec=args.timeout,
                        progress=show_progress(None), shapes=shapes)
    print(f"tuned {name} for '{target}': {len(results)} distinct NPU operators, records in {args.work_dir}")
    for r in results:
        print(f"  {r.name:<60s} x{r.calls}  {r.trials:>4d}/{r.space:<5d} measured  {r.speedup:.3f}x "
              f"over the cost model's tile")
    if results:
        speedups = [r.speedup for r in results]
        print(f"best measured tile against the cost model's choice: geomean {statistics.geometric_mean(speedups):.3f}x,"
              f" largest {max(speedups):.3f}x")
    print(f"apply with: {PROG} compile {args.model} --target '{target}' --database {args.work_dir} -o OUT.so")
    return 0


def cmd_quantize(args: argparse.Namespace) -> int:
    ort = require_onnxruntime()
    ort.set_default_logger_severity(3)  # errors only: its notes on the models it optimises are not the user's
    name, model = resolve_model(args.model)
    model = bind_input_shapes(model, parse_input_shapes(args.input_shape), "--input-shape")
    samples = calibration_samples(model, args.calibration, random=args.random, seed=args.seed)
    settings = {"calibration": samples, "activations": args.activations, "per_channel": not args.per_tensor,
                "exclude": args.exclude}
    if args.target_sqnr is not None:
        with elapsed_bar("searching the activations' precisions"):
            choice = choose_precisions(functools.partial(quantize_model, model, **(settings | {"exclude": ()})),
                                       model, samples, args.output, args.target_sqnr, exclude=args.exclude,
                                       held_out=None if args.random is None else
                                       calibration_samples(model, random=args.random, seed=args.seed + 1))
        print(choice.table())
    output = choice.output if args.target_sqnr is not None else quantize_model(model, args.output, **settings)
    source = (f"{args.calibration}, {len(samples)} samples" if args.calibration is not None
              else f"{len(samples)} random standard-normal sample{'s' * (len(samples) > 1)} (seed {args.seed})")
    upgraded = f", upgraded from opset {opset(model)} to {MIN_OPSET}" if opset(model) < MIN_OPSET else ""
    n_q, n_dq = qdq_counts(onnx.load(str(output)))
    print(f"quantized {name} with onnxruntime {ort.__version__} quantize_static, QDQ format{upgraded}")
    print(f"calibration: {source}")
    print(f"weights: int8 symmetric, {'per tensor' if args.per_tensor else 'per channel'}; "
          f"activations: {args.activations} asymmetric"
          f"{', 16-bit or fp16 for the tensors chosen above' if args.target_sqnr is not None else ''}")
    kept = f"; left in float: {', '.join(args.exclude)}" if args.exclude else ""
    print(f"nodes: {n_q} QuantizeLinear, {n_dq} DequantizeLinear{kept}")
    print(f"wrote {output} ({output.stat().st_size / 1024:.0f} KiB)")
    return 0


def cmd_compare(args: argparse.Namespace) -> int:
    if args.top < 0:
        raise ValueError(f"--top must not be negative, not {args.top}")
    if (args.quantized is None) == (args.reference is None):
        raise ValueError("give the fp32 model either as --reference (MODEL is then the quantized or fp16 model) or "
                         "first of two models (MODEL QUANTIZED), not both or neither")
    if args.quantized is not None:
        return _compare_sqnr(args)
    target = target_option(args)
    name, model = resolve_model(args.model)
    ref_name, reference = resolve_model(args.reference)
    shapes = parse_input_shapes(args.input_shape)
    model, reference = (bind_input_shapes(m, shapes, "--input-shape") for m in (model, reference))
    if args.inputs is not None:
        samples = npz_samples(args.inputs, reference)
        given = f"{args.inputs}" + (f" (first of {len(samples)} samples)" if len(samples) > 1 else "")
    else:
        samples = random_samples(reference, 1, args.seed)
        given = f"standard-normal (seed {args.seed})"
    matches, skipped = match_tensors(model, reference)
    if not matches:
        raise ValueError(f"no tensor of {ref_name} has a counterpart in {name}: compare a model made from it by "
                         f"'{PROG} quantize' (or an fp16 converter that keeps tensor names)")
    with elapsed_bar("building and running both models"):
        rows = layer_errors(model, reference, matches, samples[0], target=target, engine=args.engine)
    engine = f"the NPU ('{target}', simulated)" if args.engine == "npu" else "onnxruntime (CPU)"
    print(f"{name} on {engine} against {ref_name} on {reference_engine()}, inputs {given}")
    print(f"{len(rows)} tensors compared; {len(skipped)} reference tensors without a counterpart skipped")
    print(table(rows))
    if args.top:
        print(f"\n{min(args.top, len(rows))} lowest SNR:")
        print(table(sorted(rows, key=lambda r: r.snr_db)[:args.top]))
    for r in rows:
        if r.output:
            steps = "" if r.steps is None else f", {r.steps:.2f} quantization steps"
            print(f"final output {r.name}: max |err| {r.max_abs:.3g}, mean |err| {r.mean_abs:.3g}, "
                  f"SNR {r.snr_db:.1f} dB, cosine {r.cosine:.5f}{steps}")
    return 0


def _compare_sqnr(args: argparse.Namespace) -> int:
    """``compare MODEL QUANTIZED``: the per-layer SQNR report (:mod:`tvm_npu.tools.sqnr_report`)."""
    require_onnxruntime()
    _writable(args.plot, "--plot")
    target = target_option(args)
    ref_name, reference = resolve_model(args.model)
    name, quantized = resolve_model(args.quantized)
    shapes = parse_input_shapes(args.input_shape)
    reference, quantized = (bind_input_shapes(m, shapes, "--input-shape") for m in (reference, quantized))
    if args.inputs is not None:
        samples, given = npz_samples(args.inputs, reference), str(args.inputs)
    else:
        samples, given = random_samples(reference, args.samples, args.seed), f"standard-normal (seed {args.seed})"
    with elapsed_bar("running both models and every layer alone"):
        rows, skipped = layer_sqnr(reference, quantized, samples, target=target)
    print(f"{name} against {ref_name} on onnxruntime (CPU), {len(samples)} input samples {given}; cycles: "
          f"datasheet bound of each layer for '{target}'")
    print(sqnr_table(rows))
    if skipped:
        print(f"{len(skipped)} quantized tensors the fp32 model lacks skipped: {', '.join(skipped[:6])}"
              f"{', ...' * (len(skipped) > 6)}")
    if args.plot is not None:
        plot_sqnr(rows, args.plot, f"{name} against {ref_name}")
        print(f"wrote {args.plot}")
    return 0


def cmd_demo(args: argparse.Namespace) -> int:
    if args.repeat < 1:
        raise ValueError(f"--repeat must be at least 1, not {args.repeat}")
    target = target_option(args)
    model = BUNDLED[DEMO_MODEL]()
    inputs = default_inputs(model)
    print(f"{DEMO_MODEL} ({PROG} demo): compiling for '{target}', running on the NPU simulator, on llvm "
          f"and on onnxruntime\n", flush=True)
    run = compare(DEMO_MODEL, model, target, inputs, repeat=args.repeat, host=host_option(args))
    print("\n".join(run.result.lines()) + "\n")
    print(run.report.table())
    pairs = list(zip(run.outputs, run.expected, strict=False))
    bad = [i for i, (a, b) in enumerate(pairs) if a.shape != b.shape or not np.allclose(a, b, rtol=RTOL, atol=ATOL)]
    if bad or len(run.outputs) != len(run.expected):
        raise ValueError(f"NPU outputs {bad} differ from llvm beyond rtol {RTOL:g} / atol {ATOL:g}")
    print(f"outputs match llvm within rtol {RTOL:g} / atol {ATOL:g}")
    return 0


def _one_line(e: BaseException | str) -> str:
    """The first line of an error message (TVM's span several lines), never empty."""
    lines = [x.strip() for x in str(e).strip().splitlines() if x.strip()]
    return lines[0] if lines else type(e).__name__


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``tvm-npu`` console script; returns the exit status."""
    args = build_parser().parse_args(argv)

    def one_line_warning(message: Warning | str, *_where: object, **_kw: object) -> None:
        print(f"{PROG} {args.command}: warning: {_one_line(message)}", file=sys.stderr)

    warnings.showwarning = one_line_warning
    try:
        return args.func(args)
    except KeyboardInterrupt:
        print(f"{PROG}: interrupted", file=sys.stderr)
        return 130
    except Exception as e:
        if args.verbose:
            traceback.print_exc()
        print(f"{PROG} {args.command}: error: {_one_line(e)}", file=sys.stderr)
        return 1
