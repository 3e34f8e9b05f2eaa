"""Relax front half of the NPU backend: canonicalisation, the ``npu.*`` pattern table, spec extraction.

Importing this package registers the pattern table for the default target, so
``tvm.relax.backend.pattern_registry.get_patterns_with_prefix("npu")`` lists it.
"""

from tvm import relax

from .canonicalize import CANONICALIZE_REWRITES, canonical_activations, canonicalize_passes, simplify_reduce_of_stack
from .conv_transpose import quantized_conv_transpose_as_convs
from .extract import ExtractedOp, extract_from_context, extract_op
from .patterns import HostFallbackWarning, make_check, pattern_table
from .precision import fp16_accumulate, fp16_averages, precision_passes
from .quantized import qdq_to_integer


def semantic_passes() -> list:
    """What the llvm reference runs so that it computes what the NPU computes: integer kernels
    for QDQ regions and fp32 accumulation for fp16 convolutions and matmuls (the NPU build runs
    these too), fp16 averages summed in fp32 (the NPU's pooling sums exactly) and inference
    batch-norm as elementwise operators in the model's type (TVM's fp16 ``batch_norm`` returns fp32).
    Activations are brought to their canonical form first, as the NPU build does, so that a ReLU6 from
    ``Max`` / ``Min`` is the same integer clamp of a quantized region in both, and a quantized transposed
    convolution the same 8-bit phase convolutions (a float one stays TVM's own)."""
    return [simplify_reduce_of_stack, canonical_activations, quantized_conv_transpose_as_convs, qdq_to_integer,
            fp16_accumulate, fp16_averages, relax.transform.DecomposeOpsForInference()]


__all__ = [
    "CANONICALIZE_REWRITES",
    "ExtractedOp",
    "HostFallbackWarning",
    "canonicalize_passes",
    "extract_from_context",
    "extract_op",
    "make_check",
    "pattern_table",
    "precision_passes",
    "semantic_passes",
]
