#!/usr/bin/env bash
# Generates the Go stubs of proto/einsummable/v1/{graph,service}.proto into einsummablepb/
# (package einsummablepb), or into OUT_DIR/einsummablepb when given:
#
#   clients/go/generate.sh [OUT_DIR]
#
# The .pb.go files are committed (Go's convention, so `go get` needs no protoc); never edit
# them by hand: change the .proto files and run this again. test.sh and the einsummablepb test
# regenerate into a temporary directory and fail when the result differs from what is
# committed. Needs protoc (Debian's protobuf-compiler, 3.21.12), protoc-gen-go (v1.28.1) and
# protoc-gen-go-grpc (from grpc-go 1.33.3) on PATH, Debian packages of those names; other
# versions write different files, which the check then reports.
#
# The protos have no go_package option (changing proto/ would rebuild the C++ tree), so the
# Go package is given here with M mappings.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
proto_root="$here/../../proto"
out="${1:-$here}"
module="github.com/einsummable/einsummable/clients/go"
package="$module/einsummablepb"
protos=(einsummable/v1/graph.proto einsummable/v1/service.proto)

for tool in protoc protoc-gen-go protoc-gen-go-grpc; do
    if ! command -v "$tool" >/dev/null; then
        echo "generate.sh: $tool not found on PATH (Debian: apt-get install protobuf-compiler" \
            "protoc-gen-go protoc-gen-go-grpc)" >&2
        exit 1
    fi
done

mappings=()
for proto in "${protos[@]}"; do
    mappings+=("--go_opt=M$proto=$package" "--go-grpc_opt=M$proto=$package")
done
mkdir -p "$out"
# module=: files go to OUT_DIR/einsummablepb/, the package path less the module path.
protoc -I "$proto_root" \
    --go_out="$out" --go_opt="module=$module" \
    --go-grpc_out="$out" --go-grpc_opt="module=$module" \
    "${mappings[@]}" "${protos[@]}"
