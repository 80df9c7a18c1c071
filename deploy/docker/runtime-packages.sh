#!/usr/bin/env bash
# Prints the Debian/Ubuntu packages holding the shared libraries that the given programs and
# libraries load, one per line, sorted: what the run stage of deploy/docker/Dockerfile installs,
# computed in the build stage from the binaries just built rather than kept as a list of
# package names by hand (names change between releases: Ubuntu 24.04's t64 renames).
#
#   runtime-packages.sh [--dlopen SONAME]... FILE...
#
# FILE...: ELF files, resolved with ldd. --dlopen SONAME: a library the code opens itself at run
# time (libcublasLt.so.13 and libcudnn.so.9, kernels/cuda/cublaslt_api.cc and cudnn_library.cc),
# found through the ldconfig cache.
# A library ldd cannot find, or one no package owns, is an error, except under /usr/local/cuda*
# where a CUDA toolkit installed without packages (the development machine's) provides it; in
# the CUDA images those files belong to packages and are listed like the others.
# Tested by tests/deploy/test_docker.py.
set -euo pipefail

sonames=()
files=()
while (($#)); do
    case "$1" in
    --dlopen)
        sonames+=("$2")
        shift 2
        ;;
    *)
        files+=("$1")
        shift
        ;;
    esac
done
if ((${#files[@]} == 0)); then
    echo "usage: $0 [--dlopen SONAME]... FILE..." >&2
    exit 2
fi

libraries=()
for file in "${files[@]}"; do
    # Lines: "libfoo.so.1 => /path/libfoo.so.1 (0x...)", "/lib64/ld-linux-x86-64.so.2 (0x...)",
    # "linux-vdso.so.1 (0x...)" (in the kernel, no file), "libbar.so.2 => not found".
    ldd_output="$(ldd "$file")"
    while read -r first arrow path _; do
        if [ "$arrow" = "=>" ]; then
            if [ "$path" = "not" ]; then
                echo "$0: $file needs $first, which the loader cannot find" >&2
                exit 1
            fi
            libraries+=("$path")
        elif [[ "$first" == /* ]]; then
            libraries+=("$first")
        fi
    done <<<"$ldd_output"
done
for soname in "${sonames[@]}"; do
    # The first x86-64 entry; awk reads to the end, so ldconfig never meets a closed pipe.
    path="$(ldconfig -p |
        awk -v name="$soname" '$1 == name && /x86-64/ && !found { print $NF; found = 1 }')"
    if [ -z "$path" ]; then
        echo "$0: $soname (opened at run time) is not in the ldconfig cache" >&2
        exit 1
    fi
    libraries+=("$path")
done

# dpkg records a file under the path its package ships it at, which on a merged-/usr system may
# be /lib/... or /usr/lib/... whichever the loader reports: each library is looked up as
# reported, as its symlink's target, and both with /usr toggled, all in one dpkg-query (a query
# reads the whole package database).
mapfile -t libraries < <(printf '%s\n' "${libraries[@]}" | sort -u)
declare -A candidates_of
all_candidates=()
for library in "${libraries[@]}"; do
    real="$(readlink -f "$library")"
    candidates=("$library" "$real")
    for path in "$library" "$real"; do
        case "$path" in
        /usr/*) candidates+=("${path#/usr}") ;;
        *) candidates+=("/usr$path") ;;
        esac
    done
    candidates_of["$library"]="${candidates[*]}"
    all_candidates+=("${candidates[@]}")
done
# Lines "libgrpc++1.51t64:amd64: /usr/lib/x86_64-linux-gnu/libgrpc++.so.1.51", or
# "pkg-a, pkg-b: PATH" for a file two packages ship (the first is kept); "diversion by ..."
# lines are not owners. Paths no package ships are errors on stderr, hence || true.
declare -A package_of
while IFS= read -r line; do
    [[ "$line" == "diversion "* ]] && continue
    owners="${line%%: /*}"
    path="/${line#*: /}"
    first="${owners%%, *}"
    package_of["$path"]="${first%%:*}"
done < <(dpkg-query -S "${all_candidates[@]}" 2>/dev/null || true)

packages=()
for library in "${libraries[@]}"; do
    package=""
    for path in ${candidates_of["$library"]}; do
        if [ -n "${package_of[$path]:-}" ]; then
            package="${package_of[$path]}"
            break
        fi
    done
    if [ -n "$package" ]; then
        packages+=("$package")
    elif [[ "$library" == /usr/local/cuda* || "$(readlink -f "$library")" == /usr/local/cuda* ]]
    then
        continue
    else
        echo "$0: no package owns $library" >&2
        exit 1
    fi
done
printf '%s\n' "${packages[@]}" | sort -u
