"""Models to compile: the light ONNX models the ``onnx`` package ships (:mod:`.light`), the bundled
exporter-style generators (:mod:`.bundled`), the table of every model known by name (:mod:`.registry`)
and the inputs a model takes (:mod:`.inputs`). numpy and onnx only: no TVM, no compiler."""

from tvm_npu.models.inputs import backend_inputs
from tvm_npu.models.light import LIGHT_MODELS, light_model_path, randomize_weights, tiny_convnet

__all__ = ["LIGHT_MODELS", "backend_inputs", "light_model_path", "randomize_weights", "tiny_convnet"]
