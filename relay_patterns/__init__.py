"""Relax front half of the NPU backend: canonicalisation, the ``npu.*`` pattern table, spec extraction.

Importing this package registers the pattern table for the default target, so
``tvm.relax.backend.pattern_registry.get_patterns_with_prefix("npu")`` lists it.
"""

from .canonicalize import canonicalize_passes, simplify_reduce_of_stack
from .extract import ExtractedOp, extract_from_context, extract_op
from .patterns import HostFallbackWarning, make_check, pattern_table
from .precision import fp16_accumulate, precision_passes
from .quantized import qdq_to_integer


def semantic_passes() -> list:
    """The rewrites that fix what a model computes (integer kernels for QDQ regions, fp32
    accumulation for fp16 operators): the NPU build and the llvm reference both run them."""
    return [simplify_reduce_of_stack, qdq_to_integer, fp16_accumulate]


__all__ = [
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
