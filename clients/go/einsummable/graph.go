package einsummable

import (
	"fmt"
	"sort"
	"strings"

	pb "github.com/einsummable/einsummable/clients/go/einsummablepb"
	"google.golang.org/protobuf/proto"
)

// Graph builds a GraphDef (proto/einsummable/v1/graph.proto) a call at a time, the way the
// Python client's graph API does: inputs, operators, saved tensors. It is deliberately thin:
// it writes the operators docs/operators.md describes, with their attribute names, and checks
// only what it needs to write them (names, ranks for the equations it makes); everything else
// the server checks when the model is registered, naming the node at fault. Every operator
// goes through Operator, the generic path, which the typed helpers (Einsum, MatMul, Unary,
// Binary) also end in, so a kind the server gained after this client needs no client change.
//
// Methods return the name of the tensor they make, for use as a later operand. The first
// mistake is kept and returned by GraphDef (and Err); calls after it do nothing. For an
// example see ExampleGraph and FFN in cmd/ffn.
type Graph struct {
	def *pb.GraphDef
	// Rank of every tensor so far (inputs and operator outputs); -1 where the builder cannot
	// tell (an Operator of a kind whose output rank it does not know).
	ranks map[string]int
	// Names of operators, which share one namespace with tensors.
	operators map[string]bool
	// Per base name ("matmul", "relu"), how many names were generated.
	generated map[string]int
	err       error
}

// NewGraph is an empty graph.
func NewGraph() *Graph {
	return &Graph{
		def:       &pb.GraphDef{},
		ranks:     map[string]int{},
		operators: map[string]bool{},
		generated: map[string]int{},
	}
}

// Fixed is a dimension of a size known now, named for what it counts ("d_model").
func Fixed(name string, size int64) *pb.Dimension {
	return &pb.Dimension{Name: name, Size: &pb.Dimension_Fixed{Fixed: size}}
}

// Symbol is a dimension bound to a size per request (e.g. "tokens"), named after its symbol.
func Symbol(symbol string) *pb.Dimension {
	return &pb.Dimension{Name: symbol, Size: &pb.Dimension_Symbol{Symbol: symbol}}
}

// Attribute values for Einsum and Operator.
func StringAttr(value string) *pb.AttrValue {
	return &pb.AttrValue{Value: &pb.AttrValue_StringValue{StringValue: value}}
}

// IntAttr is an integer attribute (split_heads' heads).
func IntAttr(value int64) *pb.AttrValue {
	return &pb.AttrValue{Value: &pb.AttrValue_IntValue{IntValue: value}}
}

// DoubleAttr is a real attribute (rmsnorm's eps, einsum's constant).
func DoubleAttr(value float64) *pb.AttrValue {
	return &pb.AttrValue{Value: &pb.AttrValue_DoubleValue{DoubleValue: value}}
}

// BoolAttr is a flag attribute (attention's causal).
func BoolAttr(value bool) *pb.AttrValue {
	return &pb.AttrValue{Value: &pb.AttrValue_BoolValue{BoolValue: value}}
}

// IntListAttr is an integer list attribute (sequence_ends).
func IntListAttr(values ...int64) *pb.AttrValue {
	return &pb.AttrValue{Value: &pb.AttrValue_IntList{IntList: &pb.IntList{Values: values}}}
}

// Err is the first mistake made building the graph, or nil.
func (g *Graph) Err() error { return g.err }

func (g *Graph) fail(format string, args ...interface{}) string {
	if g.err == nil {
		g.err = fmt.Errorf("graph: "+format, args...)
	}
	return ""
}

// name is the given name, or a fresh "<base>_<n>"; "" after recording the error of a taken one.
func (g *Graph) name(given, base string) string {
	if given != "" {
		if g.taken(given) {
			return g.fail("the name '%s' is used twice (tensor and operator names share one namespace)", given)
		}
		return given
	}
	for {
		candidate := fmt.Sprintf("%s_%d", base, g.generated[base])
		g.generated[base]++
		if !g.taken(candidate) {
			return candidate
		}
	}
}

func (g *Graph) taken(name string) bool {
	_, tensor := g.ranks[name]
	return tensor || g.operators[name]
}

// operand is the rank of tensor name, recording an error naming the operator when it does not
// exist.
func (g *Graph) operand(operator, role, name string) (int, bool) {
	rank, ok := g.ranks[name]
	if !ok {
		g.fail("%s: %s '%s' is not a tensor of this graph (tensors: %s)", operator, role, name, g.tensorNames())
		return 0, false
	}
	return rank, true
}

func (g *Graph) tensorNames() string {
	names := make([]string, 0, len(g.ranks))
	for name := range g.ranks {
		names = append(names, name)
	}
	if len(names) == 0 {
		return "none"
	}
	sort.Strings(names)
	return strings.Join(names, ", ")
}

// Input adds a graph input: activations given with every Execute, or a weight (RegisterModel's
// weights) uploaded once. Dimensions outermost first; none for a scalar.
func (g *Graph) Input(name string, dtype pb.DType, dims ...*pb.Dimension) string {
	if g.err != nil {
		return ""
	}
	if name == "" {
		return g.fail("an input needs a name")
	}
	if g.taken(name) {
		return g.fail("the name '%s' is used twice (tensor and operator names share one namespace)", name)
	}
	if _, err := ItemSize(dtype); err != nil {
		return g.fail("input '%s': %v", name, err)
	}
	for axis, dim := range dims {
		if dim == nil {
			return g.fail("input '%s' dimension %d is nil", name, axis)
		}
	}
	g.def.Inputs = append(g.def.Inputs, &pb.TensorDesc{Name: name, Dtype: dtype, Dims: dims})
	g.ranks[name] = len(dims)
	return name
}

// Einsum adds the generic extended einsum (docs/operators.md "einsum"): equation such as
// "ij,jk->ik", attributes such as "join" (the scalar function at each point), "agg" (sum, max,
// min over reduced indices) and "constant". An empty name generates one ("einsum_0").
func (g *Graph) Einsum(name, equation string, inputs []string, attrs map[string]*pb.AttrValue) string {
	return g.einsum(name, "einsum", equation, inputs, attrs)
}

func (g *Graph) einsum(name, base, equation string, inputs []string, attrs map[string]*pb.AttrValue) string {
	if g.err != nil {
		return ""
	}
	name = g.name(name, base)
	if name == "" {
		return ""
	}
	arrow := strings.Index(equation, "->")
	if arrow < 0 {
		return g.fail("einsum '%s': equation '%s' has no '->'", name, equation)
	}
	terms := strings.Split(equation[:arrow], ",")
	if len(terms) != len(inputs) {
		return g.fail("einsum '%s': equation '%s' has %d operand terms for %d inputs", name, equation, len(terms), len(inputs))
	}
	for i, input := range inputs {
		rank, ok := g.operand("einsum '"+name+"'", fmt.Sprintf("input %d", i), input)
		if !ok {
			return ""
		}
		if rank >= 0 && rank != len(terms[i]) {
			return g.fail("einsum '%s': input %d '%s' has rank %d; the equation's term '%s' has %d", name, i, input, rank, terms[i], len(terms[i]))
		}
	}
	all := map[string]*pb.AttrValue{"equation": StringAttr(equation)}
	for key, value := range attrs {
		if key == "equation" {
			return g.fail("einsum '%s': the equation is an argument, not an attribute", name)
		}
		all[key] = value
	}
	return g.write(name, "einsum", inputs, all, len(equation)-arrow-2)
}

// write appends the operator node, its output of the given rank (-1: unknown to the builder)
// named after it: the last step of every operator, whatever its kind.
func (g *Graph) write(name, kind string, inputs []string, attrs map[string]*pb.AttrValue, rank int) string {
	copied := make(map[string]*pb.AttrValue, len(attrs))
	for key, value := range attrs {
		copied[key] = value
	}
	g.def.Operators = append(g.def.Operators, &pb.OperatorDef{
		Name: name, Kind: kind, Attributes: copied, Inputs: append([]string(nil), inputs...),
	})
	g.operators[name] = true
	g.ranks[name] = rank
	return name
}

// Index letters, as the Python client writes its equations: element-wise terms read "ij->ij",
// batch indices of a matmul avoid its own i, j, k.
const (
	elementwiseLetters = "ijklmnopqrstuvwxyzabcdefghABCDEFGHIJKLMNOPQRSTUVWXYZ"
	batchLetters       = "abcdefghlmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
)

// MatMul adds a [..., m, k] · b [k, n] (b shared by a's leading indices), or the batched
// a [..., m, k] · b [..., k, n] with the same leading dimensions: an einsum "ij,jk->ik",
// "aij,jk->aik", "aij,ajk->aik". An empty name generates one ("matmul_0").
func (g *Graph) MatMul(name, a, b string) string {
	if g.err != nil {
		return ""
	}
	rankA, okA := g.operand("matmul", "input 0", a)
	rankB, okB := g.operand("matmul", "input 1", b)
	switch {
	case !okA || !okB:
		return ""
	case rankA < 0 || rankB < 0:
		return g.fail("matmul of '%s' and '%s': the rank of an operand is unknown to the builder (made by Operator); use Einsum with an equation", a, b)
	case rankA < 2 || rankB < 2:
		return g.fail("matmul needs operands of rank >= 2, got '%s' of rank %d and '%s' of rank %d", a, rankA, b, rankB)
	case rankB != 2 && rankB != rankA:
		return g.fail("matmul: b ('%s', rank %d) must be a matrix or have a's rank %d", b, rankB, rankA)
	case rankA-2 > len(batchLetters):
		return g.fail("matmul: '%s' of rank %d has too many batch dimensions", a, rankA)
	}
	batch := batchLetters[:rankA-2]
	termB := "jk"
	if rankB != 2 {
		termB = batch + "jk"
	}
	return g.einsum(name, "matmul", batch+"ij,"+termB+"->"+batch+"ik", []string{a, b}, nil)
}

// Unary adds an element-wise scalar function of x ("relu", "gelu", "exp", ...; docs/operators.md
// lists them): an einsum "ij->ij" with join fn. The functions that read a constant (scale,
// add_scalar, pow_scalar, leaky_relu) take it as Einsum's "constant" attribute. An empty name
// generates one ("relu_0").
func (g *Graph) Unary(name, fn, x string) string {
	if g.err != nil {
		return ""
	}
	rank, ok := g.operand(fn, "input", x)
	switch {
	case !ok:
		return ""
	case rank < 0:
		return g.fail("%s of '%s': its rank is unknown to the builder (made by Operator); use Einsum with an equation", fn, x)
	case rank > len(elementwiseLetters):
		return g.fail("%s: '%s' has rank %d, more than the equation has letters", fn, x, rank)
	}
	letters := elementwiseLetters[:rank]
	return g.einsum(name, fn, letters+"->"+letters, []string{x}, map[string]*pb.AttrValue{"join": StringAttr(fn)})
}

// Binary adds an element-wise function of two tensors ("add", "sub", "mul", "div", "max",
// "min"); the operand of lower rank matches the other's trailing dimensions ([tokens, d] +
// [d]). An empty name generates one ("add_0").
func (g *Graph) Binary(name, fn, a, b string) string {
	if g.err != nil {
		return ""
	}
	rankA, okA := g.operand(fn, "input 0", a)
	rankB, okB := g.operand(fn, "input 1", b)
	rank := rankA
	if rankB > rank {
		rank = rankB
	}
	switch {
	case !okA || !okB:
		return ""
	case rankA < 0 || rankB < 0:
		return g.fail("%s of '%s' and '%s': the rank of an operand is unknown to the builder (made by Operator); use Einsum with an equation", fn, a, b)
	case rank > len(elementwiseLetters):
		return g.fail("%s: rank %d has more dimensions than the equation has letters", fn, rank)
	}
	letters := elementwiseLetters[:rank]
	termA, termB := letters[rank-rankA:], letters[rank-rankB:]
	out := termA
	if rankB > rankA {
		out = termB
	}
	return g.einsum(name, fn, termA+","+termB+"->"+out, []string{a, b}, map[string]*pb.AttrValue{"join": StringAttr(fn)})
}

// shapePreserving are the operator kinds whose output has their first input's rank, so the
// builder can go on writing equations after them. A kind not listed still works through
// Operator; its output's rank is unknown to the builder, so MatMul, Unary and Binary refuse it
// as an operand (Einsum takes it with an equation).
var shapePreserving = map[string]bool{"softmax": true, "rmsnorm": true, "layernorm": true, "rope": true}

// Operator adds one operator of any kind — "softmax", "attention", "einsum", a kind newer than
// this client — with its attributes as docs/operators.md names them: the generic path every
// operator goes through. An einsum takes its "equation" attribute (a string), checked against
// its operands' ranks as Einsum checks it. The single output is called name; an empty name
// generates one ("<kind>_0").
func (g *Graph) Operator(name, kind string, inputs []string, attrs map[string]*pb.AttrValue) string {
	if g.err != nil {
		return ""
	}
	if kind == "" {
		return g.fail("an operator needs a kind")
	}
	if kind == "einsum" {
		return g.einsumOperator(name, inputs, attrs)
	}
	name = g.name(name, kind)
	if name == "" {
		return ""
	}
	rank := -1
	for i, input := range inputs {
		inputRank, ok := g.operand(kind+" '"+name+"'", fmt.Sprintf("input %d", i), input)
		if !ok {
			return ""
		}
		if i == 0 && shapePreserving[kind] {
			rank = inputRank
		}
	}
	return g.write(name, kind, inputs, attrs, rank)
}

// einsumOperator is Operator of kind "einsum": its equation out of the attributes, then Einsum.
func (g *Graph) einsumOperator(name string, inputs []string, attrs map[string]*pb.AttrValue) string {
	equation, ok := attrs["equation"].GetValue().(*pb.AttrValue_StringValue)
	if !ok {
		return g.fail("operator '%s': an einsum needs an \"equation\" attribute, a string such as \"ij,jk->ik\"", name)
	}
	rest := make(map[string]*pb.AttrValue, len(attrs))
	for key, value := range attrs {
		if key != "equation" {
			rest[key] = value
		}
	}
	return g.einsum(name, "einsum", equation.StringValue, inputs, rest)
}

// Save marks tensors to compute and return (each once).
func (g *Graph) Save(tensors ...string) {
	if g.err != nil {
		return
	}
	for _, tensor := range tensors {
		if _, ok := g.ranks[tensor]; !ok {
			g.fail("save: '%s' is not a tensor of this graph", tensor)
			return
		}
		for _, saved := range g.def.Saved {
			if saved == tensor {
				g.fail("save: '%s' is saved twice", tensor)
				return
			}
		}
		g.def.Saved = append(g.def.Saved, tensor)
	}
}

// GraphDef is (a copy of) the graph as the wire has it, or the first mistake made building it.
func (g *Graph) GraphDef() (*pb.GraphDef, error) {
	if g.err != nil {
		return nil, g.err
	}
	if len(g.def.Saved) == 0 {
		return nil, fmt.Errorf("graph: nothing is saved; Save at least one tensor (tensors: %s)", g.tensorNames())
	}
	return proto.Clone(g.def).(*pb.GraphDef), nil
}
