#!/bin/bash
# Instructions inside RocksDB's point read (callgrind, collected only in rocksdb_get_pinned_cf) per
# get, after a warm-up: benches/instructions/get_instructions.sh DIR N present|absent GETS [--options JSON]
# (DIR from `point_gets.py DIR N --build [--options JSON]`).
here=$(cd "$(dirname "$0")" && pwd); dir=$1; n=$2; phase=$3; gets=$4; shift 4
out=$(mktemp -u /tmp/get-callgrind.XXXXXX)
valgrind --tool=callgrind --toggle-collect='rocksdb_get_pinned_cf' --callgrind-out-file="$out" \
    "${PYTHON:-python}" "$here/point_gets.py" "$dir" "$n" --rounds 1 --gets "$gets" --phase "$phase" "$@" >/dev/null 2>&1
t=$(grep -E "^(summary|totals):" "$out" | head -1 | awk '{print $2}')
rm -f "$out"*
python3 -c "print('$phase $*', round($t / $gets))"
