package einsummable

import (
	"math"
	"strings"
	"testing"

	pb "github.com/einsummable/einsummable/clients/go/einsummablepb"
)

func TestF32WireBytesAreLittleEndianRowMajor(t *testing.T) {
	tensor, err := NewTensorF32([]int64{2, 2}, []float32{1, -2, 0.5, 3})
	if err != nil {
		t.Fatal(err)
	}
	want := []byte{
		0x00, 0x00, 0x80, 0x3f, // 1
		0x00, 0x00, 0x00, 0xc0, // -2
		0x00, 0x00, 0x00, 0x3f, // 0.5
		0x00, 0x00, 0x40, 0x40, // 3
	}
	if string(tensor.Data) != string(want) || tensor.Dtype != pb.DType_F32 {
		t.Fatalf("got %s % x, want f32 % x", tensor.Dtype, tensor.Data, want)
	}
	back, err := Float32s(tensor)
	if err != nil {
		t.Fatal(err)
	}
	if len(back) != 4 || back[0] != 1 || back[1] != -2 || back[2] != 0.5 || back[3] != 3 {
		t.Fatalf("round trip gave %v", back)
	}
}

func TestEveryDTypeRoundTripsExactValues(t *testing.T) {
	// Values every dtype holds exactly, so each must come back unchanged.
	values := []float32{0, 1, -1, 0.5, 2, -3.75, 1024, float32(math.Inf(1)), float32(math.Inf(-1))}
	for _, dtype := range []pb.DType{pb.DType_F16, pb.DType_BF16, pb.DType_F32, pb.DType_F64} {
		tensor, err := NewTensor(dtype, []int64{int64(len(values))}, values)
		if err != nil {
			t.Fatalf("%s: %v", DTypeName(dtype), err)
		}
		size, _ := ItemSize(dtype)
		if len(tensor.Data) != size*len(values) {
			t.Errorf("%s: %d bytes for %d values", DTypeName(dtype), len(tensor.Data), len(values))
		}
		back, err := Float32s(tensor)
		if err != nil {
			t.Fatalf("%s: %v", DTypeName(dtype), err)
		}
		wide, err := Float64s(tensor)
		if err != nil {
			t.Fatalf("%s: %v", DTypeName(dtype), err)
		}
		for i, v := range values {
			if back[i] != v || wide[i] != float64(v) {
				t.Errorf("%s: value %d is %v (float64 %v), want %v", DTypeName(dtype), i, back[i], wide[i], v)
			}
		}
	}
}

func TestF64KeepsFloat64Precision(t *testing.T) {
	tensor, err := NewTensorF64([]int64{1}, []float64{0.1})
	if err != nil {
		t.Fatal(err)
	}
	wide, err := Float64s(tensor)
	if err != nil || wide[0] != 0.1 {
		t.Fatalf("got %v, %v", wide, err)
	}
	narrow, err := Float32s(tensor)
	if err != nil || narrow[0] != float32(0.1) {
		t.Fatalf("got %v, %v", narrow, err)
	}
}

func TestF16EveryBitPatternRoundTrips(t *testing.T) {
	for h := 0; h < 1<<16; h++ {
		bits := uint16(h)
		value := F16BitsToFloat32(bits)
		if math.IsNaN(float64(value)) {
			if back := Float32ToF16Bits(value); back&0x7c00 != 0x7c00 || back&0x3ff == 0 {
				t.Fatalf("NaN %#04x came back as %#04x, not a NaN", bits, back)
			}
			continue
		}
		if back := Float32ToF16Bits(value); back != bits {
			t.Fatalf("%#04x -> %v -> %#04x", bits, value, back)
		}
	}
}

func TestF16RoundsToNearestEven(t *testing.T) {
	for _, c := range []struct {
		value float32
		bits  uint16
	}{
		{1, 0x3c00},
		{-2, 0xc000},
		{0.1, 0x2e66},
		{1.0 / 3, 0x3555},
		{65504, 0x7bff},           // largest finite
		{65519.99, 0x7bff},        // below the midpoint to 65536
		{65520, 0x7c00},           // the midpoint rounds to even: infinity
		{1 + 1.0/2048, 0x3c00},    // tie between 1 and 1+2^-10: even is 1
		{1 + 3.0/2048, 0x3c02},    // tie between 1+2^-10 and 1+2^-9: even is 1+2^-9
		{1.0 / (1 << 24), 0x0001}, // smallest subnormal
		{1.0 / (1 << 25), 0x0000}, // half of it: a tie, rounds to even zero
		{1.5 / (1 << 25), 0x0001},
		{3.0 / (1 << 25), 0x0002}, // tie between subnormals 1 and 2: even is 2
		{1.0 / (1 << 14), 0x0400}, // smallest normal
		{float32(math.Copysign(0, -1)), 0x8000},
	} {
		if got := Float32ToF16Bits(c.value); got != c.bits {
			t.Errorf("f16(%v) = %#04x, want %#04x", c.value, got, c.bits)
		}
	}
}

func TestBF16RoundsToNearestEven(t *testing.T) {
	for _, c := range []struct {
		value float32
		bits  uint16
	}{
		{1, 0x3f80},
		{-2, 0xc000},
		{math.Float32frombits(0x3f808000), 0x3f80}, // tie, even stays
		{math.Float32frombits(0x3f818000), 0x3f82}, // tie, odd rounds up
		{math.Float32frombits(0x3f808001), 0x3f81}, // above the tie
		{float32(math.Inf(1)), 0x7f80},
	} {
		if got := Float32ToBF16Bits(c.value); got != c.bits {
			t.Errorf("bf16(%v) = %#04x, want %#04x", c.value, got, c.bits)
		}
	}
	nan := Float32ToBF16Bits(float32(math.NaN()))
	if back := BF16BitsToFloat32(nan); !math.IsNaN(float64(back)) {
		t.Errorf("NaN became %#04x = %v", nan, back)
	}
}

func TestTensorErrorsNameTheMismatch(t *testing.T) {
	if _, err := NewTensorF32([]int64{2, 3}, make([]float32, 5)); err == nil ||
		!strings.Contains(err.Error(), "5 values for a tensor f32[2, 3], which has 6 elements") {
		t.Errorf("wrong count: %v", err)
	}
	if _, err := NewTensorF32([]int64{2, -1}, nil); err == nil || !strings.Contains(err.Error(), "dimension 1 is negative") {
		t.Errorf("negative size: %v", err)
	}
	if _, err := NewTensor(pb.DType_DTYPE_UNSPECIFIED, []int64{1}, []float32{1}); err == nil ||
		!strings.Contains(err.Error(), "DTYPE_UNSPECIFIED") {
		t.Errorf("unspecified dtype: %v", err)
	}
	short := &pb.Tensor{Dtype: pb.DType_BF16, Shape: []int64{4}, Data: make([]byte, 6)}
	if _, err := Float32s(short); err == nil || !strings.Contains(err.Error(), "tensor data has 6 bytes; bf16[4] needs 8") {
		t.Errorf("short data: %v", err)
	}
	if _, err := Float32s(nil); err == nil {
		t.Errorf("nil tensor read without an error")
	}
	scalar, err := NewTensorF32(nil, []float32{7})
	if err != nil || len(scalar.Data) != 4 {
		t.Errorf("scalar: %v, %d bytes", err, len(scalar.Data))
	}
}

func TestParseDType(t *testing.T) {
	for name, want := range map[string]pb.DType{
		"f32": pb.DType_F32, "F32": pb.DType_F32, "float32": pb.DType_F32, "float": pb.DType_F32,
		"f16": pb.DType_F16, "half": pb.DType_F16, "BF16": pb.DType_BF16, "bfloat16": pb.DType_BF16,
		" f64 ": pb.DType_F64, "double": pb.DType_F64,
		"i32": pb.DType_I32, "int32": pb.DType_I32, "I64": pb.DType_I64, "int64": pb.DType_I64,
	} {
		if got, err := ParseDType(name); err != nil || got != want {
			t.Errorf("ParseDType(%q) = %v, %v; want %v", name, got, err, want)
		}
	}
	if _, err := ParseDType("int8"); err == nil || !strings.Contains(err.Error(), `"int8"`) {
		t.Errorf("int8: %v", err)
	}
	if DTypeName(pb.DType_BF16) != "bf16" {
		t.Errorf("DTypeName(BF16) = %s", DTypeName(pb.DType_BF16))
	}
}

func TestIntegerTensorsCarryIdsExactly(t *testing.T) {
	ids := []int64{0, 1, 127, 128000, math.MaxInt32, math.MinInt32}
	i32, err := NewTensorI32([]int64{6}, ids)
	if err != nil || i32.GetDtype() != pb.DType_I32 || len(i32.GetData()) != 24 {
		t.Fatalf("NewTensorI32: %v, %v, %d bytes", err, i32.GetDtype(), len(i32.GetData()))
	}
	wide := append(append([]int64(nil), ids...), int64(1)<<40)
	i64, err := NewTensorI64([]int64{7}, wide)
	if err != nil || len(i64.GetData()) != 56 {
		t.Fatalf("NewTensorI64: %v, %d bytes", err, len(i64.GetData()))
	}
	for _, c := range []struct {
		tensor *pb.Tensor
		want   []int64
	}{{i32, ids}, {i64, wide}} {
		got, err := Int64s(c.tensor)
		if err != nil {
			t.Fatalf("Int64s: %v", err)
		}
		for i := range c.want {
			if got[i] != c.want[i] {
				t.Errorf("%s: id %d is %d, want %d", DTypeName(c.tensor.GetDtype()), i, got[i], c.want[i])
			}
		}
	}
	if _, err := NewTensorI32([]int64{1}, []int64{int64(1) << 31}); err == nil || !strings.Contains(err.Error(), "position 0 does not fit i32") {
		t.Errorf("an id past int32: %v", err)
	}
	if _, err := NewTensor(pb.DType_I32, []int64{1}, []float32{1}); err == nil || !strings.Contains(err.Error(), "NewTensorI32") {
		t.Errorf("NewTensor of i32: %v", err)
	}
	if _, err := Float32s(i32); err == nil || !strings.Contains(err.Error(), "use Int64s") {
		t.Errorf("Float32s of i32: %v", err)
	}
	f32, _ := NewTensorF32([]int64{1}, []float32{1})
	if _, err := Int64s(f32); err == nil || !strings.Contains(err.Error(), "f32[1]") {
		t.Errorf("Int64s of f32: %v", err)
	}
}
