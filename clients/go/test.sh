#!/usr/bin/env bash
# Tests the Go client, offline, the way CI runs it (scripts/test calls this):
#   1. protoc and the Go plugins are there (so the stubs test below cannot skip)
#   2. vendor-debian.sh: vendor/ from Debian's Go packages, so nothing is downloaded
#   3. gofmt -l lists nothing; go vet ./... is clean
#   4. go build of every package and of the example cmd/ffn
#   5. go test ./... : the committed stubs are what generate.sh writes now
#      (einsummablepb/generate_test.go), the unit tests, and the integration tests against a
#      real daemon ($EINSUMMABLE_DAEMON, default build/bin/einsummabled; they skip without it,
#      and the summary says how many did)
# Quiet on success but for one summary line; on failure prints the failing step's output and
# exits 1. Build cache and GOPATH live in clients/go/.cache/ (ignored by git) unless GOCACHE
# is set.
#
#   clients/go/test.sh
#   EINSUMMABLE_DAEMON=$PWD/build-asan/bin/einsummabled clients/go/test.sh
set -euo pipefail
# The daemon's path as the caller gave it, relative to the caller's directory.
if [ -n "${EINSUMMABLE_DAEMON:-}" ]; then
    EINSUMMABLE_DAEMON="$(realpath -m -- "$EINSUMMABLE_DAEMON")"
    export EINSUMMABLE_DAEMON
fi
here="$(cd "$(dirname "$0")" && pwd)"
cd "$here"
scratch="$here/.cache"
mkdir -p "$scratch"
export GOCACHE="${GOCACHE:-$scratch/go-build}"
export GOPATH="$scratch/gopath" # nothing under ~/go; the module cache stays empty offline
export GOPROXY=off GOSUMDB=off GOWORK=off GO111MODULE=on GOFLAGS=-mod=vendor
log="$scratch/test.log"
: >"$log"
step=""
started=$SECONDS

run_step() {
    step="$1"
    shift
    if ! "$@" >>"$log" 2>&1; then
        echo "go client: FAILED at '$step' after $((SECONDS - started)) s; its output:" >&2
        cat "$log" >&2
        exit 1
    fi
}

check_tools() {
    local tool
    for tool in go protoc protoc-gen-go protoc-gen-go-grpc; do
        command -v "$tool" >/dev/null || {
            echo "$tool not found: scripts/setup installs golang-go, protobuf-compiler, protoc-gen-go and protoc-gen-go-grpc"
            return 1
        }
    done
}

check_gofmt() {
    local unformatted
    unformatted="$(find . \( -path ./vendor -o -path ./.cache \) -prune -o -name '*.go' -print0 |
        xargs -0 gofmt -l)"
    if [ -n "$unformatted" ]; then
        echo "not gofmt-formatted (run gofmt -w on them):"
        echo "$unformatted"
        return 1
    fi
}

run_step "tools" check_tools
run_step "vendor/ from Debian's packages (vendor-debian.sh)" ./vendor-debian.sh
export GOFLAGS="-mod=vendor -modfile=$scratch/offline.mod"
run_step "gofmt" check_gofmt
run_step "go vet" go vet ./...
run_step "go build" go build ./...
run_step "go build cmd/ffn" go build -o "$scratch/bin/ffn" ./cmd/ffn

tests="$scratch/go-test.log"
step="go test"
if ! go test -count=1 -timeout 10m -v ./... >"$tests" 2>&1; then
    echo "go client: FAILED at 'go test' after $((SECONDS - started)) s:" >&2
    grep -v -E '^(=== (RUN|PAUSE|CONT)|--- PASS|PASS$|ok )' "$tests" >&2 || true
    exit 1
fi
passed="$(grep -c -E '^ *--- PASS' "$tests" || true)"
skipped="$(grep -c -E '^ *--- SKIP' "$tests" || true)"
summary="go client: stubs fresh, gofmt and vet clean, $passed tests passed"
if [ "$skipped" -gt 0 ]; then
    # The first skip's reason (the line before its "--- SKIP"), without file:line.
    reason="$(grep -B1 -E '^ *--- SKIP' "$tests" | grep -v -E '^ *--- SKIP|^--$' | head -n 1 |
        sed -E 's/^ *[a-z_]+\.go:[0-9]+: //; s/: build it .*//')"
    summary+=", $skipped skipped ($reason)"
fi
echo "$summary in $((SECONDS - started)) s"
