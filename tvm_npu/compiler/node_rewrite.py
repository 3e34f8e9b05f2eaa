"""Replacing ONNX nodes in place: the loop every import rewrite that expands a node into others shares."""

from __future__ import annotations

from collections.abc import Callable

import onnx


def replace_nodes(graph: onnx.GraphProto,
                  expand: Callable[[onnx.NodeProto, list[onnx.TensorProto]], list[onnx.NodeProto] | None]) -> int:
    """Replace, in place and in order, every node of ``graph`` for which ``expand(node, inits)`` returns a list
    by that list (``expand`` appends the initializers its nodes need to ``inits``); None keeps the node.
    Returns how many nodes were replaced."""
    nodes: list[onnx.NodeProto] = []
    inits: list[onnx.TensorProto] = []
    count = 0
    for node in graph.node:
        new = expand(node, inits)
        nodes.extend([node] if new is None else new)
        count += new is not None
    if count:
        del graph.node[:]
        graph.node.extend(nodes)
        graph.initializer.extend(inits)
    return count
