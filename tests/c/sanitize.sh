#!/usr/bin/env bash
# Builds C test programs of tests/c/ with AddressSanitizer (leaks included)
# and UndefinedBehaviorSanitizer on the C side, and runs those that end
# normally, in one process and under convrun. Used by .ci/run; run it from
# the repository's root after `cargo build -p converse-capi -p convrun`.
#
#   tests/c/sanitize.sh DIR "PROGRAM ARGS" ...
set -euo pipefail
root=$(pwd)
dir=$1
shift
out=target/c-sanitize/$dir
rm -rf "$out"
mkdir -p "$out"
cp "tests/c/$dir"/* "$out"/
programs=()
for run in "$@"; do
    programs+=("${run%% *}")
done
make -s -C "$out" CHARMC="$root/target/debug/convcc" \
    OPTS="-g -Wall -Wextra -Werror -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined" \
    $(printf '%s\n' "${programs[@]}" | sort -u)
export ASAN_OPTIONS=detect_leaks=1:abort_on_error=0
export UBSAN_OPTIONS=print_stacktrace=1
for run in "$@"; do
    read -r program args <<<"$run"
    echo "-- $dir/$program $args"
    (cd "$out" && timeout 120 "./$program" $args >/dev/null)
    echo "-- convrun $args ./$program"
    (cd "$out" && timeout 120 "$root/target/debug/convrun" $args "./$program" >/dev/null)
done
