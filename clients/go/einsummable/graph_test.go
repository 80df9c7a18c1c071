package einsummable_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/einsummable/einsummable/clients/go/einsummable"
	pb "github.com/einsummable/einsummable/clients/go/einsummablepb"
	"google.golang.org/protobuf/encoding/prototext"
	"google.golang.org/protobuf/proto"
)

// ffn is the paper's FFN as cmd/ffn builds it.
func ffn(dModel, dFF int64) *einsummable.Graph {
	g := einsummable.NewGraph()
	x := g.Input("x", pb.DType_F32, einsummable.Symbol("tokens"), einsummable.Fixed("d_model", dModel))
	w1 := g.Input("w1", pb.DType_F32, einsummable.Fixed("d_model", dModel), einsummable.Fixed("d_ff", dFF))
	w2 := g.Input("w2", pb.DType_F32, einsummable.Fixed("d_ff", dFF), einsummable.Fixed("d_model", dModel))
	h := g.MatMul("h", x, w1)
	a := g.Unary("a", "relu", h)
	g.Save(g.MatMul("y", a, w2))
	return g
}

// The builder writes the FFN exactly as the wire contract's own example file has it.
func TestFFNIsTheExampleGraphFile(t *testing.T) {
	text, err := os.ReadFile(filepath.Join("..", "..", "..", "proto", "examples", "ffn.textproto"))
	if err != nil {
		t.Fatal(err)
	}
	want := &pb.GraphDef{}
	if err := prototext.Unmarshal(text, want); err != nil {
		t.Fatalf("ffn.textproto: %v", err)
	}
	got, err := ffn(1024, 4096).GraphDef()
	if err != nil {
		t.Fatal(err)
	}
	if !proto.Equal(got, want) {
		t.Fatalf("builder's FFN differs from proto/examples/ffn.textproto:\ngot  %v\nwant %v", got, want)
	}
}

func TestEquationsFollowTheRanks(t *testing.T) {
	g := einsummable.NewGraph()
	x := g.Input("x", pb.DType_F32, einsummable.Symbol("batch"), einsummable.Symbol("tokens"), einsummable.Fixed("d", 8))
	w := g.Input("w", pb.DType_F32, einsummable.Fixed("d", 8), einsummable.Fixed("e", 4))
	b := g.Input("b", pb.DType_F32, einsummable.Fixed("e", 4))
	v := g.Input("v", pb.DType_F32, einsummable.Symbol("batch"), einsummable.Fixed("e", 4), einsummable.Fixed("f", 2))
	xw := g.MatMul("", x, w)
	biased := g.Binary("", "add", xw, b)
	s := g.Operator("s", "softmax", []string{biased}, map[string]*pb.AttrValue{"axis": einsummable.IntAttr(-1)})
	g.Save(g.MatMul("", g.Unary("", "gelu", s), v))
	def, err := g.GraphDef()
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, op := range def.Operators {
		line := op.Name + " " + op.Kind
		if eq := op.Attributes["equation"]; eq != nil {
			line += " " + eq.GetStringValue()
		}
		if join := op.Attributes["join"]; join != nil {
			line += " join=" + join.GetStringValue()
		}
		got = append(got, line)
	}
	want := []string{
		"matmul_0 einsum aij,jk->aik",
		"add_0 einsum ijk,k->ijk join=add",
		"s softmax",
		"gelu_0 einsum ijk->ijk join=gelu",
		"matmul_1 einsum aij,ajk->aik",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("operators:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if def.Saved[0] != "matmul_1" {
		t.Errorf("saved %v", def.Saved)
	}
}

// Every mistake is reported by GraphDef, naming the operator and tensor at fault; the first
// one wins.
func TestGraphErrorsNameTheCulprit(t *testing.T) {
	for _, c := range []struct {
		name  string
		build func(g *einsummable.Graph)
		want  string
	}{
		{"unknown operand", func(g *einsummable.Graph) {
			x := g.Input("x", pb.DType_F32, einsummable.Fixed("d", 2), einsummable.Fixed("e", 2))
			g.Save(g.MatMul("y", x, "w"))
		}, "matmul: input 1 'w' is not a tensor of this graph (tensors: x)"},
		{"duplicate name", func(g *einsummable.Graph) {
			x := g.Input("x", pb.DType_F32, einsummable.Fixed("d", 2))
			g.Save(g.Unary("x", "relu", x))
		}, "the name 'x' is used twice"},
		{"rank 1 matmul", func(g *einsummable.Graph) {
			x := g.Input("x", pb.DType_F32, einsummable.Fixed("d", 2))
			g.Save(g.MatMul("y", x, x))
		}, "matmul needs operands of rank >= 2, got 'x' of rank 1 and 'x' of rank 1"},
		{"einsum term rank", func(g *einsummable.Graph) {
			x := g.Input("x", pb.DType_F32, einsummable.Fixed("d", 2))
			g.Save(g.Einsum("y", "ij->ij", []string{x}, nil))
		}, "einsum 'y': input 0 'x' has rank 1; the equation's term 'ij' has 2"},
		{"unknown rank", func(g *einsummable.Graph) {
			x := g.Input("x", pb.DType_F32, einsummable.Fixed("d", 8))
			heads := g.Operator("h", "split_heads", []string{x}, map[string]*pb.AttrValue{"heads": einsummable.IntAttr(2)})
			g.Save(g.Unary("r", "relu", heads))
		}, "relu of 'h': its rank is unknown to the builder"},
		{"einsum operator without an equation", func(g *einsummable.Graph) {
			x := g.Input("x", pb.DType_F32, einsummable.Fixed("d", 2))
			g.Save(g.Operator("y", "einsum", []string{x}, map[string]*pb.AttrValue{"join": einsummable.StringAttr("relu")}))
		}, `operator 'y': an einsum needs an "equation" attribute`},
		{"einsum operator term rank", func(g *einsummable.Graph) {
			x := g.Input("x", pb.DType_F32, einsummable.Fixed("d", 2))
			g.Save(g.Operator("y", "einsum", []string{x}, map[string]*pb.AttrValue{"equation": einsummable.StringAttr("ij->ij")}))
		}, "einsum 'y': input 0 'x' has rank 1; the equation's term 'ij' has 2"},
		{"operator of a new kind, unknown operand", func(g *einsummable.Graph) {
			x := g.Input("x", pb.DType_F32, einsummable.Fixed("d", 2))
			g.Save(g.Operator("", "concat", []string{x, "z"}, nil))
		}, "concat 'concat_0': input 1 'z' is not a tensor of this graph (tensors: x)"},
		{"nothing saved", func(g *einsummable.Graph) {
			g.Input("x", pb.DType_F32, einsummable.Fixed("d", 2))
		}, "nothing is saved; Save at least one tensor (tensors: x)"},
		{"saved twice", func(g *einsummable.Graph) {
			x := g.Input("x", pb.DType_F32, einsummable.Fixed("d", 2))
			g.Save(x, x)
		}, "save: 'x' is saved twice"},
		{"no dtype", func(g *einsummable.Graph) {
			g.Save(g.Input("x", pb.DType_DTYPE_UNSPECIFIED, einsummable.Fixed("d", 2)))
		}, "input 'x': dtype DTYPE_UNSPECIFIED has no element size"},
		{"first mistake wins", func(g *einsummable.Graph) {
			g.MatMul("y", "a", "b")
			g.Save("z")
		}, "input 0 'a' is not a tensor"},
	} {
		g := einsummable.NewGraph()
		c.build(g)
		def, err := g.GraphDef()
		if err == nil || def != nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: got %v, want an error containing %q", c.name, err, c.want)
		}
	}
}

// Operator is the path of every kind: an einsum through it is the node Einsum writes, and a
// kind this client has no helper for is written as given, its output's rank unknown.
func TestOperatorTakesEveryKind(t *testing.T) {
	build := func(generic bool) (*pb.GraphDef, error) {
		g := einsummable.NewGraph()
		x := g.Input("x", pb.DType_F32, einsummable.Fixed("t", 4), einsummable.Fixed("d", 8))
		y := g.Input("y", pb.DType_F32, einsummable.Fixed("t", 4), einsummable.Fixed("d", 8))
		attrs := map[string]*pb.AttrValue{"agg": einsummable.StringAttr("max")}
		var m string
		if generic {
			attrs["equation"] = einsummable.StringAttr("ij->i")
			m = g.Operator("m", "einsum", []string{x}, attrs)
		} else {
			m = g.Einsum("m", "ij->i", []string{x}, attrs)
		}
		c := g.Operator("", "concat", []string{x, y}, map[string]*pb.AttrValue{"axis": einsummable.IntAttr(0)})
		g.Save(m, g.Einsum("", "ij->j", []string{c}, nil))
		return g.GraphDef()
	}
	generic, err := build(true)
	if err != nil {
		t.Fatal(err)
	}
	typed, err := build(false)
	if err != nil {
		t.Fatal(err)
	}
	if !proto.Equal(generic, typed) {
		t.Fatalf("Operator(\"einsum\") differs from Einsum:\n%v\n%v", generic, typed)
	}
	concat := generic.Operators[1]
	if concat.Name != "concat_0" || concat.Kind != "concat" || concat.Attributes["axis"].GetIntValue() != 0 ||
		strings.Join(concat.Inputs, ",") != "x,y" {
		t.Errorf("concat node: %v", concat)
	}
	g := einsummable.NewGraph()
	x := g.Input("x", pb.DType_F32, einsummable.Fixed("d", 2))
	g.Save(g.Unary("", "relu", g.Operator("c", "concat", []string{x, x}, nil)))
	if _, err := g.GraphDef(); err == nil || !strings.Contains(err.Error(), "relu of 'c': its rank is unknown to the builder") {
		t.Errorf("a unary of a new kind's output: %v", err)
	}
}

func TestGraphDefIsACopy(t *testing.T) {
	g := ffn(4, 8)
	first, err := g.GraphDef()
	if err != nil {
		t.Fatal(err)
	}
	first.Saved = append(first.Saved, "h")
	second, _ := g.GraphDef()
	if len(second.Saved) != 1 {
		t.Fatalf("changing one GraphDef changed the builder: saved %v", second.Saved)
	}
}

// A graph for the FFN, printed operator by operator.
func ExampleGraph() {
	g := einsummable.NewGraph()
	x := g.Input("x", pb.DType_F32, einsummable.Symbol("tokens"), einsummable.Fixed("d_model", 1024))
	w1 := g.Input("w1", pb.DType_F32, einsummable.Fixed("d_model", 1024), einsummable.Fixed("d_ff", 4096))
	w2 := g.Input("w2", pb.DType_F32, einsummable.Fixed("d_ff", 4096), einsummable.Fixed("d_model", 1024))
	g.Save(g.MatMul("y", g.Unary("a", "relu", g.MatMul("h", x, w1)), w2))
	def, err := g.GraphDef()
	if err != nil {
		panic(err)
	}
	for _, op := range def.Operators {
		fmt.Println(op.Name, op.Attributes["equation"].GetStringValue(), op.Inputs)
	}
	// Output:
	// h ij,jk->ik [x w1]
	// a ij->ij [h]
	// y ij,jk->ik [a w2]
}
