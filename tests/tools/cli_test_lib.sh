# Shared by the command-line tests: run the tool in $tool, count passes and failures, and print
# "N passed, M failed" at the end (cli_summary). Source it after setting tool=PATH.
failures=0
passes=0

pass_() { passes=$((passes + 1)); }
fail_() {
    echo "FAIL $*"
    failures=$((failures + 1))
}

# expect_ok NAME PATTERN ARGS...: exit 0 and the output matches PATTERN.
expect_ok() {
    local name="$1" pattern="$2"
    shift 2
    local out
    if ! out="$("$tool" "$@" 2>&1)"; then
        fail_ "$name: exit non-zero: $out"
    elif ! grep -qE -- "$pattern" <<<"$out"; then
        fail_ "$name: output does not match '$pattern':"
        echo "$out" | head -5
    else
        pass_
    fi
}

# expect_error NAME STATUS PATTERN ARGS...: exit STATUS, stderr is one line matching PATTERN.
expect_error() {
    local name="$1" status="$2" pattern="$3"
    shift 3
    local err rc
    err="$("$tool" "$@" 2>&1 >/dev/null)"
    rc=$?
    if [ "$rc" -ne "$status" ]; then
        fail_ "$name: exit $rc, expected $status: $err"
    elif [ "$(printf '%s\n' "$err" | wc -l)" -ne 1 ] || ! grep -qE -- "$pattern" <<<"$err"; then
        fail_ "$name: expected one line matching '$pattern', got:"
        echo "$err"
    else
        pass_
    fi
}

# expect_output NAME STATUS PATTERN ARGS...: exit STATUS, and some line of the output (stdout and
# stderr together, any length) matches PATTERN.
expect_output() {
    local name="$1" status="$2" pattern="$3"
    shift 3
    local out rc
    out="$("$tool" "$@" 2>&1)"
    rc=$?
    if [ "$rc" -ne "$status" ]; then
        fail_ "$name: exit $rc, expected $status:"
        printf '%s\n' "$out" | tail -n 20
    elif ! grep -qE -- "$pattern" <<<"$out"; then
        fail_ "$name: output does not match '$pattern':"
        printf '%s\n' "$out" | tail -n 20
    else
        pass_
    fi
}

# expect_true NAME COMMAND...: the command succeeds.
expect_true() {
    local name="$1"
    shift
    if "$@"; then
        pass_
    else
        fail_ "$name"
    fi
}

json_valid() { python3 -c 'import json, sys; json.load(sys.stdin)'; }

cli_summary() {
    echo "${passes} passed, ${failures} failed"
    [ "$failures" -eq 0 ]
}
