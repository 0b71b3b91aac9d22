#!/bin/bash
# Usage: bench/history-cost.sh [BIN] [N] (see bench/instructions.sh: valgrind, veil-bench, ports 9480-9483)
# The delivery history's cost in instructions, not seconds (issue 28, item 6): the same binary's server
# instructions per message with the history on and off (bench/instructions.sh, which says what callgrind
# counts and why SHA-256's rounds are also left out).
BIN=${1:-target/release/veil}; N=${2:-6000}
here=$(dirname "$0")
on=$("$here/instructions.sh" --history on "$N" "$BIN"); echo "$on"
off=$("$here/instructions.sh" --history off "$N" "$BIN"); echo "$off"
figures() { sed -E 's/.*: ([0-9]+) instructions per message, ([0-9]+) without.*/\1 \2/' <<<"$1"; }
read -r on_all on_nosha <<<"$(figures "$on")"
read -r off_all off_nosha <<<"$(figures "$off")"
awk -v a="$on_all" -v b="$off_all" -v c="$on_nosha" -v d="$off_nosha" 'BEGIN {
  printf "the history costs %.1f%% of the instructions per message, %.1f%% of those without SHA-256 rounds\n",
    (a - b) / b * 100, (c - d) / d * 100 }'
