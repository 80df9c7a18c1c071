package einsummable

import (
	"testing"

	pb "github.com/einsummable/einsummable/clients/go/einsummablepb"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/protobuf/proto"
)

// Messages with oneofs (Dimension.size) go through google.golang.org/protobuf, whatever
// version of github.com/golang/protobuf gRPC's own codec was built with.
func TestCodecRoundTripsOneofs(t *testing.T) {
	message := &pb.GraphDef{Inputs: []*pb.TensorDesc{{
		Name: "x", Dtype: pb.DType_F32,
		Dims: []*pb.Dimension{
			{Name: "tokens", Size: &pb.Dimension_Symbol{Symbol: "tokens"}},
			{Name: "d", Size: &pb.Dimension_Fixed{Fixed: 8}},
		},
	}}}
	data, err := codec{}.Marshal(message)
	if err != nil {
		t.Fatal(err)
	}
	back := &pb.GraphDef{}
	if err := (codec{}).Unmarshal(data, back); err != nil {
		t.Fatal(err)
	}
	if !proto.Equal(message, back) {
		t.Fatalf("round trip gave %v", back)
	}
}

// The health service's messages (generated for the old API in Debian's grpc) take gRPC's codec.
func TestCodecFallsBackForOtherMessages(t *testing.T) {
	data, err := codec{}.Marshal(&healthpb.HealthCheckRequest{Service: "einsummable.v1.Einsummable"})
	if err != nil {
		t.Fatal(err)
	}
	back := &healthpb.HealthCheckRequest{}
	if err := (codec{}).Unmarshal(data, back); err != nil || back.Service != "einsummable.v1.Einsummable" {
		t.Fatalf("round trip gave %v, %v", back, err)
	}
	if _, err := (codec{}).Marshal(42); err == nil {
		t.Errorf("marshalled an int")
	}
	if (codec{}).Name() != "proto" {
		t.Errorf("name %q", codec{}.Name())
	}
}
