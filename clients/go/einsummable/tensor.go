package einsummable

import (
	"encoding/binary"
	"fmt"
	"math"
	"strings"

	pb "github.com/einsummable/einsummable/clients/go/einsummablepb"
)

// Tensor data on the wire (service.proto Tensor) is little-endian and row-major, exactly
// (product of shape) × (size of dtype) bytes. The helpers here move Go slices in and out of
// that encoding: float32 for every floating-point dtype (f16 and bf16 rounded to nearest even,
// f64 widened exactly), float64 for f64, int64 for the integer dtypes i32 and i64 (token ids:
// NewTensorI32, NewTensorI64, Int64s).

// dtypeNames are the client names of the wire's element types, as the Python client has them.
var dtypeNames = map[pb.DType]string{
	pb.DType_F16:  "f16",
	pb.DType_BF16: "bf16",
	pb.DType_F32:  "f32",
	pb.DType_F64:  "f64",
	pb.DType_I32:  "i32",
	pb.DType_I64:  "i64",
}

// dtypeAliases are the other spellings ParseDType accepts (Python's dtypes.normalize).
var dtypeAliases = map[string]pb.DType{
	"float16": pb.DType_F16, "half": pb.DType_F16,
	"bfloat16": pb.DType_BF16,
	"float32":  pb.DType_F32, "float": pb.DType_F32,
	"float64": pb.DType_F64, "double": pb.DType_F64,
	"int32": pb.DType_I32, "int64": pb.DType_I64,
}

// DTypeName is the client name of a dtype: "f32" for pb.DType_F32; the enum's own name for
// one the wire does not define for data (DTYPE_UNSPECIFIED).
func DTypeName(dtype pb.DType) string {
	if name, ok := dtypeNames[dtype]; ok {
		return name
	}
	return dtype.String()
}

// ParseDType reads "f32", "F32", "float32", "bf16", ... (any case).
func ParseDType(name string) (pb.DType, error) {
	key := strings.ToLower(strings.TrimSpace(name))
	for dtype, client := range dtypeNames {
		if key == client {
			return dtype, nil
		}
	}
	if dtype, ok := dtypeAliases[key]; ok {
		return dtype, nil
	}
	return pb.DType_DTYPE_UNSPECIFIED, fmt.Errorf("unknown dtype %q; expected one of f16, bf16, f32, f64, i32, i64", name)
}

// ItemSize is the bytes per element of dtype.
func ItemSize(dtype pb.DType) (int, error) {
	switch dtype {
	case pb.DType_F16, pb.DType_BF16:
		return 2, nil
	case pb.DType_F32, pb.DType_I32:
		return 4, nil
	case pb.DType_F64, pb.DType_I64:
		return 8, nil
	}
	return 0, fmt.Errorf("dtype %s has no element size; expected one of f16, bf16, f32, f64, i32, i64", dtype)
}

// NumElements is the product of shape (1 for a scalar); an error for a negative size or a
// product that overflows int64.
func NumElements(shape []int64) (int64, error) {
	count := int64(1)
	for axis, size := range shape {
		if size < 0 {
			return 0, fmt.Errorf("shape %v: dimension %d is negative", shape, axis)
		}
		if size != 0 && count > math.MaxInt64/size {
			return 0, fmt.Errorf("shape %v: element count overflows int64", shape)
		}
		count *= size
	}
	return count, nil
}

func typeString(dtype pb.DType, shape []int64) string {
	sizes := make([]string, len(shape))
	for i, size := range shape {
		sizes[i] = fmt.Sprint(size)
	}
	return fmt.Sprintf("%s[%s]", DTypeName(dtype), strings.Join(sizes, ", "))
}

// checkCount says whether count values fit shape, naming both when not.
func checkCount(dtype pb.DType, shape []int64, count int) error {
	want, err := NumElements(shape)
	if err != nil {
		return err
	}
	if int64(count) != want {
		return fmt.Errorf("%d values for a tensor %s, which has %d elements", count, typeString(dtype, shape), want)
	}
	return nil
}

// NewTensor is a wire tensor of dtype holding values in row-major order, converted to dtype:
// f32 as they are, f64 widened exactly, f16 and bf16 rounded to nearest even (NaN stays NaN,
// beyond the largest finite value becomes infinity).
func NewTensor(dtype pb.DType, shape []int64, values []float32) (*pb.Tensor, error) {
	if dtype == pb.DType_I32 || dtype == pb.DType_I64 {
		return nil, fmt.Errorf("NewTensor takes floating-point values; make %s tensors (token ids) with NewTensorI32 or NewTensorI64", DTypeName(dtype))
	}
	size, err := ItemSize(dtype)
	if err != nil {
		return nil, err
	}
	if err := checkCount(dtype, shape, len(values)); err != nil {
		return nil, err
	}
	data := make([]byte, len(values)*size)
	switch dtype {
	case pb.DType_F32:
		for i, v := range values {
			binary.LittleEndian.PutUint32(data[4*i:], math.Float32bits(v))
		}
	case pb.DType_F64:
		for i, v := range values {
			binary.LittleEndian.PutUint64(data[8*i:], math.Float64bits(float64(v)))
		}
	case pb.DType_F16:
		for i, v := range values {
			binary.LittleEndian.PutUint16(data[2*i:], Float32ToF16Bits(v))
		}
	case pb.DType_BF16:
		for i, v := range values {
			binary.LittleEndian.PutUint16(data[2*i:], Float32ToBF16Bits(v))
		}
	}
	return &pb.Tensor{Dtype: dtype, Shape: append([]int64(nil), shape...), Data: data}, nil
}

// NewTensorF32 is an f32 tensor of values (row-major).
func NewTensorF32(shape []int64, values []float32) (*pb.Tensor, error) {
	return NewTensor(pb.DType_F32, shape, values)
}

// NewTensorF64 is an f64 tensor of values (row-major).
func NewTensorF64(shape []int64, values []float64) (*pb.Tensor, error) {
	if err := checkCount(pb.DType_F64, shape, len(values)); err != nil {
		return nil, err
	}
	data := make([]byte, 8*len(values))
	for i, v := range values {
		binary.LittleEndian.PutUint64(data[8*i:], math.Float64bits(v))
	}
	return &pb.Tensor{Dtype: pb.DType_F64, Shape: append([]int64(nil), shape...), Data: data}, nil
}

// NewTensorI32 is an i32 tensor of ids (row-major); an error names the first id outside
// int32's range.
func NewTensorI32(shape []int64, ids []int64) (*pb.Tensor, error) {
	if err := checkCount(pb.DType_I32, shape, len(ids)); err != nil {
		return nil, err
	}
	data := make([]byte, 4*len(ids))
	for i, id := range ids {
		if id < math.MinInt32 || id > math.MaxInt32 {
			return nil, fmt.Errorf("id %d at position %d does not fit i32", id, i)
		}
		binary.LittleEndian.PutUint32(data[4*i:], uint32(int32(id)))
	}
	return &pb.Tensor{Dtype: pb.DType_I32, Shape: append([]int64(nil), shape...), Data: data}, nil
}

// NewTensorI64 is an i64 tensor of ids (row-major).
func NewTensorI64(shape []int64, ids []int64) (*pb.Tensor, error) {
	if err := checkCount(pb.DType_I64, shape, len(ids)); err != nil {
		return nil, err
	}
	data := make([]byte, 8*len(ids))
	for i, id := range ids {
		binary.LittleEndian.PutUint64(data[8*i:], uint64(id))
	}
	return &pb.Tensor{Dtype: pb.DType_I64, Shape: append([]int64(nil), shape...), Data: data}, nil
}

// Int64s are the values of an i32 or i64 tensor, row-major; an error for another dtype.
func Int64s(t *pb.Tensor) ([]int64, error) {
	count, err := checkBytes(t)
	if err != nil {
		return nil, err
	}
	data := t.GetData()
	values := make([]int64, count)
	switch t.GetDtype() {
	case pb.DType_I32:
		for i := range values {
			values[i] = int64(int32(binary.LittleEndian.Uint32(data[4*i:])))
		}
	case pb.DType_I64:
		for i := range values {
			values[i] = int64(binary.LittleEndian.Uint64(data[8*i:]))
		}
	default:
		return nil, fmt.Errorf("Int64s reads i32 and i64 tensors; this one is %s", typeString(t.GetDtype(), t.GetShape()))
	}
	return values, nil
}

// checkBytes says whether t's data has the bytes its dtype and shape need.
func checkBytes(t *pb.Tensor) (int, error) {
	if t == nil {
		return 0, fmt.Errorf("nil tensor")
	}
	size, err := ItemSize(t.GetDtype())
	if err != nil {
		return 0, err
	}
	count, err := NumElements(t.GetShape())
	if err != nil {
		return 0, err
	}
	if count > int64(math.MaxInt)/int64(size) || int64(len(t.GetData())) != count*int64(size) {
		return 0, fmt.Errorf("tensor data has %d bytes; %s needs %d",
			len(t.GetData()), typeString(t.GetDtype(), t.GetShape()), count*int64(size))
	}
	return int(count), nil
}

// Float32s are t's values as float32, row-major: exact for f32, f16 and bf16; f64 rounded to
// the nearest float32 (use Float64s to keep them); an error for i32 and i64 (use Int64s).
func Float32s(t *pb.Tensor) ([]float32, error) {
	count, err := checkBytes(t)
	if err != nil {
		return nil, err
	}
	data := t.GetData()
	if t.GetDtype() == pb.DType_I32 || t.GetDtype() == pb.DType_I64 {
		return nil, fmt.Errorf("Float32s reads floating-point tensors; this one is %s (use Int64s)", typeString(t.GetDtype(), t.GetShape()))
	}
	values := make([]float32, count)
	switch t.GetDtype() {
	case pb.DType_F32:
		for i := range values {
			values[i] = math.Float32frombits(binary.LittleEndian.Uint32(data[4*i:]))
		}
	case pb.DType_F64:
		for i := range values {
			values[i] = float32(math.Float64frombits(binary.LittleEndian.Uint64(data[8*i:])))
		}
	case pb.DType_F16:
		for i := range values {
			values[i] = F16BitsToFloat32(binary.LittleEndian.Uint16(data[2*i:]))
		}
	case pb.DType_BF16:
		for i := range values {
			values[i] = BF16BitsToFloat32(binary.LittleEndian.Uint16(data[2*i:]))
		}
	}
	return values, nil
}

// Float64s are t's values as float64, row-major; exact for every dtype.
func Float64s(t *pb.Tensor) ([]float64, error) {
	if t.GetDtype() != pb.DType_F64 {
		narrow, err := Float32s(t)
		if err != nil {
			return nil, err
		}
		values := make([]float64, len(narrow))
		for i, v := range narrow {
			values[i] = float64(v)
		}
		return values, nil
	}
	count, err := checkBytes(t)
	if err != nil {
		return nil, err
	}
	values := make([]float64, count)
	for i := range values {
		values[i] = math.Float64frombits(binary.LittleEndian.Uint64(t.GetData()[8*i:]))
	}
	return values, nil
}

// Float32ToF16Bits is the IEEE binary16 bit pattern of f, rounded to nearest even, as NumPy's
// astype(float16) rounds: beyond 65504 (from 65520 on) is infinity, below half the smallest
// subnormal (2^-25) is zero, NaN stays a quiet NaN.
func Float32ToF16Bits(f float32) uint16 {
	bits := math.Float32bits(f)
	sign := uint16(bits>>16) & 0x8000
	exponent := int32(bits>>23) & 0xff
	mantissa := bits & 0x7fffff
	if exponent == 0xff {
		if mantissa == 0 {
			return sign | 0x7c00
		}
		return sign | 0x7e00 | uint16(mantissa>>13)
	}
	// The exponent rebased to binary16's bias (15).
	half := exponent - 127 + 15
	if half >= 0x1f {
		return sign | 0x7c00
	}
	if half <= 0 {
		if half < -10 {
			return sign // below 2^-25: zero
		}
		// Subnormal: the 24-bit significand shifted to units of 2^-24.
		significand := mantissa | 0x800000
		shift := uint32(14 - half)
		return sign | roundShift(significand, shift)
	}
	// Normal: a carry out of the mantissa bumps the exponent, up to infinity, as it should.
	return sign | (uint16(half)<<10 + roundShift(mantissa, 13))
}

// roundShift is value >> shift rounded to nearest, ties to even.
func roundShift(value, shift uint32) uint16 {
	kept := value >> shift
	rest := value & (1<<shift - 1)
	halfway := uint32(1) << (shift - 1)
	if rest > halfway || (rest == halfway && kept&1 == 1) {
		kept++
	}
	return uint16(kept)
}

// F16BitsToFloat32 is the value of an IEEE binary16 bit pattern (exact).
func F16BitsToFloat32(h uint16) float32 {
	sign := uint32(h&0x8000) << 16
	exponent := uint32(h>>10) & 0x1f
	mantissa := uint32(h & 0x3ff)
	switch exponent {
	case 0x1f:
		return math.Float32frombits(sign | 0x7f800000 | mantissa<<13)
	case 0:
		value := float32(mantissa) / (1 << 24) // subnormal (or zero): mantissa × 2^-24
		if sign != 0 {
			return -value
		}
		return value
	}
	return math.Float32frombits(sign | (exponent+127-15)<<23 | mantissa<<13)
}

// Float32ToBF16Bits is the bfloat16 bit pattern of f, rounded to nearest even (the Python
// client's rounding); NaN stays a quiet NaN.
func Float32ToBF16Bits(f float32) uint16 {
	bits := math.Float32bits(f)
	if math.IsNaN(float64(f)) {
		return uint16(bits>>16) | 0x0040
	}
	rounding := (bits>>16)&1 + 0x7fff
	return uint16((bits + rounding) >> 16)
}

// BF16BitsToFloat32 is the value of a bfloat16 bit pattern: exact, bfloat16 being float32's
// upper half.
func BF16BitsToFloat32(h uint16) float32 {
	return math.Float32frombits(uint32(h) << 16)
}
