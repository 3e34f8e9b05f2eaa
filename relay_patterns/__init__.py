"""Relax front half of the NPU backend: canonicalisation, the ``npu.*`` pattern table, spec extraction.

Importing this package registers the pattern table for the default target, so
``tvm.relax.backend.pattern_registry.get_patterns_with_prefix("npu")`` lists it.
"""

from .canonicalize import canonicalize_passes
from .extract import ExtractedOp, extract_from_context, extract_op
from .patterns import HostFallbackWarning, make_check, pattern_table

__all__ = [
    "ExtractedOp",
    "HostFallbackWarning",
    "canonicalize_passes",
    "extract_from_context",
    "extract_op",
    "make_check",
    "pattern_table",
]
