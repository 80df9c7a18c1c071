"""Building computation graphs: the paper's API (``createGraph``, ``insertTensor``, ``matmul``...).

A ``Graph`` records inputs and operators and turns them into an ``einsummable.v1.GraphDef``
(proto/einsummable/v1/graph.proto). Every operator is either the generic ``einsum`` or one of the
named operator kinds of docs/operators.md, with that document's attribute names. The graph
checks what it can without sizes the server binds later — equation syntax, ranks, dtypes, fixed
sizes, attribute values — and raises ``GraphError`` with a message naming the node, the input
and the dimension, in the server's own words where it has them. Dimension names travel through
the operators to their outputs the way the server propagates them, so ``Tensor.dims`` shows what
the plan and the server's errors will call each dimension.

Shapes hold ints (fixed sizes) and strings (symbols such as ``"tokens"``, bound to a size when
the graph is compiled or executed). Where a check compares a symbol with a size or with another
symbol the graph cannot decide, and the server checks it once the symbols are bound.
"""

from __future__ import annotations

import inspect
import itertools
import math
import string
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Union

from . import dtypes as _dtypes
from .errors import GraphError

Size = Union[int, str]

# Scalar functions of the einsum operator (docs/operators.md "einsum").
UNARY_FUNCTIONS = (
    "identity",
    "neg",
    "abs",
    "relu",
    "gelu",
    "silu",
    "sigmoid",
    "tanh",
    "exp",
    "log",
    "sqrt",
    "rsqrt",
    "square",
    "reciprocal",
    "scale",
    "add_scalar",
    "pow_scalar",
    "leaky_relu",
)
# The unary functions that read the einsum's `constant`.
CONSTANT_FUNCTIONS = ("scale", "add_scalar", "pow_scalar", "leaky_relu")
BINARY_FUNCTIONS = ("add", "sub", "mul", "div", "max", "min")
AGGREGATIONS = ("sum", "max", "min")
# The operator kinds with a typed helper of the same name (``g.softmax``...), whose checks and
# shape rule ``g.op`` applies to them. Any other kind goes through ``g.op`` with its output type.
OPERATOR_KINDS = (
    "einsum",
    "softmax",
    "rmsnorm",
    "layernorm",
    "rope",
    "split_heads",
    "merge_heads",
    "attention",
    "embedding",
    "write_rows",
    "argmax",
    "top_k",
)
# rope's `scaling` attribute: the frequency schedules of transformers' rope_type "linear" and
# "llama3" (docs/operators.md "rope").
ROPE_SCALINGS = ("none", "linear", "llama3")

_INDEX_LETTERS = string.ascii_lowercase + string.ascii_uppercase
# Element-wise equations read "ij->ij", "ijk,jk->ijk" (docs/graph-format.md's style).
_ELEMENTWISE_LETTERS = "ijklmnopqrstuvwxyzabcdefgh" + string.ascii_uppercase
# Batch indices of a matmul: anything but its own i, j, k.
_BATCH_LETTERS = "".join(c for c in _INDEX_LETTERS if c not in "ijk")


@dataclass(frozen=True)
class Dim:
    """One dimension: what it counts (``name``) and its size, an int or a symbol string."""

    name: str
    size: Size

    @property
    def symbolic(self) -> bool:
        return isinstance(self.size, str)

    def __str__(self) -> str:
        if self.symbolic:
            return self.name if self.name == self.size else f"{self.name}={self.size}"
        return f"{self.name}={self.size}"


def _same_size(a: Size, b: Size) -> bool | None:
    """True/False when decidable now; None when a symbol is involved (the server decides)."""
    if isinstance(a, int) and isinstance(b, int):
        return a == b
    if a == b:
        return True
    return None


def _describe(dim: Dim) -> str:
    return f"'{dim.name}'" + ("" if dim.symbolic and dim.name == dim.size else f" = {dim.size}")


def _type_string(dtype: str, dims: Sequence[Dim]) -> str:
    return f"{dtype}[{', '.join(str(d) for d in dims)}]"


class TensorDesc:
    """The type of a graph input: shape (ints and symbols), dtype and optionally a name.

    A shape entry is an int (a fixed size), a string (a symbol, e.g. ``"tokens"``: the
    dimension is named after it), a ``(name, size)`` pair or a ``Dim``. ``dim_names`` names the
    dimensions explicitly; a fixed dimension left unnamed is called ``<tensor>.<axis>``.
    """

    def __init__(self, shape, dtype="f32", name: str | None = None, dim_names=None):
        if isinstance(shape, (int, str, Dim)):
            shape = [shape]
        elif not hasattr(shape, "__iter__"):
            raise GraphError(f"shape must be a list of sizes, got {shape!r}")
        self.shape_spec = list(shape)
        self.dtype = _dtypes.normalize(dtype)
        if name is not None and (not isinstance(name, str) or not name):
            raise GraphError(f"tensor name must be a non-empty string, got {name!r}")
        self.name = name
        if dim_names is not None:
            dim_names = list(dim_names)
            if len(dim_names) != len(self.shape_spec):
                raise GraphError(
                    f"dim_names has {len(dim_names)} names for a shape of rank "
                    f"{len(self.shape_spec)}"
                )
        self.dim_names = dim_names
        # Checked now, so a bad shape fails where it is written.
        self._resolve(name or "tensor")

    def _resolve(self, tensor_name: str) -> tuple[Dim, ...]:
        dims = []
        for axis, entry in enumerate(self.shape_spec):
            given = self.dim_names[axis] if self.dim_names is not None else None
            if isinstance(entry, Dim):
                name, size = entry.name, entry.size
            elif isinstance(entry, tuple) and len(entry) == 2 and isinstance(entry[0], str):
                name, size = entry
            else:
                name, size = None, entry
            if isinstance(size, bool) or not isinstance(size, (int, str)):
                if hasattr(size, "__index__"):  # numpy integers
                    size = int(size)
                else:
                    raise GraphError(
                        f"tensor '{tensor_name}' dimension {axis}: size {size!r} is neither an "
                        "int nor a symbol string"
                    )
            if isinstance(size, int) and size <= 0:
                raise GraphError(
                    f"tensor '{tensor_name}' dimension {axis}: size {size}; sizes must be positive"
                )
            if isinstance(size, str) and not size:
                raise GraphError(f"tensor '{tensor_name}' dimension {axis}: empty symbol")
            name = given if given is not None else name
            if name is None:
                name = size if isinstance(size, str) else f"{tensor_name}.{axis}"
            if not isinstance(name, str) or not name:
                raise GraphError(
                    f"tensor '{tensor_name}' dimension {axis}: name must be a non-empty string"
                )
            dims.append(Dim(name, size))
        return tuple(dims)

    def __repr__(self) -> str:
        dims = self._resolve(self.name or "tensor")
        named = f", name={self.name!r}" if self.name else ""
        return f"tensorDesc({_type_string(self.dtype, dims)}{named})"


def tensorDesc(shape, dtype="f32", name: str | None = None, dim_names=None) -> TensorDesc:
    """The type of a graph input (the paper's ``es.tensorDesc(shape, dtype)``)."""
    return TensorDesc(shape, dtype, name=name, dim_names=dim_names)


tensor_desc = tensorDesc


class Tensor:
    """A tensor of a graph: an input or an operator's output. Handles are cheap references."""

    __slots__ = ("dims", "dtype", "graph", "name", "producer")

    def __init__(self, graph: Graph, name: str, dtype: str, dims: tuple[Dim, ...], producer):
        self.graph = graph
        self.name = name
        self.dtype = dtype
        self.dims = dims
        self.producer = producer  # the operator kind, or None for a graph input

    @property
    def shape(self) -> tuple[Size, ...]:
        return tuple(d.size for d in self.dims)

    @property
    def rank(self) -> int:
        return len(self.dims)

    @property
    def is_input(self) -> bool:
        return self.producer is None

    @property
    def symbols(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(d.size for d in self.dims if d.symbolic))

    def type_string(self) -> str:
        return _type_string(self.dtype, self.dims)

    def __repr__(self) -> str:
        return f"Tensor({self.name!r}, {self.type_string()})"

    # Operator sugar: a @ b, a + b, a - b, a * b, a / b, -a.
    def __matmul__(self, other):
        return self.graph.matmul(self, other)

    def __add__(self, other):
        return self.graph.binary(self, other, "add")

    def __sub__(self, other):
        return self.graph.binary(self, other, "sub")

    def __mul__(self, other):
        return self.graph.binary(self, other, "mul")

    def __truediv__(self, other):
        return self.graph.binary(self, other, "div")

    def __neg__(self):
        return self.graph.unary(self, "neg")

    __hash__ = object.__hash__


@dataclass(frozen=True)
class Attr:
    """An attribute value with its GraphDef type: bool, int, double, string or int_list."""

    kind: str
    value: object


@dataclass
class Operator:
    """One node: kind, attributes (in insertion order), input names, output tensor."""

    name: str
    kind: str
    attributes: dict
    inputs: tuple
    output: Tensor


def _as_double(value, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        if hasattr(value, "__float__") and not isinstance(value, (str, bytes)):
            value = float(value)
        else:
            raise GraphError(f"{what} must be a number, got {value!r}")
    value = float(value)
    if math.isnan(value):
        raise GraphError(f"{what} is NaN")
    return value


def _as_int(value, what: str) -> int:
    if isinstance(value, bool) or not hasattr(value, "__index__"):
        raise GraphError(f"{what} must be an integer, got {value!r}")
    return int(value)


class Graph:
    """A computation graph under construction; ``es.createGraph()`` makes one."""

    def __init__(self):
        self._tensors: dict[str, Tensor] = {}
        self._inputs: list[Tensor] = []
        self._operators: list[Operator] = []
        self._saved: list[str] = []
        self._counters: dict[str, itertools.count] = {}

    # ---- names -------------------------------------------------------------------------------

    def _fresh_name(self, base: str) -> str:
        counter = self._counters.setdefault(base, itertools.count())
        while True:
            name = f"{base}_{next(counter)}"
            if name not in self._tensors:
                return name

    def _claim_name(self, name: str | None, base: str) -> str:
        if name is None:
            return self._fresh_name(base)
        if not isinstance(name, str) or not name:
            raise GraphError(f"a name must be a non-empty string, got {name!r}")
        if name in self._tensors:
            raise GraphError(f"'{name}': a tensor with this name already exists")
        return name

    def _tensor(self, value, what: str) -> Tensor:
        if isinstance(value, str):
            if value not in self._tensors:
                raise GraphError(f"{what}: no tensor named '{value}' in this graph")
            return self._tensors[value]
        if not isinstance(value, Tensor):
            raise GraphError(f"{what}: expected a Tensor of this graph, got {type(value).__name__}")
        if value.graph is not self:
            raise GraphError(f"{what}: tensor '{value.name}' belongs to another graph")
        return value

    # ---- reading -----------------------------------------------------------------------------

    @property
    def inputs(self) -> tuple[Tensor, ...]:
        return tuple(self._inputs)

    @property
    def operators(self) -> tuple[Operator, ...]:
        return tuple(self._operators)

    @property
    def saved(self) -> tuple[Tensor, ...]:
        return tuple(self._tensors[name] for name in self._saved)

    def tensor(self, name: str) -> Tensor:
        """The tensor called ``name``."""
        return self._tensor(name, "tensor")

    def symbols(self) -> tuple[str, ...]:
        """The symbols the graph's input dimensions use, in order of first use."""
        return tuple(dict.fromkeys(s for t in self._inputs for s in t.symbols))

    def __repr__(self) -> str:
        return (
            f"Graph({len(self._inputs)} inputs, {len(self._operators)} operators, "
            f"saved {list(self._saved)})"
        )

    # ---- inputs and outputs ------------------------------------------------------------------

    def insertTensor(self, desc, name: str | None = None) -> Tensor:
        """Adds a graph input of type ``desc`` (a ``tensorDesc``, or a shape with f32 dtype)."""
        if not isinstance(desc, TensorDesc):
            desc = TensorDesc(desc)
        if name is not None and desc.name is not None and name != desc.name:
            raise GraphError(f"insertTensor: name {name!r} differs from the desc's {desc.name!r}")
        name = self._claim_name(name if name is not None else desc.name, "input")
        tensor = Tensor(self, name, desc.dtype, desc._resolve(name), None)
        self._tensors[name] = tensor
        self._inputs.append(tensor)
        return tensor

    insert_tensor = insertTensor

    def save(self, *tensors) -> None:
        """Marks tensors as outputs: computed by ``execute`` and returned by ``offload``."""
        for value in tensors:
            items = value if isinstance(value, (list, tuple)) else [value]
            for item in items:
                tensor = self._tensor(item, "save")
                if tensor.name not in self._saved:
                    self._saved.append(tensor.name)

    # ---- the generic path: every operator --------------------------------------------------

    def op(self, kind: str, inputs, attributes=None, *, output=None, name: str | None = None):
        """Adds one operator of any kind docs/operators.md lists: ``g.op("softmax", [x],
        {"axis": -1})``. Every operator goes through here, the typed helpers below included, so a
        kind the server gained after this client needs no client change.

        ``inputs`` are tensors (or their names) in operand order; ``attributes`` maps attribute
        names to bool, int, float, str or a list of ints (an ``Attr`` gives the GraphDef type
        explicitly). The output's type is ``output`` when given: a ``tensorDesc`` (unnamed fixed
        dimensions are called ``<name>.<axis>``), which the server checks when the graph is
        registered. Without it a kind with a typed helper (``OPERATOR_KINDS``) gets that
        helper's checks and shape rule; any other kind needs ``output``."""
        if not isinstance(kind, str) or not kind:
            raise GraphError(f"an operator kind must be a non-empty string, got {kind!r}")
        if isinstance(inputs, (Tensor, str)):
            inputs = [inputs]
        tensors = [self._tensor(t, f"{kind} input {i}") for i, t in enumerate(inputs)]
        attributes = {key: _to_attr(kind, key, value) for key, value in (attributes or {}).items()}
        if output is None:
            if kind not in OPERATOR_KINDS:
                raise GraphError(
                    f"operator kind '{kind}' has no typed helper in this client (those with one: "
                    f"{', '.join(OPERATOR_KINDS)}): give its output's type, "
                    f"g.op({kind!r}, inputs, attributes, output=es.tensorDesc(shape, dtype))"
                )
            return _typed_helper(self, kind, tensors, attributes, name)
        if isinstance(output, TensorDesc):
            name = self._claim_name(name, kind)
            desc = output

            def infer():
                return desc.dtype, desc._resolve(name)

        elif callable(output):
            # A typed helper's shape rule: (dtype, dims), or GraphError for a node it refuses.
            infer = output
        else:
            raise GraphError(f"{kind}: output must be a tensorDesc, got {type(output).__name__}")
        return self._add(kind, kind, name, tensors, attributes, infer)

    def _add(
        self, kind: str, base: str, name, inputs: Sequence[Tensor], attributes: dict, infer
    ) -> Tensor:
        """The node itself: claims the name, infers the output type (errors name the node)."""
        name = self._claim_name(name, base)
        where = f"node '{name}' ({kind}, inputs {', '.join(t.name for t in inputs)}): "
        try:
            dtype, dims = infer()
        except GraphError as error:
            raise GraphError(where + str(error)) from None
        output = Tensor(self, name, dtype, tuple(dims), kind)
        self._tensors[name] = output
        self._operators.append(
            Operator(name, kind, attributes, tuple(t.name for t in inputs), output)
        )
        return output

    # ---- the generic einsum ------------------------------------------------------------------

    def einsum(
        self,
        equation: str,
        *inputs,
        join: str | None = None,
        agg: str | None = None,
        constant: float | None = None,
        name: str | None = None,
    ) -> Tensor:
        """The extended einsum: ``g.einsum("ij,jk->ik", a, b)``; ``join`` is the scalar function
        applied to the operands at each point (default ``mul``, ``identity`` for one input),
        ``agg`` combines values over reduced indices (default ``sum``), ``constant`` feeds
        ``scale``, ``add_scalar``, ``pow_scalar`` and ``leaky_relu``."""
        if len(inputs) == 1 and isinstance(inputs[0], (list, tuple)):
            inputs = tuple(inputs[0])
        tensors = [self._tensor(t, f"einsum input {i}") for i, t in enumerate(inputs)]
        return self._einsum(equation, tensors, join, agg, constant, name, base="einsum")

    def _einsum(self, equation, tensors, join, agg, constant, name, base) -> Tensor:
        if not isinstance(equation, str):
            raise GraphError(f"einsum equation must be a string, got {equation!r}")
        attributes = {"equation": Attr("string", equation)}
        if join is not None:
            attributes["join"] = Attr("string", join)
        if agg is not None:
            attributes["agg"] = Attr("string", agg)
        if constant is not None:
            attributes["constant"] = Attr("double", _as_double(constant, "constant"))

        def infer():
            return _infer_einsum(equation, tensors, join, agg)

        name = self._claim_name(name, base)
        return self.op("einsum", tensors, attributes, output=infer, name=name)

    def matmul(self, a, b, name: str | None = None) -> Tensor:
        """``a [..., m, k] · b [k, n]`` (b shared by every leading index of a), or a batched
        product ``a [..., m, k] · b [..., k, n]`` with the same leading dimensions."""
        a = self._tensor(a, "matmul input 0")
        b = self._tensor(b, "matmul input 1")
        if a.rank < 2 or b.rank < 2:
            raise GraphError(
                f"matmul needs operands of rank >= 2, got {a.name} {a.type_string()} and "
                f"{b.name} {b.type_string()}"
            )
        if b.rank != 2 and b.rank != a.rank:
            raise GraphError(
                f"matmul: b ({b.name} {b.type_string()}) must be a matrix or have a's rank {a.rank}"
            )
        if a.rank - 2 > len(_BATCH_LETTERS):
            raise GraphError(f"matmul: rank {a.rank} has too many batch dimensions")
        batch = _BATCH_LETTERS[: a.rank - 2]
        a_term = batch + "ij"
        b_term = ("" if b.rank == 2 else batch) + "jk"
        return self._einsum(
            f"{a_term},{b_term}->{batch}ik", [a, b], None, None, None, name, base="matmul"
        )

    def unary(self, x, fn: str, constant: float = 0.0, name: str | None = None) -> Tensor:
        """An element-wise scalar function: ``g.unary(x, "relu", 0.0)``; ``constant`` is used by
        ``scale``, ``add_scalar``, ``pow_scalar`` and ``leaky_relu``."""
        x = self._tensor(x, "unary input")
        if fn not in UNARY_FUNCTIONS:
            raise GraphError(f"unknown unary function {fn!r} (known: {', '.join(UNARY_FUNCTIONS)})")
        letters = _letters(x.rank)
        return self._einsum(
            f"{letters}->{letters}",
            [x],
            fn,
            None,
            constant if fn in CONSTANT_FUNCTIONS else None,
            name,
            base=fn,
        )

    def binary(self, a, b, fn: str, name: str | None = None) -> Tensor:
        """An element-wise function of two tensors (``add sub mul div max min``). The operand
        of lower rank is matched against the trailing dimensions of the other, whose sizes must
        be equal (``[tokens, d] + [d]`` adds a vector to every row)."""
        a = self._tensor(a, "binary input 0")
        b = self._tensor(b, "binary input 1")
        if fn not in BINARY_FUNCTIONS:
            raise GraphError(
                f"unknown binary function {fn!r} (known: {', '.join(BINARY_FUNCTIONS)})"
            )
        rank = max(a.rank, b.rank)
        letters = _letters(rank)
        a_term = letters[rank - a.rank :]
        b_term = letters[rank - b.rank :]
        out = a_term if a.rank >= b.rank else b_term
        return self._einsum(f"{a_term},{b_term}->{out}", [a, b], fn, None, None, name, base=fn)

    # ---- named operators ---------------------------------------------------------------------

    def softmax(self, x, axis: int = -1, name: str | None = None) -> Tensor:
        """Softmax along ``axis`` (default the last)."""
        x = self._tensor(x, "softmax input")
        axis = _as_int(axis, "softmax axis")

        def infer():
            _check_not_integer(x, 0)
            if x.rank == 0 or not -x.rank <= axis < x.rank:
                raise GraphError(f"softmax axis {axis} is out of range for rank {x.rank}")
            return x.dtype, x.dims

        return self.op("softmax", [x], {"axis": Attr("int", axis)}, output=infer, name=name)

    def rmsnorm(self, x, weight, eps: float = 1e-5, name: str | None = None) -> Tensor:
        """RMS normalisation of x's last dimension, times ``weight`` [d]."""
        x = self._tensor(x, "rmsnorm input 0")
        weight = self._tensor(weight, "rmsnorm input 1")
        return self._norm("rmsnorm", name, [x, weight], eps)

    def layernorm(self, x, gamma, beta=None, eps: float = 1e-5, name: str | None = None) -> Tensor:
        """Layer normalisation of x's last dimension: ``gamma`` [d] scales, ``beta`` [d] (optional)
        shifts."""
        tensors = [self._tensor(x, "layernorm input 0"), self._tensor(gamma, "layernorm input 1")]
        if beta is not None:
            tensors.append(self._tensor(beta, "layernorm input 2"))
        return self._norm("layernorm", name, tensors, eps)

    def _norm(self, kind, name, tensors, eps) -> Tensor:
        eps = _as_double(eps, f"{kind} eps")

        def infer():
            x = tensors[0]
            _check_not_integer(x, 0)
            if x.rank == 0:
                raise GraphError(
                    f"input 0 ({x.name} {x.type_string()}) must have at least one dimension to "
                    "normalise"
                )
            last = x.dims[-1]
            for idx, param in enumerate(tensors[1:], start=1):
                if param.rank != 1 or _same_size(param.dims[0].size, last.size) is False:
                    raise GraphError(
                        f"input {idx} ({param.name} {param.type_string()}): shape mismatch: "
                        f"expected a vector of {last.size} (the normalised dimension "
                        f"'{last.name}' of input 0)"
                    )
                if param.dtype != x.dtype:
                    raise GraphError(
                        f"input {idx} ({param.name} {param.type_string()}): dtype mismatch: "
                        f"input 0 is {x.dtype}"
                    )
            if not eps >= 0.0:
                raise GraphError(f"attribute 'eps' must be >= 0, got {eps}")
            return x.dtype, x.dims

        return self.op(kind, tensors, {"eps": Attr("double", eps)}, output=infer, name=name)

    def rope(
        self,
        x,
        theta: float = 10000.0,
        sequence_ends=None,
        name: str | None = None,
        scaling: str = "none",
        scaling_factor: float | None = None,
        low_freq_factor: float | None = None,
        high_freq_factor: float | None = None,
        original_max_position: int | None = None,
        positions=None,
    ) -> Tensor:
        """Rotary position embedding ("rotate half") of x [tokens, ..., d_head]. Positions restart
        at every end listed in ``sequence_ends`` (packed sequences; default one sequence). With
        ``positions`` (an i32 or i64 [tokens] tensor, transformers' ``position_ids``) token t's
        position is ``positions[t]``, given at run time instead: a decode step's tokens continue
        their caches; ``sequence_ends`` is then not given.

        ``scaling`` stretches the frequencies for contexts beyond the training length, as
        transformers' ``rope_scaling``: ``"linear"`` divides every frequency by
        ``scaling_factor``; ``"llama3"`` (LLaMA 3.1) divides the low frequencies (wavelengths
        above ``original_max_position / low_freq_factor``) by ``scaling_factor``, keeps the high
        ones (below ``original_max_position / high_freq_factor``) and blends in between."""
        x = self._tensor(x, "rope input")
        theta = _as_double(theta, "rope theta")
        attributes = {"theta": Attr("double", theta)}
        ends = _sequence_ends(sequence_ends)
        if ends is not None:
            attributes["sequence_ends"] = Attr("int_list", ends)
        attributes.update(
            _rope_scaling(
                scaling, scaling_factor, low_freq_factor, high_freq_factor, original_max_position
            )
        )

        inputs = [x]
        if positions is not None:
            if ends is not None:
                raise GraphError(
                    "rope takes its positions from the positions input or from sequence_ends, "
                    "not both"
                )
            inputs.append(self._tensor(positions, "rope positions"))

        def infer():
            _check_not_integer(x, 0)
            if x.rank < 2:
                raise GraphError(
                    f"input 0 ({x.name} {x.type_string()}): rope needs [tokens, ..., d_head]"
                )
            if len(inputs) == 2:
                p = inputs[1]
                if p.rank != 1 or not _dtypes.is_integer(p.dtype):
                    raise GraphError(
                        f"input 1 ({p.name} {p.type_string()}): rope's positions are i32 or i64 "
                        "[tokens]"
                    )
                if _same_size(p.dims[0].size, x.dims[0].size) is False:
                    raise GraphError(
                        f"input 1 ({p.name} {p.type_string()}): shape mismatch: "
                        f"{p.dims[0].size} positions for x's {x.dims[0].size} tokens"
                    )
            last = x.dims[-1]
            if isinstance(last.size, int) and last.size % 2:
                raise GraphError(
                    f"input 0 ({x.name} {x.type_string()}): rope needs an even head dimension, "
                    f"'{last.name}' is {last.size}"
                )
            if not theta > 0.0:
                raise GraphError(f"rope theta must be > 0, got {theta}")
            _check_sequence_ends(ends, x.dims[0])
            return x.dtype, x.dims

        return self.op("rope", inputs, attributes, output=infer, name=name)

    def split_heads(
        self,
        x,
        heads: int,
        heads_name: str = "heads",
        head_dim_name: str = "d_head",
        name: str | None = None,
    ) -> Tensor:
        """[..., h·d] -> [..., h, d]: the last dimension split into ``heads`` heads."""
        x = self._tensor(x, "split_heads input")
        heads = _as_int(heads, "split_heads heads")
        attributes = {
            "heads": Attr("int", heads),
            "heads_name": Attr("string", heads_name),
            "head_dim_name": Attr("string", head_dim_name),
        }

        def infer():
            if x.rank == 0:
                raise GraphError(
                    f"input 0 ({x.name} {x.type_string()}): needs a dimension to split into heads"
                )
            last = x.dims[-1]
            if last.symbolic:
                raise GraphError(
                    f"input 0 ({x.name} {x.type_string()}): the split dimension '{last.name}' "
                    "must have a fixed size"
                )
            if heads <= 0 or last.size % heads:
                raise GraphError(
                    f"input 0 ({x.name} {x.type_string()}): shape mismatch: dimension "
                    f"'{last.name}' ({last.size}) does not split into {heads} heads"
                )
            return x.dtype, (
                *x.dims[:-1],
                Dim(heads_name, heads),
                Dim(head_dim_name, last.size // heads),
            )

        return self.op("split_heads", [x], attributes, output=infer, name=name)

    def merge_heads(self, x, dim_name: str | None = None, name: str | None = None) -> Tensor:
        """[..., h, d] -> [..., h·d]; the merged dimension is called ``dim_name`` (default
        ``"<heads>*<d>"`` from the input's dimension names)."""
        x = self._tensor(x, "merge_heads input")
        attributes = {} if dim_name is None else {"dim_name": Attr("string", dim_name)}

        def infer():
            if x.rank < 2:
                raise GraphError(
                    f"input 0 ({x.name} {x.type_string()}): needs [..., heads, head_dim], at "
                    "least two dimensions"
                )
            heads, head_dim = x.dims[-2], x.dims[-1]
            if heads.symbolic or head_dim.symbolic:
                raise GraphError(
                    f"input 0 ({x.name} {x.type_string()}): heads and head dimension must have "
                    "fixed sizes"
                )
            merged = dim_name if dim_name is not None else f"{heads.name}*{head_dim.name}"
            return x.dtype, (*x.dims[:-2], Dim(merged, heads.size * head_dim.size))

        return self.op("merge_heads", [x], attributes, output=infer, name=name)

    def attention(
        self,
        q,
        k,
        v,
        causal: bool = False,
        sequence_ends=None,
        scale=None,
        name: str | None = None,
        key_ends=None,
        key_lengths=None,
        page_table=None,
        page_size: int | None = None,
    ) -> Tensor:
        """Scaled dot-product attention over packed sequences, grouped-query when k and v have
        fewer heads than q: q [seq, heads_q, d], k [keys, heads_kv, d], v [keys, heads_kv, d_v]
        -> [seq, heads_q, d_v]. A query sees the keys of its own sequence (only earlier ones when
        ``causal``); ``scale`` defaults to 1/sqrt(d).

        Without ``key_ends`` the keys are the queries' own rows (self-attention). With
        ``key_ends`` (one end per sequence) each sequence's queries read its own run of keys, of
        any length: a decode step's new tokens against a cache. Causal masking is then
        bottom-right: a sequence's last query sees all its keys, each earlier one a key fewer.

        ``key_lengths`` (an i32 or i64 [sequences] tensor, with ``key_ends``) gives at run time
        how many keys of each sequence's region are filled: the rest weigh nothing, and the
        region's size is its capacity (a plan made for it serves every fill).

        Paged: with ``page_size`` and ``page_table`` (an i32 or i64 [sequences, pages] tensor,
        with ``key_lengths`` and no ``key_ends``), k and v are a pool of pages of ``page_size``
        rows shared by the sequences, and sequence s's key j is row
        ``page_table[s][j // page_size] * page_size + j % page_size`` (its capacity: pages ·
        page_size)."""
        tensors = [self._tensor(t, f"attention input {i}") for i, t in enumerate((q, k, v))]
        paged = page_size is not None or page_table is not None
        if paged and (page_size is None or page_table is None or key_lengths is None):
            raise GraphError("paged attention takes page_size, page_table and key_lengths together")
        if paged and key_ends is not None:
            raise GraphError(
                "attention with page_size reads each sequence's keys through page_table: give no "
                "key_ends"
            )
        if key_lengths is not None:
            if key_ends is None and not paged:
                raise GraphError(
                    "attention key_lengths fill the key regions key_ends gives; give key_ends"
                )
            tensors.append(self._tensor(key_lengths, "attention key_lengths"))
        if paged:
            if not isinstance(page_size, int) or isinstance(page_size, bool) or page_size < 1:
                raise GraphError(
                    f"attention page_size must be an int of at least 1, got {page_size!r}"
                )
            tensors.append(self._tensor(page_table, "attention page_table"))
        if not isinstance(causal, bool):
            raise GraphError(f"attention causal must be a bool, got {causal!r}")
        attributes = {"causal": Attr("bool", causal)}
        ends = _sequence_ends(sequence_ends)
        if ends is not None:
            attributes["sequence_ends"] = Attr("int_list", ends)
        cache_ends = _sequence_ends(key_ends, "key_ends")
        if cache_ends is not None:
            attributes["key_ends"] = Attr("int_list", cache_ends)
        if paged:
            attributes["page_size"] = Attr("int", page_size)
        if scale is not None:
            attributes["scale"] = Attr("double", _as_double(scale, "attention scale"))

        def infer():
            q_, k_, v_ = tensors[:3]
            _check_not_integer(q_, 0)
            if len(tensors) >= 4:
                lengths = tensors[3]
                count = 1 if ends is None else len(ends)
                if (
                    lengths.rank != 1
                    or not _dtypes.is_integer(lengths.dtype)
                    or _same_size(lengths.dims[0].size, count) is False
                ):
                    raise GraphError(
                        f"input 3 ({lengths.name} {lengths.type_string()}): key_lengths are i32 "
                        f"or i64 [sequences], one per sequence ({count})"
                    )
            for idx, (role, t) in enumerate(zip("qkv", tensors[:3])):
                if t.rank != 3:
                    raise GraphError(
                        f"input {idx} ({t.name} {t.type_string()}): {role} must be "
                        "[sequence, heads, head_dim]"
                    )
                if t.dtype != q_.dtype:
                    raise GraphError(
                        f"input {idx} ({t.name} {t.type_string()}): dtype mismatch: q is {q_.dtype}"
                    )
            if paged:
                table = tensors[4]
                count = 1 if ends is None else len(ends)
                if (
                    table.rank != 2
                    or not _dtypes.is_integer(table.dtype)
                    or _same_size(table.dims[0].size, count) is False
                ):
                    raise GraphError(
                        f"input 4 ({table.name} {table.type_string()}): page_table is i32 or i64 "
                        f"[sequences, pages_per_sequence], a row per sequence ({count})"
                    )
                if isinstance(k_.dims[0].size, int) and k_.dims[0].size % page_size:
                    raise GraphError(
                        f"input 1 ({k_.name} {k_.type_string()}): k's {k_.dims[0].size} rows are "
                        f"not whole pages of page_size {page_size} (k and v are the pool of pages)"
                    )
            rows_of = k_ if cache_ends is not None or paged else q_
            for idx, t in ((1, k_), (2, v_)):
                if _same_size(t.dims[0].size, rows_of.dims[0].size) is False:
                    expected = (
                        f"k's keys are {k_.dims[0].size}"
                        if cache_ends is not None
                        else f"q's sequence is {q_.dims[0].size} (give key_ends for keys of a "
                        "length of their own)"
                    )
                    raise GraphError(
                        f"input {idx} ({t.name} {t.type_string()}): shape mismatch: dimension 0 "
                        f"('{t.dims[0].name}') is {t.dims[0].size}, {expected}"
                    )
            if _same_size(k_.dims[2].size, q_.dims[2].size) is False:
                raise GraphError(
                    f"input 1 ({k_.name} {k_.type_string()}): shape mismatch: head dimension "
                    f"{k_.dims[2].size} differs from q's {q_.dims[2].size}"
                )
            if _same_size(v_.dims[1].size, k_.dims[1].size) is False:
                raise GraphError(
                    f"input 2 ({v_.name} {v_.type_string()}): shape mismatch: "
                    f"{v_.dims[1].size} heads, k has {k_.dims[1].size}"
                )
            heads_q, heads_kv = q_.dims[1], k_.dims[1]
            if (
                isinstance(heads_q.size, int)
                and isinstance(heads_kv.size, int)
                and heads_q.size % heads_kv.size
            ):
                raise GraphError(
                    f"heads_q ('{heads_q.name}' = {heads_q.size}) is not a multiple of heads_kv "
                    f"('{heads_kv.name}' = {heads_kv.size})"
                )
            _check_sequence_ends(ends, q_.dims[0])
            if cache_ends is not None:
                _check_sequence_ends(cache_ends, k_.dims[0], "key_ends", "number of keys")
                count = 1 if ends is None else len(ends)
                if len(cache_ends) != count:
                    raise GraphError(
                        f"key_ends has {len(cache_ends)} entries and sequence_ends {count}: give "
                        "one key end per sequence"
                    )
                _check_bottom_right(causal, ends, cache_ends, q_.dims[0])
            return q_.dtype, (q_.dims[0], q_.dims[1], v_.dims[2])

        return self.op("attention", tensors, attributes, output=infer, name=name)

    def embedding(self, table, ids, name: str | None = None) -> Tensor:
        """Rows of ``table`` [vocab, d] (a float type) picked by ``ids`` [tokens] (i32 or i64):
        [tokens, d] of the table's dtype, its dimensions named as ids' dimension 0 and the
        table's dimension 1. An id outside [0, vocab) fails the request that gives it."""
        tensors = [
            self._tensor(table, "embedding input 0"),
            self._tensor(ids, "embedding input 1"),
        ]

        def infer():
            table_, ids_ = tensors
            if table_.rank != 2:
                raise GraphError(
                    f"input 0 ({table_.name} {table_.type_string()}): the table must be [vocab, d]"
                )
            if _dtypes.is_integer(table_.dtype):
                raise GraphError(
                    f"input 0 ({table_.name} {table_.type_string()}): the table must have a "
                    "float dtype (f16, bf16, f32, f64)"
                )
            if ids_.rank != 1:
                raise GraphError(
                    f"input 1 ({ids_.name} {ids_.type_string()}): ids must be [tokens]"
                )
            if not _dtypes.is_integer(ids_.dtype):
                raise GraphError(
                    f"input 1 ({ids_.name} {ids_.type_string()}): ids must be i32 or i64, "
                    f"not {ids_.dtype}"
                )
            return table_.dtype, (ids_.dims[0], table_.dims[1])

        return self.op("embedding", tensors, {}, output=infer, name=name)

    def write_rows(self, state, rows, slots, name: str | None = None) -> Tensor:
        """``state`` [R, ...] with ``rows`` [n, ...] written at ``slots`` [n] (i32 or i64): what
        a decode step does to a key/value cache. ``rows`` have the state's dtype and trailing
        dimensions; a slot outside [0, R), or one written twice, fails the request that gives
        it."""
        tensors = [
            self._tensor(state, "write_rows input 0"),
            self._tensor(rows, "write_rows input 1"),
            self._tensor(slots, "write_rows input 2"),
        ]

        def infer():
            state_, rows_, slots_ = tensors
            if state_.rank < 1 or _dtypes.is_integer(state_.dtype):
                raise GraphError(
                    f"input 0 ({state_.name} {state_.type_string()}): write_rows' state is a "
                    "floating-point tensor [R, ...]"
                )
            if rows_.rank != state_.rank or rows_.dtype != state_.dtype:
                raise GraphError(
                    f"input 1 ({rows_.name} {rows_.type_string()}): write_rows' rows are [n, ...] "
                    f"of the state's dtype ({state_.dtype}) and rank ({state_.rank})"
                )
            for d in range(1, state_.rank):
                if _same_size(rows_.dims[d].size, state_.dims[d].size) is False:
                    raise GraphError(
                        f"input 1 ({rows_.name} {rows_.type_string()}): shape mismatch: dimension "
                        f"{d} ('{rows_.dims[d].name}') is {rows_.dims[d].size}, the state's is "
                        f"{state_.dims[d].size}"
                    )
            if (
                slots_.rank != 1
                or not _dtypes.is_integer(slots_.dtype)
                or _same_size(slots_.dims[0].size, rows_.dims[0].size) is False
            ):
                raise GraphError(
                    f"input 2 ({slots_.name} {slots_.type_string()}): write_rows' slots are i32 "
                    f"or i64 [n], one per row ({rows_.dims[0].size})"
                )
            return state_.dtype, state_.dims

        return self.op("write_rows", tensors, {}, output=infer, name=name)

    def argmax(self, x, name: str | None = None) -> Tensor:
        """Per row of ``x`` [..., vocab] (a float type), the index of its largest element: i64
        [..., 1] (the last dimension kept, named ``argmax``), like ``torch.argmax(x, dim=-1,
        keepdim=True)``. The first largest wins a tie; NaN counts as larger than any number.
        Split by vocabulary, the blocks' (value, index) pairs combine on the devices."""
        tensors = [self._tensor(x, "argmax input 0")]

        def infer():
            (x_,) = tensors
            if x_.rank < 1 or _dtypes.is_integer(x_.dtype):
                raise GraphError(
                    f"input 0 ({x_.name} {x_.type_string()}): argmax reads a floating-point "
                    "tensor [..., vocab]"
                )
            return "i64", (*x_.dims[:-1], Dim("argmax", 1))

        return self.op("argmax", tensors, {}, output=infer, name=name)

    def top_k(self, x, k: int, name: str | None = None) -> Tensor:
        """Per row of ``x`` [..., vocab] (a float type), its ``k`` best elements with their
        indices, best first: pairs [..., k, 2] of (value, index) (f32; f64 for an f64 ``x``),
        like ``torch.topk(x, k)``'s values and indices side by side. Larger first, NaN larger than
        any number, equal elements by the smaller index (``argmax``'s rule: pair 0 is its
        choice). 1 <= k <= min(vocab, 1024). Split by vocabulary, the blocks' lists merge on the
        devices."""
        tensors = [self._tensor(x, "top_k input 0")]
        k = _as_int(k, "top_k: attribute k")

        def infer():
            (x_,) = tensors
            if x_.rank < 1 or _dtypes.is_integer(x_.dtype):
                raise GraphError(
                    f"input 0 ({x_.name} {x_.type_string()}): top_k reads a floating-point "
                    "tensor [..., vocab]"
                )
            vocab = x_.dims[-1].size
            limit = min(vocab, 1024) if isinstance(vocab, int) else 1024
            if not 1 <= k <= limit:
                raise GraphError(f"top_k: attribute k is {k}; give 1 to {limit}")
            dtype = "f64" if x_.dtype == "f64" else "f32"
            return dtype, (*x_.dims[:-1], Dim("top_k", k), Dim("top_k_pair", 2))

        return self.op("top_k", tensors, {"k": k}, output=infer, name=name)

    # camelCase spellings for the operators whose snake_case names have an underscore
    splitHeads = split_heads
    mergeHeads = merge_heads
    writeRows = write_rows
    topK = top_k

    # ---- GraphDef ----------------------------------------------------------------------------

    def to_graphdef(self):
        """The ``einsummable.v1.GraphDef`` message of this graph."""
        if not self._saved:
            raise GraphError(
                "graph saves no tensor: nothing would be computed (call g.save(tensor))"
            )
        from . import _stubs

        pb = _stubs.modules().graph_pb2
        graph_def = pb.GraphDef()
        for tensor in self._inputs:
            desc = graph_def.inputs.add(name=tensor.name, dtype=_dtypes.enum_name(tensor.dtype))
            for dim in tensor.dims:
                if dim.symbolic:
                    desc.dims.add(name=dim.name, symbol=dim.size)
                else:
                    desc.dims.add(name=dim.name, fixed=dim.size)
        for op in self._operators:
            node = graph_def.operators.add(name=op.name, kind=op.kind)
            node.inputs.extend(op.inputs)
            for attr_name, attr in op.attributes.items():
                value = node.attributes[attr_name]
                if attr.kind == "bool":
                    value.bool_value = attr.value
                elif attr.kind == "int":
                    value.int_value = attr.value
                elif attr.kind == "double":
                    value.double_value = attr.value
                elif attr.kind == "string":
                    value.string_value = attr.value
                else:
                    value.int_list.values.extend(attr.value)
        graph_def.saved.extend(self._saved)
        return graph_def

    def to_text(self) -> str:
        """The GraphDef in Protocol Buffers text format (as docs/graph-format.md shows)."""
        from google.protobuf import text_format

        return text_format.MessageToString(self.to_graphdef())

    def to_json(self) -> str:
        """The GraphDef as JSON, field names in their proto form."""
        from google.protobuf import json_format

        return json_format.MessageToJson(self.to_graphdef(), preserving_proto_field_name=True)


def _to_attr(kind: str, key, value) -> Attr:
    """An attribute of ``g.op`` as its GraphDef type, from the Python type of its value."""
    if not isinstance(key, str) or not key:
        raise GraphError(f"{kind}: an attribute name must be a non-empty string, got {key!r}")
    what = f"{kind} attribute '{key}'"
    if isinstance(value, Attr):
        return value
    if isinstance(value, bool):
        return Attr("bool", value)
    if isinstance(value, str):
        return Attr("string", value)
    if isinstance(value, float):
        return Attr("double", _as_double(value, what))
    if hasattr(value, "__index__"):
        return Attr("int", _as_int(value, what))
    if isinstance(value, Iterable) and not isinstance(value, bytes):
        return Attr("int_list", [_as_int(v, f"{what} entry") for v in value])
    if hasattr(value, "__float__"):
        return Attr("double", _as_double(value, what))
    raise GraphError(f"{what}: {value!r} is none of bool, int, float, str or a list of ints")


def _typed_helper(graph: Graph, kind: str, tensors, attributes: dict, name):
    """``g.op`` of a kind in OPERATOR_KINDS: its typed helper (``g.softmax``...), called with the
    inputs in order and the attributes as keywords, so the helper's checks and shape rule apply.
    """
    values = {key: attr.value for key, attr in attributes.items()}
    args = list(tensors)
    if kind == "einsum":
        if "equation" not in values:
            raise GraphError("einsum needs an 'equation' attribute, e.g. 'ij,jk->ik'")
        args.insert(0, values.pop("equation"))
    helper = getattr(graph, kind)
    try:
        inspect.signature(helper).bind(*args, name=name, **values)
    except TypeError as error:
        raise GraphError(
            f"{kind} with {len(tensors)} inputs and attributes {sorted(values)}: {error}"
        ) from None
    return helper(*args, name=name, **values)


def _letters(count: int) -> str:
    if count > len(_ELEMENTWISE_LETTERS):
        raise GraphError(
            f"rank {count} exceeds the {len(_ELEMENTWISE_LETTERS)} einsum index letters"
        )
    return _ELEMENTWISE_LETTERS[:count]


def _check_term(term: str, what: str) -> None:
    for pos, c in enumerate(term):
        if c not in _INDEX_LETTERS:
            raise GraphError(
                f"equation: {what} term '{term}' has '{c}' at position {pos}; indices are single "
                "letters a-z, A-Z"
            )
        if term.index(c) != pos:
            raise GraphError(f"equation: index '{c}' repeats in {what} term '{term}'")


def _infer_einsum(equation: str, tensors: Sequence[Tensor], join, agg):
    sides = equation.split("->")
    if len(sides) != 2:
        raise GraphError(
            f"equation '{equation}' must have the form 'inputs->output', e.g. 'ij,jk->ik'"
        )
    input_terms = sides[0].split(",")
    output_term = sides[1]
    if not tensors:
        raise GraphError("einsum needs at least one input")
    if len(input_terms) != len(tensors):
        raise GraphError(
            f"equation '{equation}' has {len(input_terms)} input terms for {len(tensors)} inputs"
        )
    index_dims: dict[str, tuple[Dim, str]] = {}
    for idx, (term, t) in enumerate(zip(input_terms, tensors)):
        _check_term(term, f"input {idx}")
        if len(term) != t.rank:
            raise GraphError(
                f"input {idx} has rank {t.rank} ({t.name} {t.type_string()}) but its equation "
                f"term '{term}' has {len(term)} indices"
            )
        _check_not_integer(t, idx)
        if t.dtype != tensors[0].dtype:
            raise GraphError(
                f"dtype mismatch: input {idx} is {t.dtype}, input 0 is {tensors[0].dtype}"
            )
        for axis, c in enumerate(term):
            dim = t.dims[axis]
            if c not in index_dims:
                index_dims[c] = (dim, f"input {idx} dimension {axis}")
                continue
            known, first_use = index_dims[c]
            if _same_size(known.size, dim.size) is False:
                raise GraphError(
                    f"shape mismatch on index '{c}': input {idx} dimension {axis} ('{dim.name}') "
                    f"has size {dim.size}, expected {known.size} as at {first_use} "
                    f"('{known.name}')"
                )
    _check_term(output_term, "output")
    for c in output_term:
        if c not in index_dims:
            raise GraphError(f"equation: output index '{c}' appears in no input")
    join_name = join if join is not None else ("identity" if len(tensors) == 1 else "mul")
    if join_name in UNARY_FUNCTIONS:
        arity = 1
    elif join_name in BINARY_FUNCTIONS:
        arity = 2
    else:
        raise GraphError(
            f"unknown scalar op '{join_name}' (known: "
            f"{', '.join(UNARY_FUNCTIONS + BINARY_FUNCTIONS)})"
        )
    if len(tensors) <= 2 and arity != len(tensors):
        raise GraphError(
            f"join '{join_name}' takes {arity} operand(s), the einsum has {len(tensors)} inputs"
        )
    if len(tensors) > 2 and join_name != "mul":
        raise GraphError(f"join '{join_name}' cannot combine {len(tensors)} inputs; only mul can")
    if agg is not None and agg not in AGGREGATIONS:
        raise GraphError(f"unknown aggregation '{agg}' (expected sum, max or min)")
    return tensors[0].dtype, tuple(index_dims[c][0] for c in output_term)


def _check_not_integer(t: Tensor, idx: int) -> None:
    """Arithmetic has no meaning on token ids: only embedding reads integer tensors."""
    if _dtypes.is_integer(t.dtype):
        raise GraphError(
            f"input {idx} ({t.name} {t.type_string()}) is an integer tensor; only embedding "
            "reads integers (arithmetic operators take f16, bf16, f32, f64)"
        )


def _rope_scaling(scaling, factor, low, high, original) -> dict:
    """rope's scaling attributes, checked; none at all for the default "none" (so a graph without
    scaling is what it was before the attributes existed)."""
    if scaling not in ROPE_SCALINGS:
        raise GraphError(f"rope scaling {scaling!r} is not one of {', '.join(ROPE_SCALINGS)}")
    given = {
        "scaling_factor": factor,
        "low_freq_factor": low,
        "high_freq_factor": high,
        "original_max_position": original,
    }
    wanted = {
        "none": (),
        "linear": ("scaling_factor",),
        "llama3": tuple(given),
    }[scaling]
    for key, value in given.items():
        if key in wanted and value is None:
            raise GraphError(f"rope scaling '{scaling}' needs {key}")
        if key not in wanted and value is not None:
            raise GraphError(f"rope {key} given, but scaling '{scaling}' does not use it")
    if scaling == "none":
        return {}
    attributes = {"scaling": Attr("string", scaling)}
    factor = _as_double(factor, "rope scaling_factor")
    if not factor > 0.0:
        raise GraphError(f"rope scaling_factor must be > 0, got {factor}")
    attributes["scaling_factor"] = Attr("double", factor)
    if scaling == "llama3":
        low = _as_double(low, "rope low_freq_factor")
        high = _as_double(high, "rope high_freq_factor")
        original = _as_int(original, "rope original_max_position")
        if not low > 0.0:
            raise GraphError(f"rope low_freq_factor must be > 0, got {low}")
        if not high > low:
            raise GraphError(
                f"rope high_freq_factor ({high}) must be above low_freq_factor ({low})"
            )
        if original <= 0:
            raise GraphError(f"rope original_max_position must be > 0, got {original}")
        attributes["low_freq_factor"] = Attr("double", low)
        attributes["high_freq_factor"] = Attr("double", high)
        attributes["original_max_position"] = Attr("int", original)
    return attributes


def _sequence_ends(value, name: str = "sequence_ends") -> list[int] | None:
    if value is None:
        return None
    if isinstance(value, (str, bytes)) or not isinstance(value, Iterable):
        raise GraphError(f"{name} must be a list of integers, got {value!r}")
    ends = [_as_int(end, f"{name} entry") for end in value]
    if not ends:
        raise GraphError(f"{name} is empty; give at least the length")
    previous = 0
    for idx, end in enumerate(ends):
        if end <= 0:
            raise GraphError(f"{name}[{idx}] = {end} is out of range: ends must be > 0")
        if end <= previous:
            raise GraphError(f"{name}[{idx}] = {end} is not increasing (previous end {previous})")
        previous = end
    return ends


def _check_sequence_ends(
    ends, dim: Dim, name: str = "sequence_ends", length: str = "sequence length"
) -> None:
    if ends is None or dim.symbolic:
        return  # one sequence, or the server checks once the symbol is bound
    if ends[-1] != dim.size:
        raise GraphError(
            f"{name} end at {ends[-1]}, not at the {length} {dim.size} (dimension '{dim.name}')"
        )


def _check_bottom_right(causal: bool, ends, key_ends: list[int], queries: Dim) -> None:
    """Causal attention with key_ends needs at least as many keys as queries per sequence."""
    if not causal or queries.symbolic:
        return
    query_ends = ends if ends is not None else [queries.size]
    for idx, (end, key_end) in enumerate(zip(query_ends, key_ends)):
        count = end - (query_ends[idx - 1] if idx else 0)
        keys = key_end - (key_ends[idx - 1] if idx else 0)
        if keys < count:
            raise GraphError(
                f"sequence {idx} has {count} queries and only {keys} keys: causal attention with "
                "key_ends aligns each sequence's queries with its last keys (bottom-right) and "
                "needs at least as many keys as queries"
            )


def createGraph() -> Graph:
    """A new, empty graph (the paper's ``es.createGraph()``)."""
    return Graph()


create_graph = createGraph
