#!/bin/sh
# check-push-rbp.sh LIB... — fails unless the first byte of every exported (dynamic, defined)
# function of each LIB is 0x55 (push %rbp): the instruction the kernel emulates for uprobes, as
# at the real driver's entry points.
set -eu
status=0
for lib in "$@"; do
	if ! { objdump -T "$lib" && echo '@@DISASSEMBLY@@' && objdump -d "$lib"; } | awk -v lib="$lib" '
		$0 == "@@DISASSEMBLY@@" { dis = 1; next }
		!dis {
			# ADDR FLAGS... DF SECTION SIZE VERSION NAME
			if ($3 == "DF" && $4 == ".text") { a = $1; sub(/^0+/, "", a); want[a] = $NF; n++ }
			next
		}
		/^ *[0-9a-f]+:\t/ {
			split($0, f, "\t"); a = f[1]; gsub(/[ :]/, "", a)
			if ((a in want) && !(a in first)) { split(f[2], b, " "); first[a] = b[1] }
		}
		END {
			if (n == 0) { print lib ": no exported functions found" > "/dev/stderr"; exit 1 }
			bad = 0
			for (a in want) if (first[a] != "55") {
				print lib ": " want[a] " starts with 0x" first[a] ", not 0x55 (push %rbp)" > "/dev/stderr"; bad++
			}
			if (bad) exit 1
			print lib ": all " n " exported functions start with push %rbp"
		}'; then
		status=1
	fi
done
exit $status
