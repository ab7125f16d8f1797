# Sourced by hack/bootstrap and hack/images/build (bash).
#
# run_logged WHAT LOGFILE CMD...: run CMD with its output in LOGFILE and a progress line every
# PROGRESS_EVERY s (elapsed time and the log's last line), so a long step never looks hung. On
# failure: the log's last 20 lines, then one line naming WHAT and the log; returns CMD's exit
# code.
run_logged() {
	local what=$1 logfile=$2 pid rc=0 t0=$SECONDS next last
	shift 2
	mkdir -p "$(dirname "$logfile")"
	"$@" >"$logfile" 2>&1 9>&- &
	pid=$!
	next=$((SECONDS + PROGRESS_EVERY))
	while kill -0 "$pid" 2>/dev/null; do
		if ((SECONDS >= next)); then
			last=$(tail -n 1 "$logfile" 2>/dev/null | cut -c1-100)
			log "$what: still running, $((SECONDS - t0))s${last:+ (last: $last)}"
			next=$((SECONDS + PROGRESS_EVERY))
		fi
		sleep 1
	done
	wait "$pid" || rc=$?
	if ((rc != 0)); then
		tail -n 20 "$logfile" >&2
		log "ERROR: $what failed (exit $rc) after $((SECONDS - t0))s; log above and in $logfile"
	fi
	return "$rc"
}
