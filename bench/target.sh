# bench/target.sh: sourced by the benchmark scripts.  bench_target appends
# one row of bench/RESULTS.md's targets table to the file that
# HOPLOCK_BENCH_TARGETS names (bench/run sets it; unset, it does nothing),
# tab-separated: the row's key (bench/run sorts by it; "a..." rows are
# 1.2's targets, "b..." the standing ones), what is measured, the figure,
# the target, met / MISSED / "—" (no target), and where it comes from.
#
#   bench_target KEY WHAT MEASURED TARGET VERDICT SOURCE
#   bench_verdict VALUE le|ge LIMIT     prints met or MISSED

bench_target() {
	[ -n "${HOPLOCK_BENCH_TARGETS:-}" ] || return 0
	printf '%s\t%s\t%s\t%s\t%s\t%s\n' "$1" "$2" "$3" "$4" "$5" "$6" >>"$HOPLOCK_BENCH_TARGETS"
}

bench_verdict() {
	if awk -v v="$1" -v op="$2" -v l="$3" \
		'BEGIN { exit !(op == "le" ? v + 0 <= l + 0 : v + 0 >= l + 0) }'; then
		echo met
	else
		echo MISSED
	fi
}
