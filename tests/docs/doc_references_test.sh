#!/usr/bin/env bash
# Every Markdown file the repository's files refer to exists in the repository, so that someone
# who clones it can follow every reference (docs/design.md, docs/workloads.md and the rest).
#
# Usage: doc_references_test.sh [SOURCE_DIR]   (default: the checkout this script is in)
#
# The files searched are git's tracked and untracked-but-not-ignored files (every file under
# SOURCE_DIR but .git and build folders when it is not a git checkout); binary files are skipped.
# A reference is a path-like word ending in ".md": letters, digits and `_ . - /` before it. URLs
# (`scheme://...`) and templates (a `$`, `{`, `<`, `*` or `~` right before the word, as in
# `$out/report.md`) are not references. A reference resolves when it names a file
#   1. relative to the referring file's folder (how `bench/README.md` links the docs),
#   2. relative to the repository's root (`docs/cuda.md` from anywhere), or
#   3. anywhere in the repository when it has no `..` (`report.md`, `results/report.md`: a file
#      whose path is it or ends in `/` + it).
# Each one that does not is printed as FILE:LINE: REFERENCE, and the test fails.
set -euo pipefail

source_dir="${1:-$(cd "$(dirname "$0")/../.." && pwd)}"
cd "$source_dir"

if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
    mapfile -d '' listed < <(git ls-files -z -co --exclude-standard)
else
    mapfile -d '' listed < <(find . -type f -not -path './.git/*' -not -path './build*' \
        -not -path './.venv/*' -printf '%P\0')
fi
files=()
markdown=()
for file in "${listed[@]}"; do
    # A path git still lists but that was deleted from the working tree refers to nothing.
    [ -f "$file" ] || continue
    files+=("$file")
    [[ "$file" == *.md ]] && markdown+=("$file")
done

# Whether `ref`, written in `file`, names a Markdown file of the repository.
resolves() {
    local file="$1" ref="$2" dir candidate
    dir="$(dirname "$file")"
    [ -f "$dir/$ref" ] && return 0
    [ -f "./${ref#/}" ] && return 0
    [[ "$ref" == *..* ]] && return 1
    ref="${ref#./}"
    for candidate in "${markdown[@]}"; do
        [[ "$candidate" == "$ref" || "$candidate" == */"$ref" ]] && return 0
    done
    return 1
}

# FILE:LINE:MATCH for every word that ends in ".md", with the character before it (or the
# scheme's "://") so that URLs and templates can be told apart.
pattern='([^A-Za-z0-9_./-]|://)?[A-Za-z0-9_./-]*[A-Za-z0-9_-]\.md([^A-Za-z0-9_]|$)'
checked=0
broken=0
while IFS= read -r hit; do
    file="${hit%%:*}"
    rest="${hit#*:}"
    line="${rest%%:*}"
    match="${rest#*:}"
    case "$match" in
    *://* | '$'* | '{'* | '<'* | '*'* | '~'*) continue ;;
    esac
    # Drop the character before the word and the one after ".md".
    [[ "$match" =~ ^[^A-Za-z0-9_./-] ]] && match="${match:1}"
    ref="${match%.md*}.md"
    # A word that is only dots and slashes before ".md" is not a path.
    [[ "$ref" =~ [A-Za-z0-9_-]\.md$ ]] || continue
    checked=$((checked + 1))
    if ! resolves "$file" "$ref"; then
        echo "$file:$line: $ref"
        broken=$((broken + 1))
    fi
done < <(printf '%s\0' "${files[@]}" | xargs -0 grep -I -n -o -E "$pattern" -- /dev/null)

if ((checked == 0)); then
    echo "doc_references_test: found no reference to a .md file at all in $source_dir" >&2
    exit 1
fi
if ((broken > 0)); then
    echo "doc_references_test: $broken of $checked references to .md files name no file of" \
        "the repository (FILE:LINE: REFERENCE above)" >&2
    exit 1
fi
echo "doc_references_test: $checked references to .md files, every one resolves"
