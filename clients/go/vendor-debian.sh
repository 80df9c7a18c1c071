#!/usr/bin/env bash
# Makes the module build offline from Debian's Go library packages (README.md "Building
# offline"): assembles vendor/ (ignored by git) with one symlink per module into the GOPATH
# tree Debian installs (/usr/share/gocode/src: golang-google-grpc-dev, golang-google-protobuf-dev
# and their dependencies), and writes
#   .cache/offline.mod  go.mod plus the indirect requirements vendoring needs (Go >= 1.17 wants
#                       every module that provides a package listed), labelled with Debian's
#                       versions; go.mod itself stays the ordinary one a user with network uses
#   vendor/modules.txt  consistent with offline.mod, as `go mod vendor` would write it
#   .cache/env          the environment for go commands by hand: `. clients/go/.cache/env`
#                       (-mod=vendor, -modfile=.cache/offline.mod, no proxy, no checksum database)
# test.sh runs it first.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
gocode="${EINSUMMABLE_GOCODE:-/usr/share/gocode/src}"
cd "$here"
scratch="$here/.cache"
modfile="$scratch/offline.mod"
mkdir -p "$scratch"
export GOPROXY=off GOSUMDB=off GOWORK=off GO111MODULE=on GOFLAGS="-mod=vendor -modfile=$modfile"

# The modules Debian provides that the client's packages and tests import, labelled with the
# version of bookworm's package (for the two go.mod requires, go.mod's own versions are used;
# Go checks those match).
declare -A debian_version=(
    [google.golang.org/grpc]=v1.33.3                            # golang-google-grpc-dev 1.33.3
    [google.golang.org/protobuf]=v1.28.1                        # golang-google-protobuf-dev 1.28.1
    [github.com/golang/protobuf]=v1.5.2                         # golang-github-golang-protobuf-1-5-dev
    [golang.org/x/net]=v0.7.0                                   # golang-golang-x-net-dev 0.7.0
    [golang.org/x/sys]=v0.3.0                                   # golang-golang-x-sys-dev 0.3.0
    [golang.org/x/text]=v0.7.0                                  # golang-golang-x-text-dev 0.7.0
    [google.golang.org/genproto]=v0.0.0-debian.20200413.b5235f6 # golang-google-genproto-dev snapshot
)
# golang/protobuf 1.3 (golang-github-golang-protobuf-1-3-dev, which grpc's package also accepts)
# predates protobuf's APIv2 and crashes marshalling the generated messages' oneofs; scripts/setup
# installs 1.5, a wrapper of APIv2, as any network build of the module gets.
if ! grep -q 'ProtoPackageIsVersion4' "$gocode/github.com/golang/protobuf/proto/"*.go 2>/dev/null; then
    echo "vendor-debian: github.com/golang/protobuf in $gocode is older than 1.4; install" \
        "golang-github-golang-protobuf-1-5-dev (scripts/setup does)" >&2
    exit 1
fi

# go.mod's requirements, "path version" (one-line and block form).
declare -A version explicit
for module in "${!debian_version[@]}"; do
    version[$module]="${debian_version[$module]}"
done
while read -r module module_version; do
    [ -n "$module" ] || continue
    if [ -z "${debian_version[$module]+set}" ]; then
        echo "vendor-debian.sh: go.mod requires $module, which is not taken from Debian here;" \
            "add it to debian_version" >&2
        exit 1
    fi
    version[$module]="$module_version"
    explicit[$module]=1
done < <(awk '
    $1 == "require" && $2 == "(" { block = 1; next }
    block && $1 == ")" { block = 0; next }
    block && NF >= 2 { print $1, $2; next }
    $1 == "require" && NF >= 3 { print $2, $3 }
' go.mod)

rm -rf vendor
mkdir vendor
for module in "${!version[@]}"; do
    if [ ! -d "$gocode/$module" ]; then
        echo "vendor-debian.sh: $gocode/$module is missing: install Debian's package of" \
            "$module (scripts/setup installs golang-google-grpc-dev and golang-google-protobuf-dev)" >&2
        exit 1
    fi
    mkdir -p "vendor/$(dirname "$module")"
    ln -s "$gocode/$module" "vendor/$module"
done

# vendor/modules.txt: a header per module, then (second pass) the packages imported from it.
write_modules_txt() {
    local packages="$1" module
    : >vendor/modules.txt
    for module in $(printf '%s\n' "${!version[@]}" | sort); do
        local mine go_line meta=""
        mine="$(awk -v m="$module" '$2 == m { print $1 }' <<<"$packages")"
        if [ -n "$packages" ] && [ -z "${explicit[$module]+set}" ] && [ -z "$mine" ]; then
            continue # not required and nothing imported from it
        fi
        go_line="$(awk '$1 == "go" { print $2; exit }' "$gocode/$module/go.mod" 2>/dev/null || true)"
        if [ -n "${explicit[$module]+set}" ] || [ -n "$mine" ]; then meta="explicit"; fi
        if [ -n "$go_line" ]; then meta="${meta:+$meta; }go $go_line"; fi
        echo "# $module ${version[$module]}" >>vendor/modules.txt
        if [ -n "$meta" ]; then echo "## $meta" >>vendor/modules.txt; fi
        if [ -n "$mine" ]; then echo "$mine" >>vendor/modules.txt; fi
    done
}

# First pass: go.mod as it is and module headers only, enough for `go list` to find every
# package the client imports.
cp go.mod "$modfile"
write_modules_txt ""
main_module="$(go list -m)"
# (Test variants read "path [path.test]": the path is the first word.)
imports="$(go list -deps -test -f '{{if not .Standard}}{{.ImportPath}}{{end}}' ./... |
    awk '{ print $1 }' | sort -u)"
modules_by_length="$(printf '%s\n' "${!version[@]}" | awk '{ print length($0), $0 }' | sort -rn | cut -d' ' -f2)"
packages=""
declare -A used
for package in $imports; do
    case "$package" in "$main_module" | "$main_module"/* | *.test) continue ;; esac
    owner=""
    for module in $modules_by_length; do
        if [ "$package" = "$module" ] || [ "${package#"$module"/}" != "$package" ]; then
            owner="$module"
            break
        fi
    done
    if [ -z "$owner" ]; then
        echo "vendor-debian.sh: $package is imported, but no module of debian_version provides it" >&2
        exit 1
    fi
    packages+="$package $owner"$'\n'
    used[$owner]=1
done

# Second pass: offline.mod lists the other modules packages come from, modules.txt the packages.
{
    echo
    echo "// Added by vendor-debian.sh for the offline build: Debian's versions, not upstream's."
    echo "require ("
    for module in $(printf '%s\n' "${!used[@]}" | sort); do
        if [ -z "${explicit[$module]+set}" ]; then
            echo "	$module ${version[$module]} // indirect"
        fi
    done
    echo ")"
} >>"$modfile"
write_modules_txt "$packages"
go list -deps -test ./... >/dev/null # fails here, not later, if the two disagree

cat >"$scratch/env" <<ENV
# For go commands by hand in clients/go, offline: . clients/go/.cache/env (vendor-debian.sh)
export GOPROXY=off GOSUMDB=off GOWORK=off GO111MODULE=on
export GOFLAGS="-mod=vendor -modfile=$modfile"
ENV
