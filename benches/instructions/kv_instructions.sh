#!/bin/bash
# Main-thread instructions per operation (OP minus the setup alone), 60,000 operations:
#   benches/instructions/kv_instructions.sh <python of a venv with the wheel> get|get_nocache|put|get_many|put_all|commit|scan [wal|changelog]
#   benches/instructions/kv_instructions.sh <python> window|session     (put_all + commit, per window / session)
#   benches/instructions/kv_instructions.sh <python> rocksdict_get|rocksdict_scan|rocksdict_write   (the peer)
#   benches/instructions/kv_instructions.sh <python> window_fetch|session_fetch|session_find   (a range read of one key)
#   benches/instructions/kv_instructions.sh <python> rocksdict_window_fetch|rocksdict_session_fetch|rocksdict_session_find
here=$(cd "$(dirname "$0")" && pwd); py=$1; op=$2; durability=$3  # statestore.durability (key-value)
one() {
    out=$(mktemp -u /tmp/kv-callgrind.XXXXXX)
    valgrind --tool=callgrind --separate-threads=yes --callgrind-out-file="$out" "$py" "$@" >/dev/null 2>&1
    grep -E "^(summary|totals):" "$out-01" | head -1 | awk '{print $2}'
    rm -f "$out"*
}
ops=60000
case $op in
    window_fetch|session_fetch|session_find|rocksdict_window_fetch|rocksdict_session_fetch|rocksdict_session_find)
       library=kstate; [ "${op#rocksdict_}" != "$op" ] && library=rocksdict
       a=$(one "$here/segmented_reads.py" $library "${op#rocksdict_}" read)
       b=$(one "$here/segmented_reads.py" $library "${op#rocksdict_}" none)
       ops=20000 ;;
    window|session) a=$(one "$here/segmented_ops.py" "$op" put); b=$(one "$here/segmented_ops.py" "$op" none) ;;
    rocksdict_*) a=$(one "$here/rocksdict_ops.py" "${op#rocksdict_}"); b=$(one "$here/rocksdict_ops.py" none) ;;
    *) a=$(one "$here/kv_ops.py" "$op" $durability)
       b=$(one "$here/kv_ops.py" "$([ "$op" = get_nocache ] && echo none_nocache || echo none)" $durability) ;;
esac
python3 -c "print('$op', round(($a - $b) / $ops))"
