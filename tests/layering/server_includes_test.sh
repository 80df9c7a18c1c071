#!/usr/bin/env bash
# No file under server/ includes a header of tools/: the daemon is a layer above the runtime,
# and the command-line tools sit beside it, not below (docs/design.md "Layers"). What both need
# lives in runtime/ (runtime/command_line.h). The link side of the same rule is checked when
# CMake configures (cmake/layering.cmake, einsummable_forbid_links).
#
# Usage: server_includes_test.sh [SOURCE_DIR]   (default: the checkout this script is in)
# Prints each offending include as FILE:LINE: TEXT and fails.
set -euo pipefail

source_dir="${1:-$(cd "$(dirname "$0")/../.." && pwd)}"
cd "$source_dir"

if found=$(grep -rnE '^[[:space:]]*#[[:space:]]*include[[:space:]]*[<"]tools/' server); then
    echo "server/ must not include tools/ headers (docs/design.md \"Layers\"):"
    echo "$found"
    exit 1
fi
echo "server/ includes nothing from tools/"
