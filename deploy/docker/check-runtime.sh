#!/usr/bin/env bash
# Checks an installed einsummabled (deploy/docker/Dockerfile runs it in the run stage, so an
# image that could not serve fails to build): every shared library its programs and CUDA plugin
# need resolves, and the daemon opens the plugin. Without a GPU (a build has none) the daemon
# then stops at "no GPU is visible"; with one it stops at the missing token file given below,
# after choosing the backend, so it never starts serving.
#
#   check-runtime.sh PREFIX        (default /opt/einsummable)
#
# Tested by tests/deploy/test_docker.py on a `cmake --install` prefix.
set -euo pipefail
prefix="${1:-/opt/einsummable}"

status=0
for file in "$prefix/bin/einsummabled" "$prefix/bin/einsummable-health-probe" \
    "$prefix/lib/libeinsummable_cuda.so"; do
    if [ ! -e "$file" ]; then
        echo "check-runtime: $file is missing" >&2
        status=1
        continue
    fi
    if missing="$(ldd "$file" | grep 'not found')"; then
        echo "check-runtime: $file needs libraries the loader cannot find:" >&2
        echo "$missing" >&2
        status=1
    fi
done
((status == 0)) || exit "$status"

output="$(timeout 120 "$prefix/bin/einsummabled" --backend=cuda --listen=127.0.0.1:0 \
    --metrics_port=0 --token_file=/nonexistent/einsummable-check-token 2>&1 || true)"
echo "check-runtime: einsummabled --backend=cuda: $output"
if grep -q "plugin cannot be opened" <<<"$output"; then
    echo "check-runtime: the daemon cannot open its CUDA plugin" >&2
    exit 1
fi
if ! grep -q -e "no GPU is visible" -e "--token_file" <<<"$output"; then
    echo "check-runtime: unexpected answer (expected 'no GPU is visible' or the token error)" >&2
    exit 1
fi
echo "check-runtime: ok"
