# shellcheck shell=bash
# shellcheck disable=SC2154 # the engine state (_lxpu_prefix, _lxpu_tag, ...) is set by the engine's lxpu_main
# lightning-xpu install engine, part "publish": never delete what is in use (issue 12, docs/architecture.md
# "Install layout", docs/administrators.md "Removing, rolling back and pruning builds").
#
# Sourced by the engine (it defines functions only; its names start with _lxpu_, like the engine's). It owns:
#   - the install lock (flock on a fixed file, backed by the leases below, so a deleted lock file changes nothing);
#   - leases: <prefix>/.leases/<build>@<host>.<job> recorded by `module load`, the setup script and the install
#     job itself; a lease is live while its Slurm/PBS job is queued or running, or, outside a scheduler, while its
#     process lives on its host (a lease from another host without a scheduler is live until its age limit);
#   - link validation and repair from the manifests, before anything is deleted;
#   - publishing: ONE rename of <prefix>/<tag>; the rollback pointer is recorded inside the new build before
#     that rename (share/lightning-xpu/previous-build), so no kill can leave it stale. .envs/<tag>.previous is
#     a convenience link derived from that record and repaired by every run;
#   - cleanup: only incomplete builds of killed runs that no lease holds. Complete builds go only through
#     --prune, --uninstall (both refuse builds in use) or never;
#   - --prune, --uninstall and --rollback; the free-space check (bytes and inodes); log rotation.
#
# Builds are immutable once published: nothing here writes into a complete build.

# ---- small helpers ------------------------------------------------------------------------------------------

_lxpu_host() { cat /proc/sys/kernel/hostname 2>/dev/null || uname -n; }

# Field 22 of /proc/PID/stat (start time in clock ticks since boot): tells a live process from a reused pid.
_lxpu_pid_start() {
	local stat
	stat="$(cat "/proc/$1/stat" 2>/dev/null)" || return 1
	stat="${stat##*) }"
	# shellcheck disable=SC2086 # word splitting of the stat fields is the point
	set -- $stat
	printf '%s' "${20:-}"
}

# A note for the last line: everything a run changed besides building (repairs, removals).
_lxpu_note() {
	_lxpu_note_quietly "$*"
	_lxpu_say "${_lxpu_notes[-1]}"
}

_lxpu_note_quietly() {
	local note="$*"
	[[ "$_lxpu_dry_run" != 1 ]] || note="(dry run, not done) $note"
	_lxpu_notes+=("$note")
}

# The last line of a successful run: the engine's result plus what else changed. A run that changed or removed
# anything never says "nothing changed".
_lxpu_final_result() {
	local result="${_lxpu_result:-done}" notes="" note
	for note in "${_lxpu_notes[@]}"; do notes+="${notes:+; }$note"; done
	if [[ -n "$notes" && "$result" == *"nothing changed"* ]]; then
		result="${result/nothing changed/$notes}"
	elif [[ -n "$notes" ]]; then
		result+="; $notes"
	fi
	printf '%s' "$result"
}

# Test-only switches (like smoke.py's LIGHTNING_XPU_SMOKE_INJECT_FAILURE): LXPU_TEST_PAUSE_AT=<op> waits before
# publishing operation <op> while the file LXPU_TEST_PAUSE_FILE exists (tests kill the job there);
# LXPU_TEST_FAIL_AT=<op> makes <op> fail as a full disk would. Unset, they cost one test.
_lxpu_test_hook() {
	[[ -n "${LXPU_TEST_PAUSE_AT:-}${LXPU_TEST_FAIL_AT:-}" && "$_lxpu_dry_run" != 1 ]] || return 0
	if [[ "${LXPU_TEST_FAIL_AT:-}" == "$1" ]]; then
		_lxpu_fail "$1: No space left on device (injected by LXPU_TEST_FAIL_AT)"
	fi
	if [[ "${LXPU_TEST_PAUSE_AT:-}" == "$1" ]]; then
		_lxpu_say "test pause before $1 (pid $$): waiting while ${LXPU_TEST_PAUSE_FILE:?LXPU_TEST_PAUSE_FILE is not set} exists"
		while [[ -e "$LXPU_TEST_PAUSE_FILE" ]]; do sleep 0.1 {_lxpu_lock_fd}>&-; done
	fi
}

# ---- builds -------------------------------------------------------------------------------------------------

# The build directories of this tag (names, newest first: build ids start with the build time).
_lxpu_builds() {
	local path name id
	for path in "$_lxpu_prefix/.envs/$_lxpu_tag".*; do
		[[ -d "$path" && ! -L "$path" ]] || continue
		name="${path##*/}"
		id="${name#"$_lxpu_tag".}"
		[[ "$id" != *.* && "$id" != previous && "$id" != uninstalled ]] || continue
		printf '%s\n' "$name"
	done | LC_ALL=C sort -r
}

# Complete = a whole manifest.json (it ends with its closing brace) with status "installed" and this tag.
# Written at step 9, after the smoke job: a build without it never passed, or was killed before.
_lxpu_build_complete() {
	local manifest="$_lxpu_prefix/.envs/$1/manifest.json" last
	[[ -n "$1" && -d "$_lxpu_prefix/.envs/$1" && -f "$manifest" ]] || return 1
	last="$(tail -c 2 "$manifest" 2>/dev/null)" || return 1
	[[ "$last" == "}" ]] && grep -q '"status": "installed"' "$manifest" &&
		grep -qF "\"tag\": \"$_lxpu_tag\"" "$manifest"
}

_lxpu_newest_complete() {
	local name
	while IFS= read -r name; do
		if _lxpu_build_complete "$name"; then
			printf '%s' "$name"
			return 0
		fi
	done < <(_lxpu_builds)
	return 1
}

# The rollback build recorded in a build (empty for the first build of a tag).
_lxpu_recorded_previous() {
	local record="$_lxpu_prefix/.envs/$1/share/lightning-xpu/previous-build"
	[[ -f "$record" ]] && head -n 1 "$record"
}

_lxpu_size_of() { du -sh "$_lxpu_prefix/.envs/$1" 2>/dev/null | cut -f1; }

# ---- leases -------------------------------------------------------------------------------------------------

# Is the lease file live? Prints why (one line) and returns 0 when live, 1 when it is stale.
_lxpu_lease_live() {
	local file="$1" key value host="" job="" cluster="" pid="" pid_start="" created="" out status max_days age
	local what="no scheduler job"
	while IFS='=' read -r key value; do
		case "$key" in
		host) host="$value" ;;
		cluster) cluster="$value" ;;
		job) job="$value" ;;
		pid) pid="$value" ;;
		pid_start) pid_start="$value" ;;
		created) created="$value" ;;
		esac
	done 2>/dev/null <"$file"
	# A job of another Slurm cluster sharing this file system cannot be asked about here: the age rule below.
	if [[ "$job" == slurm:* && -n "$cluster" && "$cluster" != "$(_lxpu_slurm_cluster)" ]]; then
		what="Slurm job ${job#slurm:} of cluster $cluster, not this one"
		job=""
	elif [[ "$job" == slurm:* ]] && ! command -v squeue >/dev/null; then
		what="Slurm job ${job#slurm:}, no squeue here to ask"
		job=""
	elif [[ "$job" == pbs:* ]] && ! command -v qstat >/dev/null; then
		what="PBS job ${job#pbs:}, no qstat here to ask"
		job=""
	fi
	case "$job" in
	slurm:*)
		status=0
		out="$(squeue -h -j "${job#slurm:}" -o %T 2>&1)" || status=$?
		if [[ "$status" == 0 && -n "$out" ]]; then
			printf 'Slurm job %s on %s (%s)' "${job#slurm:}" "$host" "$out"
			return 0
		elif [[ "$status" == 0 || "$out" == *"Invalid job id"* ]]; then
			printf 'Slurm job %s has ended' "${job#slurm:}"
			return 1
		fi
		printf 'Slurm job %s on %s (squeue failed: %s; treated as live)' "${job#slurm:}" "$host" "${out//$'\n'/ }"
		return 0
		;;
	pbs:*)
		status=0
		out="$(qstat "${job#pbs:}" 2>&1)" || status=$?
		if [[ "$status" == 0 ]]; then
			printf 'PBS job %s on %s' "${job#pbs:}" "$host"
			return 0
		elif [[ "$out" == *"Unknown Job"* || "$out" == *"has finished"* ]]; then
			printf 'PBS job %s has ended' "${job#pbs:}"
			return 1
		fi
		printf 'PBS job %s on %s (qstat failed: %s; treated as live)' "${job#pbs:}" "$host" "${out//$'\n'/ }"
		return 0
		;;
	esac
	if [[ "$host" == "$(_lxpu_host)" && "$pid" =~ ^[0-9]+$ ]]; then
		if [[ -n "$pid_start" && "$(_lxpu_pid_start "$pid")" == "$pid_start" ]]; then
			printf 'process %s on %s' "$pid" "$host"
			return 0
		fi
		printf 'process %s on %s has ended' "$pid" "$host"
		return 1
	fi
	# Another host and no scheduler job: nothing here can see that process. Live until the age limit.
	max_days="${LIGHTNING_XPU_LEASE_MAX_AGE_DAYS:-7}"
	[[ "$created" =~ ^[0-9]+$ ]] || created="$(stat -c %Y "$file" 2>/dev/null || echo 0)"
	age=$((($(date +%s) - created) / 86400))
	if ((age < max_days)); then
		printf 'process %s on %s (%s): cannot be checked from here, treated as live until %s days old (LIGHTNING_XPU_LEASE_MAX_AGE_DAYS)' \
			"${pid:-?}" "${host:-?}" "$what" "$max_days"
		return 0
	fi
	printf 'process %s on %s (%s), older than %s days' "${pid:-?}" "${host:-?}" "$what" "$max_days"
	return 1
}

# The Slurm cluster this runs in or submits to (empty without Slurm), looked up once.
_lxpu_slurm_cluster() {
	if [[ -z "${_lxpu_cluster_name+set}" ]]; then
		_lxpu_cluster_name="${SLURM_CLUSTER_NAME:-}"
		[[ -n "$_lxpu_cluster_name" ]] || ! command -v scontrol >/dev/null ||
			_lxpu_cluster_name="$(scontrol show config 2>/dev/null | awk '$1 == "ClusterName" { print $3 }')" || true
	fi
	printf '%s' "$_lxpu_cluster_name"
}

# The live leases of a build, one description per line.
_lxpu_live_leases() {
	local file why
	for file in "$_lxpu_prefix/.leases/$1@"*; do
		[[ -f "$file" ]] || continue
		why="$(_lxpu_lease_live "$file")" && printf '%s\n' "$why"
	done
	return 0
}

# Remove stale leases of this tag (bookkeeping files, reported as a count).
_lxpu_remove_stale_leases() {
	local file count=0
	for file in "$_lxpu_prefix/.leases/$_lxpu_tag".*@*; do
		[[ -f "$file" ]] || continue
		_lxpu_lease_live "$file" >/dev/null && continue
		if [[ "$_lxpu_dry_run" == 1 ]]; then
			_lxpu_say "+ rm $(_lxpu_quote "$file") (stale lease)"
		else
			rm -f "$file" && count=$((count + 1))
		fi
	done
	((count == 0)) || _lxpu_say "removed $count stale lease(s) in $_lxpu_prefix/.leases"
}

# The install job's own lease on the build it is making, so that nothing (not even a second install whose lock
# file was deleted) removes a build in flight.
_lxpu_take_install_lease() {
	local job=""
	# The cluster is looked up once, here, for the lease checks (they run in subshells), and only when a lease
	# names one: `scontrol show config` waits out its message timeout (about 10 s) where no controller answers.
	! grep -qs '^cluster=.' "$_lxpu_prefix/.leases/"* || _lxpu_slurm_cluster >/dev/null
	[[ -z "${SLURM_JOB_ID:-}" ]] || job="slurm:$SLURM_JOB_ID"
	[[ -z "${PBS_JOBID:-}" ]] || job="pbs:$PBS_JOBID"
	_lxpu_lease_file="$_lxpu_prefix/.leases/${_lxpu_env##*/}@$(_lxpu_host).install-$$"
	_lxpu_make_leases_dir
	printf 'build=%s\nhost=%s\njob=%s\ncluster=%s\npid=%s\npid_start=%s\nuser=%s\ncreated=%s\nwhat=install\n' \
		"${_lxpu_env##*/}" "$(_lxpu_host)" "$job" "${SLURM_CLUSTER_NAME:-}" "$$" "$(_lxpu_pid_start $$)" "$(id -un)" \
		"$(date +%s)" >"$_lxpu_lease_file"
}

_lxpu_drop_install_lease() {
	[[ -z "${_lxpu_lease_file:-}" ]] || rm -f "$_lxpu_lease_file"
	_lxpu_lease_file=""
}

# Users record leases here (module load, setup script): with --shared-group it is group-writable, setgid and
# sticky (everyone removes only their own), like /tmp for the group.
_lxpu_make_leases_dir() {
	local dir="$_lxpu_prefix/.leases"
	[[ -d "$dir" ]] || mkdir -p "$dir"
	[[ -z "$_lxpu_shared_group" ]] || { chgrp "$_lxpu_shared_group" "$dir" && chmod 3775 "$dir"; }
}

# Another install of this tag that is still running although it does not hold the lock (its lock file was
# deleted): prints its lease's description.
_lxpu_other_installer() {
	local file why
	for file in "$_lxpu_prefix/.leases/$_lxpu_tag".*@*.install-*; do
		[[ -f "$file" && "$file" != "${_lxpu_lease_file:-}" ]] || continue
		[[ "$file" != *"@$(_lxpu_host).install-$$" ]] || continue
		if why="$(_lxpu_lease_live "$file")"; then
			printf '%s' "$why"
			return 0
		fi
	done
	return 1
}

# ---- the lock -----------------------------------------------------------------------------------------------

# flock on <prefix>/.locks/<tag>.lock, a file this installer never unlinks. If someone deletes it anyway, the
# lock is still exclusive: a run checks that it locked the file now at that path, and waits for any other install
# of the tag whose lease is live (that one still holds the deleted file).
_lxpu_lock() {
	_lxpu_step "take the install lock"
	local lockfile="$_lxpu_prefix/.locks/$_lxpu_tag.lock" holder="" me tries=0 other="" t0 said=0
	_lxpu_say "+ flock $(_lxpu_quote "$lockfile") (wait up to $_lxpu_lock_timeout s)"
	if [[ "$_lxpu_dry_run" == 1 ]]; then
		# Read-only: what would be repaired or removed is printed, nothing is done.
		_lxpu_check_links
		_lxpu_remove_leftovers
		return 0
	fi
	mkdir -p "$_lxpu_prefix/.locks"
	me="pid $$ host $(_lxpu_host) since $(date -Iseconds)"
	t0="$(date +%s)"
	while :; do
		# Opened read-write without truncating: the holder's pid and host stay readable for waiters.
		exec {_lxpu_lock_fd}<>"$lockfile"
		if ! flock -n "$_lxpu_lock_fd"; then
			# The holder writes its line right after taking the lock: give it a moment if it is not there yet.
			while [[ "$holder" != pid* && $tries -lt 10 ]]; do
				holder="$(<"$lockfile")" || true
				[[ "$holder" == pid* ]] || sleep 0.2
				tries=$((tries + 1))
			done
			_lxpu_say "another install of $_lxpu_tag holds $lockfile: ${holder:-unknown holder}; waiting up to $_lxpu_lock_timeout s"
			flock -w "$_lxpu_lock_timeout" "$_lxpu_lock_fd" ||
				_lxpu_fail "another install of $_lxpu_tag (${holder:-unknown holder}) still holds $lockfile after $_lxpu_lock_timeout s: wait for it to finish or raise --lock-timeout"
		fi
		[[ "$(stat -L -c %d:%i "/dev/fd/$_lxpu_lock_fd")" == "$(stat -c %d:%i "$lockfile" 2>/dev/null)" ]] && break
		_lxpu_say "the lock file $lockfile was replaced while we waited: locking the new one"
		exec {_lxpu_lock_fd}>&-
	done
	while other="$(_lxpu_other_installer)"; do
		if (($(date +%s) - t0 >= _lxpu_lock_timeout)); then
			_lxpu_fail "another install of $_lxpu_tag ($other) still runs after $_lxpu_lock_timeout s although its lock file $lockfile was deleted: wait for it to finish or raise --lock-timeout"
		fi
		[[ "$said" == 1 ]] || _lxpu_say "another install of $_lxpu_tag holds no lock file but is still running ($other): its lock file $lockfile was deleted; waiting for it up to $_lxpu_lock_timeout s"
		said=1
		sleep 1 {_lxpu_lock_fd}>&-
	done
	printf '%s\n' "$me" >"$lockfile"
	_lxpu_take_install_lease
	_lxpu_check_links
	_lxpu_remove_leftovers
}

# ---- links --------------------------------------------------------------------------------------------------

# Follow a chain of symlinks by hand (as the modulefile and setup script do); prints the final path.
_lxpu_follow() {
	local path="$1" target n=0
	while [[ -L "$path" && $n -lt 8 ]]; do
		target="$(readlink "$path")"
		[[ "$target" == /* ]] || target="${path%/*}/$target"
		path="$target"
		n=$((n + 1))
	done
	[[ -L "$path" ]] && return 1
	printf '%s' "$path"
}

# Replace a symlink atomically (temporary link + rename) and report it.
_lxpu_set_link() {
	local link="$1" target="$2" tmp="$_lxpu_prefix/.envs/.tmp.$_lxpu_tag.$$.relink"
	_lxpu_run ln -sfn "$target" "$tmp"
	[[ -z "$_lxpu_shared_group" || "$_lxpu_dry_run" == 1 ]] || chgrp -h "$_lxpu_shared_group" "$tmp"
	_lxpu_run mv -T "$tmp" "$link"
}

# Validate <prefix>/<tag> and .envs/<tag>.previous before anything is deleted; repair them from the manifests or
# stop and say what was found. Sets _lxpu_current (the published build's name, or empty).
_lxpu_check_links() {
	local link="$_lxpu_prefix/$_lxpu_tag" raw resolved name newest="" envs="$_lxpu_prefix/.envs"
	_lxpu_current=""
	newest="$(_lxpu_newest_complete)" || newest=""
	if [[ -L "$link" ]]; then
		raw="$(readlink "$link")"
		if resolved="$(_lxpu_follow "$link")" && [[ -e "$resolved" ]]; then
			name="${resolved##*/}"
			[[ "$(cd "${resolved%/*}" 2>/dev/null && pwd -P)" == "$(cd "$envs" 2>/dev/null && pwd -P)" ]] ||
				_lxpu_fail "$link points to $raw, outside $envs: this installer did not make that link; point it at a build in $envs (ls $envs) or move it away, then rerun"
			if ! _lxpu_build_complete "$name"; then
				[[ "$name" == "$_lxpu_tag".* && -x "$resolved/bin/python" ]] ||
					_lxpu_fail "$link points to $raw, which is not a complete build of $_lxpu_tag (no whole manifest.json with status installed): point it at a complete build in $envs (ls $envs), or remove the link, then rerun"
				# An environment whose manifest was damaged: it stays published (jobs may use it) until a
				# rebuild replaces it, and is never removed by an install.
				_lxpu_warn "the published build $name has a missing or truncated manifest.json: it is kept; an install rebuilds"
			fi
			_lxpu_current="$name"
			if [[ "$raw" != ".envs/$name" ]]; then
				_lxpu_set_link "$link" ".envs/$name"
				_lxpu_note "repaired $link: it pointed to $raw, now to .envs/$name (the same build, named directly)"
			fi
		elif [[ -n "$newest" ]]; then
			_lxpu_set_link "$link" ".envs/$newest"
			_lxpu_note "repaired $link: it pointed to $raw, which does not resolve (dangling or a loop); now to .envs/$newest, the newest complete build (from the manifests)"
			_lxpu_current="$newest"
		else
			_lxpu_run rm -f "$link"
			_lxpu_note "removed the broken link $link (it pointed to $raw; no complete build of $_lxpu_tag exists)"
		fi
	elif [[ -n "$newest" && ! -e "$envs/$_lxpu_tag.uninstalled" ]]; then
		_lxpu_set_link "$link" ".envs/$newest"
		_lxpu_note "repaired $link: it was missing; now points to .envs/$newest, the newest complete build (from the manifests)"
		_lxpu_current="$newest"
	fi
	_lxpu_check_previous
}

# .envs/<tag>.previous is derived from the rollback record inside the published build.
_lxpu_check_previous() {
	local quiet="${1:-}" previous="$_lxpu_prefix/.envs/$_lxpu_tag.previous" expected="" raw="" resolved
	[[ -L "$previous" ]] && raw="$(readlink "$previous")"
	if [[ -n "$_lxpu_current" && -f "$_lxpu_prefix/.envs/$_lxpu_current/share/lightning-xpu/previous-build" ]]; then
		expected="$(_lxpu_recorded_previous "$_lxpu_current")"
		_lxpu_build_complete "$expected" || expected=""
	elif [[ -n "$raw" ]] && resolved="$(_lxpu_follow "$previous")" && [[ "${resolved##*/}" != "$_lxpu_current" ]] &&
		_lxpu_build_complete "${resolved##*/}"; then
		expected="${resolved##*/}" # a build from before rollback records: keep what the link says
	fi
	if [[ -n "$expected" && "$raw" != "$expected" ]]; then
		_lxpu_set_link "$previous" "$expected"
		[[ -n "$quiet" ]] || _lxpu_note "repaired $previous: it ${raw:+pointed to $raw}${raw:-was missing}; now $expected, the rollback build recorded in ${_lxpu_current}"
	elif [[ -z "$expected" && ( -L "$previous" || -e "$previous" ) ]]; then
		_lxpu_run rm -rf "$previous"
		[[ -n "$quiet" ]] || _lxpu_note "removed $previous (it pointed to ${raw:-a non-link}; ${_lxpu_current:-no build} records no rollback build that exists)"
	fi
}

# ---- cleanup ------------------------------------------------------------------------------------------------

# Under the lock: incomplete builds of killed runs (an install lease of theirs is left, and stale) that no live lease
# holds, and temporary files of killed runs. Complete builds are never removed here, nor anything a link points
# to, nor an incomplete build no install left a lease on (damaged by hand, or from an older installer: said).
_lxpu_remove_leftovers() {
	local envs="$_lxpu_prefix/.envs" path name previous="" leases kept=0 temporary=0
	[[ -d "$envs" ]] || return 0
	previous="$(_lxpu_follow "$envs/$_lxpu_tag.previous" 2>/dev/null)" && previous="${previous##*/}"
	for path in "$envs/.tmp.$_lxpu_tag".*; do
		[[ -e "$path" || -L "$path" ]] || continue
		[[ "$path" != "$envs/.tmp.$_lxpu_tag.$$."* ]] || continue
		_lxpu_say "removing leftover $path (a temporary file of a killed run)"
		_lxpu_run rm -rf "$path"
		temporary=$((temporary + 1))
	done
	((temporary == 0)) || _lxpu_note_quietly "removed $temporary temporary file(s) of a killed run"
	while IFS= read -r name; do
		[[ "$name" != "$_lxpu_current" && "$name" != "$previous" && "$name" != "${_lxpu_env##*/}" ]] || continue
		if _lxpu_build_complete "$name"; then
			kept=$((kept + 1))
			continue
		fi
		leases="$(_lxpu_live_leases "$name")"
		if [[ -n "$leases" ]]; then
			_lxpu_say "keeping the incomplete build $envs/$name: in use or in flight (${leases//$'\n'/; })"
			continue
		fi
		if ! compgen -G "$_lxpu_prefix/.leases/$name@*.install-*" >/dev/null; then
			_lxpu_say "keeping the incomplete build $envs/$name: no whole manifest.json, but no install of this tag left it (remove it by hand if nothing uses it)"
			continue
		fi
		_lxpu_say "removing leftover $envs/$name (an incomplete build of a killed run; no lease holds it)"
		_lxpu_run rm -rf "$envs/$name" "$_lxpu_prefix/.leases/$name@"*
		_lxpu_note_quietly "removed the leftover $name of a killed run"
	done < <(_lxpu_builds)
	_lxpu_kept_unpublished="$kept"
}

# A failed or interrupted build removes its own staging environment, temporary files and lease (a kill -9
# cannot: the next run does).
_lxpu_cleanup_failed_build() {
	[[ "$_lxpu_dry_run" == 1 || -z "$_lxpu_lock_fd" ]] && return 0
	_lxpu_pack_stop
	rm -rf "$_lxpu_prefix/.envs/.tmp.$_lxpu_tag.$$."*
	if [[ -n "$_lxpu_env" && "$_lxpu_published" != 1 && -d "$_lxpu_env" ]] &&
		[[ "$(readlink "$_lxpu_prefix/$_lxpu_tag" 2>/dev/null)" != ".envs/${_lxpu_env##*/}" ]]; then
		if [[ -f "$_lxpu_env/share/lightning-xpu/smoke.json" && -n "$_lxpu_log" ]]; then
			cp "$_lxpu_env/share/lightning-xpu/smoke.json" "${_lxpu_log%.log}.smoke.json"
		fi
		printf 'removing the unpublished build %s\n' "$_lxpu_env"
		rm -rf "$_lxpu_env"
	fi
	_lxpu_drop_install_lease
}

# ---- publishing ---------------------------------------------------------------------------------------------

# Operations, in order (each a place where tests kill the job, LXPU_TEST_PAUSE_AT):
#   record        write the rollback record and size into the new (not yet visible) build
#   entry-points  setup script and modulefile (identical for every build of a tag: temp file + rename), and
#                 the setup library and modulefile body they call (one for every tag of the prefix)
#   link          a temporary symlink to the new build
#   rename        THE publishing rename of that symlink onto <prefix>/<tag>
#   previous      derive .envs/<tag>.previous from the record
#   cleanup       drop the install's own lease, stale leases and leftovers
# A kill before "rename" leaves the old build published with its own record; after it, the new one with its.
_lxpu_publish() {
	_lxpu_step "publish"
	local link="$_lxpu_prefix/$_lxpu_tag" new=".envs/${_lxpu_env##*/}" tmp_link
	local share="$_lxpu_env/share/lightning-xpu"
	tmp_link="$_lxpu_prefix/.envs/.tmp.$_lxpu_tag.$$.link"
	_lxpu_test_hook record
	_lxpu_say "+ record in the new build: rollback build '${_lxpu_current:-none}', size"
	if [[ "$_lxpu_dry_run" != 1 ]]; then
		printf '%s\n' "$_lxpu_current" >"$share/previous-build"
		printf '%s %s\n' "$(du -sk "$_lxpu_env" | cut -f1)" "$(du -s --inodes "$_lxpu_env" | cut -f1)" >"$share/size"
	fi
	_lxpu_share_permissions -R "$_lxpu_env"
	_lxpu_test_hook entry-points
	_lxpu_write_entry_points
	_lxpu_test_hook link
	_lxpu_run ln -s "$new" "$tmp_link"
	[[ -z "$_lxpu_shared_group" || "$_lxpu_dry_run" == 1 ]] || chgrp -h "$_lxpu_shared_group" "$tmp_link"
	_lxpu_test_hook rename
	# THE publishing rename: <prefix>/<tag> switches from the old build to the new one atomically.
	_lxpu_run mv -T "$tmp_link" "$link"
	_lxpu_published=1
	[[ "$_lxpu_dry_run" == 1 ]] && return 0
	rm -f "$_lxpu_prefix/.envs/$_lxpu_tag.uninstalled"
	_lxpu_test_hook previous
	_lxpu_current="${_lxpu_env##*/}"
	_lxpu_check_previous quiet
	_lxpu_test_hook cleanup
	_lxpu_remove_leftovers
	_lxpu_remove_stale_leases
	_lxpu_hint_unused
}

# Complete builds that nothing points to are kept (a job may use them); say how to remove them.
_lxpu_hint_unused() {
	[[ "${_lxpu_kept_unpublished:-0}" -gt 0 ]] || return 0
	_lxpu_say "kept ${_lxpu_kept_unpublished} older complete build(s) of $_lxpu_tag that nothing links to (jobs may still use them): --prune --keep N removes the unused ones"
}

# After the publishing rename the new build is live: a later failure (a full disk, a signal) is reported as what
# it is, never as FAILED. Prints the last line; returns the exit status to use (0, or the signal's).
_lxpu_after_publish_failure() {
	local status="$1" total="$2"
	printf 'WARNING: %s after publishing; the new build is live; rerun the same command to finish the housekeeping\n' \
		"${_lxpu_fail_reason:-exit status $status}"
	printf 'lightning-xpu %s: installed %s -> %s (housekeeping after publishing failed: %s) (total %s s)\n' \
		"$_lxpu_tag" "$_lxpu_prefix/$_lxpu_tag" ".envs/${_lxpu_env##*/}" "${_lxpu_fail_reason:-exit status $status}" "$total"
	((status > 128)) && return "$status"
	return 0
}

# ---- free space ---------------------------------------------------------------------------------------------

# What the rebuild really needs: nothing is deleted before the new build is complete, so the new build's full
# size in bytes AND files (home and project quotas are often in files) must fit next to what exists. The size of
# the published build (recorded at publish) is the estimate, never less than the variant's default.
_lxpu_check_space() {
	local dir="$_lxpu_prefix" need_gib need_inodes free_kib free_inodes total_inodes kib=0 files=0 basis="default"
	local size_file="$_lxpu_prefix/$_lxpu_tag/share/lightning-xpu/size"
	case "$_lxpu_variant" in
	cpu) need_gib=3 need_inodes=40000 ;;
	*) need_gib=15 need_inodes=100000 ;;
	esac
	[[ -z "$_lxpu_base_python" ]] || need_gib=1 need_inodes=5000
	if [[ -f "$size_file" ]] && read -r kib files <"$size_file" && [[ "$kib" =~ ^[0-9]+$ && "$files" =~ ^[0-9]+$ ]]; then
		basis="the published build has $((kib / 1048576)) GiB in $files files"
		((kib * 11 / 10 <= need_gib * 1048576)) || need_gib=$(((kib * 11 / 10 + 1048575) / 1048576))
		((files * 11 / 10 <= need_inodes)) || need_inodes=$((files * 11 / 10))
	fi
	need_gib="${LIGHTNING_XPU_MIN_FREE_GIB:-$need_gib}"
	need_inodes="${LIGHTNING_XPU_MIN_FREE_INODES:-$need_inodes}"
	while [[ ! -e "$dir" ]]; do dir="$(dirname "$dir")"; done
	free_kib="$(df -Pk "$dir" | awk 'NR == 2 { print $4 }')"
	read -r total_inodes free_inodes < <(df -Pi "$dir" | awk 'NR == 2 { print $2, $4 }')
	_lxpu_say "disk:        $((free_kib / 1048576)) GiB and ${free_inodes:-?} inodes free under $dir; $need_gib GiB and $need_inodes files needed ($basis)"
	((free_kib >= need_gib * 1048576)) ||
		_lxpu_fail "only $((free_kib / 1048576)) GiB free under $dir, $need_gib GiB needed: free space (--prune removes unused builds) or pick another --prefix (LIGHTNING_XPU_MIN_FREE_GIB overrides the check)"
	# File systems without an inode limit report 0 (or -) inodes.
	if [[ "$total_inodes" =~ ^[0-9]+$ && "$total_inodes" -gt 0 && "$free_inodes" =~ ^[0-9]+$ ]]; then
		((free_inodes >= need_inodes)) ||
			_lxpu_fail "only $free_inodes free inodes (files) under $dir, $need_inodes needed: free files (--prune removes unused builds) or pick another --prefix (LIGHTNING_XPU_MIN_FREE_INODES overrides the check)"
	fi
}

# ---- logs ---------------------------------------------------------------------------------------------------

# The very end of every run (the log is closed): the install's own lease goes; a run that changed nothing keeps
# its log as logs/install-<tag>-noop.log, replacing the previous one, so logs/ does not grow per no-op run; other
# runs keep the newest LIGHTNING_XPU_KEEP_LOGS (default 30) logs of the tag.
_lxpu_finish() {
	local status="$1" keep="${LIGHTNING_XPU_KEEP_LOGS:-30}" old
	_lxpu_drop_install_lease
	[[ -n "$_lxpu_log" && -f "$_lxpu_log" ]] || return 0
	if [[ "$status" == 0 && "${_lxpu_noop:-0}" == 1 && ${#_lxpu_notes[@]} == 0 ]]; then
		mv -f "$_lxpu_log" "$_lxpu_prefix/logs/install-$_lxpu_tag-noop.log"
		return 0
	fi
	[[ "$keep" =~ ^[0-9]+$ ]] || keep=30
	while IFS= read -r old; do
		rm -f "$old" "${old%.log}.smoke.json"
	done < <(find "$_lxpu_prefix/logs" -maxdepth 1 -name "install-$_lxpu_tag-[0-9]*.log" -print | LC_ALL=C sort -r |
		tail -n +"$((keep + 1))")
}

# ---- --prune, --uninstall, --rollback -----------------------------------------------------------------------

# Why a build must stay (published, rollback, in use); empty when it may go.
_lxpu_protected() {
	local name="$1" previous leases
	[[ "$name" != "$_lxpu_current" ]] || { printf 'published as %s' "$_lxpu_prefix/$_lxpu_tag"; return; }
	previous="$(_lxpu_recorded_previous "$_lxpu_current" 2>/dev/null)" || previous=""
	[[ -z "$previous" || "$name" != "$previous" ]] || { printf 'the rollback build'; return; }
	leases="$(_lxpu_live_leases "$name")"
	[[ -z "$leases" ]] || printf 'in use: %s' "${leases//$'\n'/; }"
}

_lxpu_remove_build() {
	_lxpu_say "removing $_lxpu_prefix/.envs/$1 ($(_lxpu_size_of "$1"))"
	_lxpu_run rm -rf "$_lxpu_prefix/.envs/$1"
	_lxpu_removed+=("$1")
}

# Admin actions run under the install lock, after the links were validated (and repaired).
_lxpu_admin_action() {
	_lxpu_step_total=2
	_lxpu_removed=() _lxpu_kept=()
	_lxpu_lock
	case "$_lxpu_action" in
	prune) _lxpu_prune ;;
	uninstall) _lxpu_uninstall ;;
	rollback) _lxpu_rollback ;;
	esac
	[[ "$_lxpu_dry_run" != 1 ]] || _lxpu_result="dry run, nothing was changed; it would have: ${_lxpu_result}"
}

# Remove every complete build of the tag except the published one, its rollback build, those with a live lease and
# those --keep or --older-than keep. Sets _lxpu_kept (what stayed, and why) and _lxpu_removed.
_lxpu_remove_unprotected() {
	local name why n=0 age cutoff=""
	_lxpu_kept=()
	[[ -z "$_lxpu_older_than" ]] || cutoff=$(($(date +%s) - _lxpu_older_than * 86400))
	_lxpu_remove_stale_leases
	while IFS= read -r name; do
		_lxpu_build_complete "$name" || continue # incomplete: in flight (leased), or a leftover (removed above)
		n=$((n + 1))
		why=""
		if [[ -n "$_lxpu_keep" ]] && ((n <= _lxpu_keep)); then
			why="one of the $_lxpu_keep newest"
		elif [[ -n "$cutoff" ]]; then
			age="$(stat -c %Y "$_lxpu_prefix/.envs/$name/manifest.json")"
			((age <= cutoff)) || why="younger than $_lxpu_older_than days"
		fi
		[[ -n "$why" ]] || why="$(_lxpu_protected "$name")"
		if [[ -n "$why" ]]; then
			_lxpu_say "keeping $name: $why"
			_lxpu_kept+=("$name ($why)")
		else
			_lxpu_remove_build "$name"
		fi
	done < <(_lxpu_builds)
}

_lxpu_joined() {
	local item list=""
	for item in "$@"; do list+="${list:+, }$item"; done
	printf '%s' "$list"
}

_lxpu_prune() {
	_lxpu_step "prune builds of $_lxpu_tag"
	_lxpu_remove_unprotected
	_lxpu_result="pruned: removed ${#_lxpu_removed[@]} build(s)${_lxpu_removed[*]:+ (${_lxpu_removed[*]})}; kept ${#_lxpu_kept[@]}"
	((${#_lxpu_kept[@]} == 0)) || _lxpu_result+=": $(_lxpu_joined "${_lxpu_kept[@]}")"
}

_lxpu_uninstall() {
	_lxpu_step "uninstall $_lxpu_tag"
	local marker="$_lxpu_prefix/.envs/$_lxpu_tag.uninstalled"
	# New loads stop first; jobs that loaded a build keep it through their lease.
	_lxpu_run rm -f "$_lxpu_prefix/${_lxpu_setup_file##*/}" "$_lxpu_prefix/modulefiles/$_lxpu_module.lua" \
		"$_lxpu_prefix/$_lxpu_tag" "$_lxpu_prefix/.envs/$_lxpu_tag.previous"
	_lxpu_current=""
	_lxpu_remove_unprotected
	_lxpu_result="uninstalled (setup script, modulefile and links removed; removed ${#_lxpu_removed[@]} build(s)"
	if ((${#_lxpu_kept[@]})); then
		# Marks the tag as removed, so no run repairs its link to a build kept only for running jobs.
		_lxpu_say "+ write $marker"
		[[ "$_lxpu_dry_run" == 1 ]] || date -Iseconds >"$marker"
		_lxpu_result+="; kept ${#_lxpu_kept[@]} in use: $(_lxpu_joined "${_lxpu_kept[@]}"); --prune --keep 0 removes them once their jobs have ended)"
	else
		[[ "$_lxpu_dry_run" == 1 ]] || rm -f "$marker"
		_lxpu_result+=")"
	fi
}

_lxpu_rollback() {
	_lxpu_step "roll back $_lxpu_tag"
	local target from="$_lxpu_current"
	[[ -n "$from" ]] || _lxpu_fail "no published build of $_lxpu_tag in $_lxpu_prefix to roll back from"
	target="$(_lxpu_recorded_previous "$from")" || target=""
	[[ -n "$target" ]] || _lxpu_fail "$from records no rollback build (it was the first build of $_lxpu_tag here): nothing to roll back to"
	_lxpu_build_complete "$target" ||
		_lxpu_fail "the rollback build $target recorded in $from is gone or incomplete: nothing to roll back to"
	_lxpu_set_link "$_lxpu_prefix/$_lxpu_tag" ".envs/$target"
	_lxpu_current="$target"
	_lxpu_check_previous quiet
	_lxpu_entry_points_current || _lxpu_write_entry_points
	_lxpu_result="rolled back $_lxpu_prefix/$_lxpu_tag from .envs/$from to .envs/$target ($from is kept for jobs that use it; --prune removes it once unused)"
}

# ---- test switch: a small prebuilt environment --------------------------------------------------------------

# LXPU_TEST_PREBUILT=DIR (tests only): steps 3 to 8 copy DIR, a small prebuilt environment with the files those
# steps would leave (tests/install/install_harness.py makes it), instead of building; the manifest and publishing
# steps then run as always. The fault tests of publishing, links, locks and logs need no real install.
_lxpu_test_prebuilt() {
	_lxpu_step "copy the prebuilt test environment (LXPU_TEST_PREBUILT)"
	[[ -d "$LXPU_TEST_PREBUILT" ]] || _lxpu_fail "LXPU_TEST_PREBUILT=$LXPU_TEST_PREBUILT is not a directory"
	mkdir -p "$_lxpu_prefix/.envs"
	_lxpu_run cp -a "$LXPU_TEST_PREBUILT" "$_lxpu_env"
	_lxpu_py="$_lxpu_env/bin/python"
	_lxpu_write_manifest
	_lxpu_publish
	_lxpu_result="installed $_lxpu_prefix/$_lxpu_tag -> $(readlink "$_lxpu_prefix/$_lxpu_tag" || true)"
	exit 0
}

# The admin actions' options (parsed by the engine): bad input before anything is written.
_lxpu_validate_action() {
	if [[ -n "$_lxpu_keep" ]]; then
		[[ "$_lxpu_keep" =~ ^[0-9]+$ ]] || _lxpu_bad_input "--keep must be a whole number of builds, not '$_lxpu_keep'"
	fi
	if [[ -n "$_lxpu_older_than" ]]; then
		[[ "$_lxpu_older_than" =~ ^[0-9]+$ ]] || _lxpu_bad_input "--older-than must be a whole number of days, not '$_lxpu_older_than'"
	fi
	if [[ "$_lxpu_action" == prune ]]; then
		[[ -n "$_lxpu_keep$_lxpu_older_than" ]] ||
			_lxpu_bad_input "--prune needs --keep N (keep the N newest builds) or --older-than DAYS: see --help"
	elif [[ -n "$_lxpu_keep$_lxpu_older_than" ]]; then
		_lxpu_bad_input "--keep and --older-than go with --prune: add --prune"
	fi
	[[ "$_lxpu_action" == install || "$_lxpu_force" != 1 ]] ||
		_lxpu_bad_input "--force rebuilds: it does not go with --$_lxpu_action"
}
