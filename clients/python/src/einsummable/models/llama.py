"""The LLaMA family (LLaMA 2 and 3, Mistral, Qwen2) from a Hugging Face ``config.json``: what
the config says (``LlamaSpec``), the weights the checkpoint must hold, and the whole model as an
Einsummable graph.

The graph is transformers' ``LlamaForCausalLM`` for packed sequences:

    ids [tokens] i32 -> embedding -> N decoder blocks -> RMSNorm -> lm_head -> logits
    [tokens, vocab]

with each decoder block RMSNorm -> q, k, v projections (+ biases for Qwen2) -> split heads ->
RoPE (rope_theta, rope_scaling) on q and k -> grouped-query causal attention -> merge heads ->
o_proj -> residual add -> RMSNorm -> SwiGLU MLP (down(silu(gate(x)) * up(x))) -> residual add.
``tokens`` is symbolic; the graph gives attention and rope no sequence ends of its own: the model
is registered with batching on ``tokens`` and every request says where its sequences end.

Weights keep their Hugging Face names and their ``[out, in]`` layout: a projection is the einsum
``td,od->to`` rather than a matmul by a transposed copy, so the converter writes every tensor's
bytes as they are (a dtype conversion at most) and the daemon loads them as they are; see
docs/models.md "Layout".
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from .. import graph as _graph

# config.json's model_type -> family. Every one is transformers' LlamaForCausalLM structure;
# the differences are in the config (biases, sliding windows) and checked below.
FAMILIES = {"llama": "llama", "mistral": "mistral", "qwen2": "qwen2"}
ARCHITECTURES = {
    "LlamaForCausalLM": "llama",
    "MistralForCausalLM": "mistral",
    "Qwen2ForCausalLM": "qwen2",
}
# Checkpoint tensors that are not weights of the model: buffers older transformers saved.
IGNORED_SUFFIXES = ("rotary_emb.inv_freq",)


class UnsupportedModelError(ValueError):
    """A config.json the converter cannot express (an architecture, an option), and why."""


@dataclass(frozen=True)
class RopeSpec:
    theta: float = 10000.0
    scaling: str = "none"  # "none", "linear", "llama3" (rope's attribute names)
    factor: float | None = None
    low_freq_factor: float | None = None
    high_freq_factor: float | None = None
    original_max_position: int | None = None

    def attributes(self) -> dict:
        """Keyword arguments of ``Graph.rope``."""
        kwargs = {"theta": self.theta, "scaling": self.scaling}
        if self.scaling != "none":
            kwargs["scaling_factor"] = self.factor
        if self.scaling == "llama3":
            kwargs.update(
                low_freq_factor=self.low_freq_factor,
                high_freq_factor=self.high_freq_factor,
                original_max_position=self.original_max_position,
            )
        return kwargs


@dataclass(frozen=True)
class LlamaSpec:
    """What the graph needs from config.json."""

    family: str
    hidden: int
    intermediate: int
    layers: int
    heads_q: int
    heads_kv: int
    head_dim: int
    vocab: int
    eps: float
    rope: RopeSpec = field(default_factory=RopeSpec)
    tied: bool = False
    attention_bias: bool = False  # q, k, v biases (Qwen2; LLaMA's attention_bias)
    o_bias: bool = False  # o_proj bias (LLaMA's attention_bias only)
    mlp_bias: bool = False
    max_position: int = 0
    torch_dtype: str | None = None

    @property
    def q_out(self) -> int:
        return self.heads_q * self.head_dim

    @property
    def kv_out(self) -> int:
        return self.heads_kv * self.head_dim

    def weight_shapes(self) -> dict:
        """Every weight the graph reads, by its Hugging Face name: its shape ([out, in] for a
        projection, as the checkpoint stores it)."""
        d, f = self.hidden, self.intermediate
        shapes = {"model.embed_tokens.weight": (self.vocab, d)}
        for i in range(self.layers):
            p = f"model.layers.{i}."
            shapes[p + "input_layernorm.weight"] = (d,)
            for proj, out in (("q", self.q_out), ("k", self.kv_out), ("v", self.kv_out)):
                shapes[f"{p}self_attn.{proj}_proj.weight"] = (out, d)
                if self.attention_bias:
                    shapes[f"{p}self_attn.{proj}_proj.bias"] = (out,)
            shapes[p + "self_attn.o_proj.weight"] = (d, self.q_out)
            if self.o_bias:
                shapes[p + "self_attn.o_proj.bias"] = (d,)
            shapes[p + "post_attention_layernorm.weight"] = (d,)
            for proj, shape in (("gate", (f, d)), ("up", (f, d)), ("down", (d, f))):
                shapes[f"{p}mlp.{proj}_proj.weight"] = shape
                if self.mlp_bias:
                    shapes[f"{p}mlp.{proj}_proj.bias"] = (shape[0],)
        shapes["model.norm.weight"] = (d,)
        if not self.tied:
            shapes["lm_head.weight"] = (self.vocab, d)
        return shapes

    def ignored(self, tensor: str) -> bool:
        """A checkpoint tensor the graph does not read and that is not an error to find: old
        transformers' rotary buffers, and lm_head.weight of a tied model saved anyway (it equals
        the embedding)."""
        if tensor.endswith(IGNORED_SUFFIXES):
            return True
        return self.tied and tensor == "lm_head.weight"


def _get(config: dict, key: str, kind, default=None, required=True):
    value = config.get(key, default)
    if value is None:
        if required:
            raise UnsupportedModelError(f"config.json has no '{key}'")
        return None
    if kind is int and (isinstance(value, bool) or not isinstance(value, int)):
        raise UnsupportedModelError(f"config.json: '{key}' must be an integer, got {value!r}")
    if kind is float and (isinstance(value, bool) or not isinstance(value, (int, float))):
        raise UnsupportedModelError(f"config.json: '{key}' must be a number, got {value!r}")
    return kind(value)


def _rope(config: dict) -> RopeSpec:
    """rope_theta and the scaling, from transformers 5's ``rope_parameters`` or 4's
    ``rope_theta`` + ``rope_scaling`` (whose type key is ``rope_type``, or ``type`` before 4.45).
    """
    params = config.get("rope_parameters")
    if isinstance(params, dict) and any(isinstance(v, dict) for v in params.values()):
        raise UnsupportedModelError(
            "config.json: per-layer-type rope_parameters are not supported (one RoPE for every "
            "layer)"
        )
    if params is None:
        params = dict(config.get("rope_scaling") or {})
        params.setdefault("rope_theta", config.get("rope_theta", 10000.0))
    elif not isinstance(params, dict):
        raise UnsupportedModelError(f"config.json: rope_parameters must be an object: {params!r}")
    theta = _get(params, "rope_theta", float, 10000.0)
    rope_type = params.get("rope_type", params.get("type", "default"))
    where = f"config.json: rope_type '{rope_type}'"
    if rope_type == "default":
        return RopeSpec(theta)
    factor = _get(params, "factor", float)
    if rope_type == "linear":
        if not factor > 0:
            raise UnsupportedModelError(f"{where}: factor must be > 0, got {factor}")
        return RopeSpec(theta, "linear", factor)
    if rope_type == "llama3":
        low = _get(params, "low_freq_factor", float)
        high = _get(params, "high_freq_factor", float)
        original = _get(params, "original_max_position_embeddings", int)
        if not (factor > 0 and low > 0 and high > low and original > 0):
            raise UnsupportedModelError(
                f"{where}: needs factor > 0, 0 < low_freq_factor < high_freq_factor and "
                f"original_max_position_embeddings > 0, got {factor}, {low}, {high}, {original}"
            )
        return RopeSpec(theta, "llama3", factor, low, high, original)
    raise UnsupportedModelError(
        f"{where} is not supported (supported: default, linear, llama3); dynamic NTK, YaRN and "
        "LongRoPE scale by the sequence length or an attention factor the rope operator lacks"
    )


def spec_from_config(config: dict) -> LlamaSpec:
    """A ``LlamaSpec`` from a parsed config.json; ``UnsupportedModelError`` says what is not
    supported (an architecture, sliding-window attention, an activation, a rope type)."""
    model_type = config.get("model_type")
    architectures = config.get("architectures") or []
    family = FAMILIES.get(model_type)
    if family is None:
        for architecture in architectures:
            family = ARCHITECTURES.get(architecture)
    if family is None:
        raise UnsupportedModelError(
            f"unsupported architecture: model_type {model_type!r}, architectures "
            f"{architectures!r}; supported: {', '.join(sorted(ARCHITECTURES))} (model_type "
            f"{', '.join(sorted(FAMILIES))})"
        )
    unknown = [a for a in architectures if a not in ARCHITECTURES]
    if unknown:
        raise UnsupportedModelError(
            f"unsupported architecture {unknown[0]!r} (model_type {model_type!r}): the converter "
            f"writes the causal-LM graph of {', '.join(sorted(ARCHITECTURES))}"
        )
    hidden = _get(config, "hidden_size", int)
    heads_q = _get(config, "num_attention_heads", int)
    heads_kv = _get(config, "num_key_value_heads", int, heads_q)
    head_dim = config.get("head_dim")
    if head_dim is None:
        if hidden % heads_q:
            raise UnsupportedModelError(
                f"config.json: hidden_size {hidden} is not a multiple of num_attention_heads "
                f"{heads_q} and there is no head_dim"
            )
        head_dim = hidden // heads_q
    head_dim = _get({"head_dim": head_dim}, "head_dim", int)
    if heads_q % heads_kv:
        raise UnsupportedModelError(
            f"config.json: num_attention_heads {heads_q} is not a multiple of "
            f"num_key_value_heads {heads_kv}"
        )
    if head_dim % 2:
        raise UnsupportedModelError(f"config.json: head_dim {head_dim} is odd; RoPE needs it even")
    activation = config.get("hidden_act", "silu")
    if activation != "silu":
        raise UnsupportedModelError(
            f"config.json: hidden_act {activation!r} is not supported (SwiGLU with silu only)"
        )
    max_position = _get(config, "max_position_embeddings", int, 0)
    _check_attention_window(config, family, max_position)
    attention_bias = bool(config.get("attention_bias", False))
    return LlamaSpec(
        family=family,
        hidden=hidden,
        intermediate=_get(config, "intermediate_size", int),
        layers=_get(config, "num_hidden_layers", int),
        heads_q=heads_q,
        heads_kv=heads_kv,
        head_dim=head_dim,
        vocab=_get(config, "vocab_size", int),
        eps=_get(config, "rms_norm_eps", float, 1e-6),
        rope=_rope(config),
        tied=bool(config.get("tie_word_embeddings", False)),
        attention_bias=True if family == "qwen2" else attention_bias,
        o_bias=attention_bias if family != "qwen2" else False,
        mlp_bias=bool(config.get("mlp_bias", False)),
        max_position=max_position,
        torch_dtype=config.get("dtype", config.get("torch_dtype")),
    )


def _check_attention_window(config: dict, family: str, max_position: int) -> None:
    """Every layer must attend to its whole sequence: the attention operator has no window."""
    if family == "mistral":
        window = config.get("sliding_window")
        if window is not None and (max_position == 0 or window < max_position):
            raise UnsupportedModelError(
                f"config.json: sliding_window {window} is smaller than max_position_embeddings "
                f"{max_position}: Mistral's sliding-window attention is not supported (the "
                "attention operator attends to the whole sequence, which would differ from "
                f"transformers for sequences longer than {window})"
            )
    if family == "qwen2" and config.get("use_sliding_window", False):
        raise UnsupportedModelError(
            "config.json: use_sliding_window is true: Qwen2's sliding-window layers are not "
            "supported (the attention operator attends to the whole sequence)"
        )
    layer_types = config.get("layer_types") or []
    windowed = [i for i, kind in enumerate(layer_types) if kind != "full_attention"]
    if windowed:
        raise UnsupportedModelError(
            f"config.json: layer {windowed[0]} is {layer_types[windowed[0]]!r}; only "
            "full_attention layers are supported"
        )


def build_graph(spec: LlamaSpec, dtype: str = "f32") -> tuple[_graph.Graph, dict]:
    """The whole model as a graph: input ``ids`` [tokens] i32, saved ``logits`` [tokens, vocab]
    of ``dtype``; returns (graph, {weight name: shape})."""
    g = _graph.createGraph()
    shapes = spec.weight_shapes()
    dim_names = _dim_names(spec)
    w = {
        name: g.insertTensor(_graph.tensorDesc(list(zip(dim_names[name], shape)), dtype), name=name)
        for name, shape in shapes.items()
    }
    ids = g.insertTensor(_graph.tensorDesc([("tokens", "tokens")], "i32"), name="ids")

    def linear(x, weight: str, out: str):
        # HF's [out, in] layout, read in place: y[t, o] = sum_d x[t, d] * W[o, d].
        y = g.einsum("td,od->to", x, w[weight], name=out)
        bias = weight[: -len("weight")] + "bias"
        if bias in w:
            y = g.binary(y, w[bias], "add", name=out + ".biased")
        return y

    rope = spec.rope.attributes()
    h = g.embedding(w["model.embed_tokens.weight"], ids, name="embed")
    for i in range(spec.layers):
        p, n = f"model.layers.{i}.", f"layers.{i}."
        x = g.rmsnorm(h, w[p + "input_layernorm.weight"], eps=spec.eps, name=n + "attn_norm")
        q = linear(x, p + "self_attn.q_proj.weight", n + "q")
        k = linear(x, p + "self_attn.k_proj.weight", n + "k")
        v = linear(x, p + "self_attn.v_proj.weight", n + "v")
        q = g.split_heads(q, spec.heads_q, "heads_q", "d_head", name=n + "q_heads")
        k = g.split_heads(k, spec.heads_kv, "heads_kv", "d_head", name=n + "k_heads")
        v = g.split_heads(v, spec.heads_kv, "heads_kv", "d_head", name=n + "v_heads")
        q = g.rope(q, name=n + "q_rope", **rope)
        k = g.rope(k, name=n + "k_rope", **rope)
        a = g.attention(q, k, v, causal=True, name=n + "attn")
        a = g.merge_heads(a, dim_name="q_out", name=n + "attn_merged")
        h = g.binary(
            h,
            linear(a, p + "self_attn.o_proj.weight", n + "attn_out"),
            "add",
            name=n + "attn_residual",
        )
        x = g.rmsnorm(
            h, w[p + "post_attention_layernorm.weight"], eps=spec.eps, name=n + "mlp_norm"
        )
        gate = g.unary(
            linear(x, p + "mlp.gate_proj.weight", n + "gate"), "silu", name=n + "gate_silu"
        )
        up = linear(x, p + "mlp.up_proj.weight", n + "up")
        hidden = g.binary(gate, up, "mul", name=n + "mlp_hidden")
        h = g.binary(
            h,
            linear(hidden, p + "mlp.down_proj.weight", n + "mlp_out"),
            "add",
            name=n + "mlp_residual",
        )
    x = g.rmsnorm(h, w["model.norm.weight"], eps=spec.eps, name="final_norm")
    head = "model.embed_tokens.weight" if spec.tied else "lm_head.weight"
    logits = g.einsum("td,vd->tv", x, w[head], name="logits")
    g.save(logits)
    return g, shapes


def _dim_names(spec: LlamaSpec) -> dict:
    """Each weight's dimension names, so the plan and the server's errors say what they count."""
    names = {}
    for name, shape in spec.weight_shapes().items():
        if name in ("model.embed_tokens.weight", "lm_head.weight"):
            names[name] = ("vocab", "d_model")
        elif len(shape) == 1:
            names[name] = (_out_name(name, spec),)
        else:
            names[name] = (_out_name(name, spec), _in_name(name))
    return names


def _out_name(name: str, spec: LlamaSpec) -> str:
    for key, dim in (
        ("q_proj", "q_out"),
        ("k_proj", "kv_out"),
        ("v_proj", "kv_out"),
        ("gate_proj", "d_ff"),
        ("up_proj", "d_ff"),
    ):
        if f".{key}." in name:
            return dim
    return "d_model"


def _in_name(name: str) -> str:
    if ".o_proj." in name:
        return "q_out"
    if ".down_proj." in name:
        return "d_ff"
    return "d_model"


def parameters(spec: LlamaSpec) -> int:
    """The model's parameter count (its weights' elements)."""
    return sum(math.prod(shape) for shape in spec.weight_shapes().values())


__all__ = [
    "ARCHITECTURES",
    "FAMILIES",
    "LlamaSpec",
    "RopeSpec",
    "UnsupportedModelError",
    "build_graph",
    "parameters",
    "spec_from_config",
]
