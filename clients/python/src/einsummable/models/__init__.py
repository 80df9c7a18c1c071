"""Real models for the Einsummable server: Hugging Face LLaMA-family checkpoints (LLaMA 2/3,
Mistral, Qwen2) as graphs, and their conversion to a model-repository entry (docs/models.md).

    from einsummable import models
    spec = models.spec_from_config(json.load(open("config.json")))
    graph, weight_shapes = models.build_graph(spec, "bf16")
    models.convert("Llama-3.2-1B", "repository")          # or: einsummable-convert HF_DIR OUT_DIR

Needs the ``safetensors`` package for conversion (installed with the client).
"""

from .converter import Conversion, ConversionError, convert, model_config_text
from .llama import (
    ARCHITECTURES,
    FAMILIES,
    LlamaSpec,
    RopeSpec,
    UnsupportedModelError,
    build_graph,
    parameters,
    spec_from_config,
)

__all__ = [
    "ARCHITECTURES",
    "FAMILIES",
    "Conversion",
    "ConversionError",
    "LlamaSpec",
    "RopeSpec",
    "UnsupportedModelError",
    "build_graph",
    "convert",
    "model_config_text",
    "parameters",
    "spec_from_config",
]
