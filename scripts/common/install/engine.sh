# shellcheck shell=bash
# lightning-xpu install engine: the bash half of the install driver behind every rendered install job
# (scripts/<site>/install_lightning_<ver>.sh). The job runs bin/lightning-xpu-admin install --site S --version V;
# lxpu_engine/cli.py reads the recipe's data (recipes/rendered/install-data.json, lxpu_engine/jobdata.py) and runs
# this file with it set as the LXPU_* variables, then lxpu_main "$@". This file defines functions only; its own
# names start with _lxpu_.
#
# Layout it builds (docs/architecture.md "Install layout"):
#   <prefix>/.envs/<tag>.<build-id>/   the environment, built at its final path (venvs are not relocatable)
#   <prefix>/<tag> -> .envs/...        published by one atomic rename of a symlink, after the smoke job passed
#   <prefix>/lightning-setup-<tag>.sh, <prefix>/modulefiles/lightning-xpu/<tag>.lua (written from the tag data by
#   lxpu_engine/tagfiles.py, temp file + rename), and
#   the shared code they call: <prefix>/.lightning-setup.lib.sh, <prefix>/modulefiles/lightning-xpu/.lightning-xpu.lua
#   <prefix>/.locks/<tag>.lock, <prefix>/.leases/, <prefix>/logs/install-<tag>-<time>.log
# Publishing, the lock, leases, link repair, cleanup and --prune/--uninstall/--rollback are Python, in lxpu_engine/
# next to this file (run by _lxpu_engine; the bash side of them is the last section of this file).

# The engine's Python package (lxpu_engine/: publishing, leases, links, cleanup, the lock, --prune/--uninstall/
# --rollback, the free-space check), next to this file.
_LXPU_ENGINE_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"

# The installer back ends (uv or pip), next to this file.
# shellcheck source=scripts/common/install/installer.sh
source "$(dirname "${BASH_SOURCE[0]}")/installer.sh"

# ---- the recipe's data, by variant ----------------------------------------------------------------------------

# _lxpu_data NAME VARIANT: the job's LXPU_<NAME>_<VARIANT>, one line per element (nothing when empty).
_lxpu_data() {
	local name="LXPU_$1_$2"
	if [[ ! "$2" =~ ^[a-z]+$ ]] || ! declare -p "$name" >/dev/null 2>&1; then
		printf 'lightning-xpu engine: the job sets no %s (variant %s; the job has: %s)\n' "$name" "$2" "$LXPU_VARIANTS" >&2
		return 1
	fi
	local all="${name}[@]" value
	for value in "${!all}"; do
		[[ -z "$value" ]] || printf '%s\n' "$value"
	done
}

lxpu_tag() { _lxpu_data TAG "$1"; }
lxpu_python_version() { _lxpu_data PYTHON "$1"; }
lxpu_requirements() { _lxpu_data REQUIREMENTS "$1"; }
# One word a line (pip options and their values).
lxpu_pip_sources() { _lxpu_data PIP_SOURCES "$1"; }
# The recipe's hashed lock, relative to the repository (nothing when the recipe has none).
lxpu_lock_file() { _lxpu_data LOCK "$1"; }
# The module name (lightning-xpu/<tag>): modulefiles/<module>.lua in the repository and in the prefix.
lxpu_module() { _lxpu_data MODULE "$1"; }
# The setup script's file name in the prefix (written by the install from the tag data below).
lxpu_setup_file() { _lxpu_data SETUP "$1"; }
# The tag's data (JSON) that its modulefile and setup script are written from (lxpu_engine/tagfiles.py).
lxpu_tag_data() { _lxpu_data TAG_DATA "$1"; }
# The modulefile body and the setup library (the code behind every thin modulefile and setup script, one for all
# tags) are LXPU_MODULE_BODY (the same path in the prefix), LXPU_SETUP_LIB and LXPU_SETUP_LIB_NAME (in the prefix).
# The site's variables, one `export NAME="${NAME:-value}"` line each.
lxpu_site_env() { [[ ${#LXPU_SITE_ENV[@]} == 0 ]] || printf '%s\n' "${LXPU_SITE_ENV[@]}"; }
# The conda layer of a variant: Python and pip only; every wheel comes from the pip step.
_lxpu_conda_yml() {
	local channel
	printf 'channels:\n'
	for channel in $LXPU_CONDA_CHANNELS; do printf '  - %s\n' "$channel"; done
	printf 'dependencies:\n  - python=%s\n  - pip\n' "$(lxpu_python_version "$1")"
}

_lxpu_usage() {
	local default_variant="$LXPU_SITE_VARIANT" variant tags="" manager="$LXPU_SITE_ENV_MANAGER"
	for variant in $LXPU_VARIANTS; do tags+="${tags:+, }$variant: $(lxpu_tag "$variant")"; done
	cat <<EOF
Usage: install_lightning_${LXPU_VERSION}.sh [options]
   or: sbatch|qsub install_lightning_${LXPU_VERSION}.sh [options]

Builds a locked Python environment with PyTorch ${LXPU_VERSION}, Lightning ${LXPU_LIGHTNING_VERSION} and lightning_xpu
for site '${LXPU_SITE}', runs a smoke job in it, and only if that passes publishes it as <prefix>/<tag> with
<prefix>/lightning-setup-<tag>.sh and the module lightning-xpu/<tag> (tags: ${tags}).
Re-running with unchanged inputs does nothing.

Options:
  --prefix DIR            install prefix (default: ${LXPU_DEFAULT_PREFIX})
  --variant V             one of: ${LXPU_VARIANTS}, or auto (default: ${default_variant}; auto = xpu
                          when an Intel GPU is present, else cpu)
  --env-manager M         conda or venv (default: ${manager}); conda needs no conda executable: the conda
                          layer is solved and linked by py-rattler (pinned, hash-checked, in <prefix>/.tools)
  --conda-exe PATH        build the conda layer with this conda's \`conda env create\` instead of py-rattler
  --conda-channel C       conda channels (a mirror or a local channel; space-separated) instead of the site's
                          ($LXPU_CONDA_CHANNELS); also LIGHTNING_XPU_CONDA_CHANNELS, else .condarc's channels
  --base-python PATH      build a venv with --system-site-packages over this Python, which must already
                          have torch; packages it already has are used as they are (recorded), not reinstalled
  --source DIR            the lightning-xpu repository (default: found from SLURM_SUBMIT_DIR or
                          PBS_O_WORKDIR under a scheduler, else from this script's location or the
                          current directory)
  --pip-source S          recipe (default): the recipe's package indexes; system: this machine's own pip
                          configuration (no index options are passed)
  --index-url URL         use this package index instead of the recipe's
  --extra-index-url URL   an extra package index (repeatable)
  --wheelhouse DIR        offline: install only from wheels in DIR (--no-index --find-links DIR)
  --installer I           uv, pip or auto (default: auto = uv, pinned and hash-checked, bootstrapped into
                          <prefix>/.tools; pip, with a note saying why, where uv cannot be had)
  --lock-timeout SECONDS  how long to wait for another install of the same tag (default: 1800)
  --shared-group GROUP    shared install: the tree is made group GROUP, group-readable, read-only
  --force                 rebuild even when the inputs are unchanged
  --rollback              publish again the build this one replaced (recorded in it); both are kept
  --uninstall             remove this tag: setup script, modulefile, links and every build no job uses
  --prune                 remove old builds of this tag, with --keep N (keep the N newest) and/or
                          --older-than DAYS; never the published one, its rollback build or one in use
  --dry-run               print every step and command; change nothing
  -h, --help              this help

Environment (the options win): LIGHTNING_XPU_INSTALL_ARGS (options, split on spaces; e.g. for qsub -v),
LIGHTNING_XPU_PIP_SOURCE, LIGHTNING_XPU_INDEX_URL,
LIGHTNING_XPU_EXTRA_INDEX_URL (space-separated), LIGHTNING_XPU_WHEELHOUSE, LIGHTNING_XPU_INSTALLER,
LIGHTNING_XPU_UV_CACHE_DIR (uv's cache; default <prefix>/.cache/uv, shared by every version in the prefix),
LIGHTNING_XPU_MIN_FREE_GIB (free space required under the prefix), LIGHTNING_XPU_MIN_FREE_INODES (free files
required).
LIGHTNING_XPU_PACK=0: no packed image for node-local staging (lightning-xpu-stage); LIGHTNING_XPU_PACK_FORMAT
tar.zst or tar.gz (default: tar.zst where zstd exists); LIGHTNING_XPU_PACK_CHECK_DIR where the image is unpacked
once to check it (default: /dev/shm where it has room, else \$TMPDIR or /tmp).
Builds are never deleted by an install: only --prune and --uninstall remove them, and never one that a job
uses (module load and the setup script record a lease in <prefix>/.leases). After publishing, a failed
clean-up is a WARNING, not a failure: the new build is live.
Exit status: 0 installed, already installed, or the action done; 1 a step failed (see the log); 2 bad input.
EOF
}

# ---- messages -----------------------------------------------------------------------------------------------

_lxpu_say() { printf '%s\n' "$*"; }

_lxpu_warn() { printf 'WARNING: %s\n' "$*"; }

# Bad input: one line naming the fix, exit 2. Used before anything is written.
_lxpu_bad_input() {
	printf 'install_lightning_%s.sh: error: %s\n' "$LXPU_VERSION" "$*" >&2
	_lxpu_fail_reason="bad input: $*"
	exit 2
}

# A step failed: the exit trap writes the last log line from the reason.
_lxpu_fail() {
	_lxpu_fail_reason="$*"
	printf 'ERROR: %s\n' "$*"
	exit 1
}

_lxpu_quote() {
	local arg out=""
	for arg in "$@"; do
		out+="$(printf '%q' "$arg") "
	done
	printf '%s' "${out% }"
}

# Print a command, then run it (unless --dry-run). The lock's file descriptor is closed for the command, so
# that a stray child of a killed install never keeps the lock.
_lxpu_run() {
	printf '+ %s\n' "$(_lxpu_quote "$@")"
	[[ "$_lxpu_dry_run" == 1 ]] && return 0
	local status=0
	if [[ -n "${_lxpu_lock_fd:-}" ]]; then
		"$@" {_lxpu_lock_fd}>&- || status=$?
	else
		"$@" || status=$?
	fi
	[[ "$status" == 0 ]] || _lxpu_fail_reason="exit status $status from: $(_lxpu_quote "$@")"
	return "$status"
}

# Write stdin to PATH through a temporary file in the same directory tree and one rename.
# Leaves PATH untouched (mtime included) when the content is already identical.
_lxpu_write_atomic() {
	local path="$1" mode="$2" tmp
	printf '+ write %s\n' "$(_lxpu_quote "$path")"
	if [[ "$_lxpu_dry_run" == 1 ]]; then
		cat >/dev/null
		return 0
	fi
	mkdir -p "$_lxpu_prefix/.envs"
	tmp="$_lxpu_prefix/.envs/.tmp.$_lxpu_tag.$$.$(basename "$path")"
	cat >"$tmp"
	chmod "$mode" "$tmp"
	if [[ -f "$path" ]] && cmp -s "$tmp" "$path"; then
		rm -f "$tmp"
		return 0
	fi
	mkdir -p "$(dirname "$path")"
	mv -f "$tmp" "$path"
}

_lxpu_now_us() { local t="$EPOCHREALTIME"; printf '%s' "${t/[.,]/}"; }

_lxpu_seconds_since() {
	local us=$(($(_lxpu_now_us) - $1))
	printf '%d.%d' $((us / 1000000)) $(((us % 1000000) / 100000))
}

# ---- steps and the last log line ----------------------------------------------------------------------------

# _lxpu_step KEY: start the next step; its title is the declared one (lxpu_engine/steps.py, LXPU_STEP_TITLES).
_lxpu_step() {
	_lxpu_step_end
	_lxpu_step_n=$((_lxpu_step_n + 1))
	local title="${LXPU_STEP_TITLES[$1]}"
	title="${title//\{env_manager\}/$_lxpu_env_manager}"
	_lxpu_step_name="${title//\{tag\}/$_lxpu_tag}"
	_lxpu_step_t0="$(_lxpu_now_us)"
	printf '[%d/%d] %s ...\n' "$_lxpu_step_n" "$_lxpu_step_total" "$_lxpu_step_name"
}

_lxpu_step_end() {
	[[ -z "$_lxpu_step_name" ]] && return 0
	local seconds
	seconds="$(_lxpu_seconds_since "$_lxpu_step_t0")"
	printf '[%d/%d] %s done (%s s)\n' "$_lxpu_step_n" "$_lxpu_step_total" "$_lxpu_step_name" "$seconds"
	_lxpu_timings+=("$_lxpu_step_n"$'\t'"$_lxpu_step_name"$'\t'"$seconds")
	_lxpu_step_name=""
}

_lxpu_on_error() {
	[[ -n "$_lxpu_fail_reason" ]] || _lxpu_fail_reason="command failed (exit $1): $2"
}

_lxpu_on_signal() {
	_lxpu_fail_reason="interrupted by SIG$1"
	trap - "$1"
	exit "$2"
}

_lxpu_on_exit() {
	local status=$? total where
	set +e
	trap - ERR
	_lxpu_apply_updates
	total="$(_lxpu_seconds_since "$_lxpu_t0")"
	if [[ "$_lxpu_result" == help ]]; then
		:
	elif [[ "$status" == 0 ]]; then
		_lxpu_step_end
		printf 'lightning-xpu %s: %s (total %s s)\n' "${_lxpu_tag:-$LXPU_VERSION}" "$(_lxpu_final_result)" "$total"
	elif [[ "$_lxpu_published" == 1 && "$_lxpu_dry_run" != 1 ]]; then
		# The new build is live (lxpu_engine/publish.py): never FAILED.
		_lxpu_engine publish after-publish-failure "$status" "$total"
		status=$?
		_lxpu_cleanup_failed_build
	elif [[ "$status" != 2 || -n "$_lxpu_step_name" ]]; then
		where="before the first step"
		[[ -n "$_lxpu_step_name" ]] && where="at step [$_lxpu_step_n/$_lxpu_step_total] $_lxpu_step_name"
		_lxpu_cleanup_failed_build
		[[ -z "$_lxpu_log" ]] || printf 'log: %s\n' "$_lxpu_log"
		printf 'lightning-xpu %s: FAILED %s after %s s: %s\n' "${_lxpu_tag:-$LXPU_VERSION}" "$where" "$total" \
			"${_lxpu_fail_reason:-exit status $status}"
	fi
	if [[ -n "$_lxpu_tee_pid" ]]; then
		# Close the pipe to tee and wait for it, so the log's last line is on disk before we exit.
		exec 1>&"$_lxpu_stdout_fd" 2>&"$_lxpu_stderr_fd"
		wait "$_lxpu_tee_pid" 2>/dev/null
	fi
	[[ -z "$_lxpu_engine_python" ]] || _lxpu_engine publish finish "$status"
	[[ -z "$_lxpu_state_dir" ]] || rm -rf "$_lxpu_state_dir"
	exit "$status"
}

_lxpu_start_log() {
	mkdir -p "$_lxpu_prefix/logs"
	_lxpu_log="$_lxpu_prefix/logs/install-$_lxpu_tag-$(date +%Y%m%dT%H%M%S)-$$.log"
	exec {_lxpu_stdout_fd}>&1 {_lxpu_stderr_fd}>&2
	# tee ignores the signals that stop the install, so the last line ("FAILED ... interrupted") still
	# reaches the log; it ends when the exit trap closes the pipe.
	exec > >(
		trap '' INT TERM HUP
		exec tee -a "$_lxpu_log"
	) 2>&1
	_lxpu_tee_pid=$!
}

# ---- inputs -------------------------------------------------------------------------------------------------

_lxpu_need_value() {
	[[ $# -ge 2 && -n "$2" ]] || _lxpu_bad_input "$1 needs a value: see --help"
}

_lxpu_parse_args() {
	local opt value
	while [[ $# -gt 0 ]]; do
		opt="$1"
		value=""
		if [[ "$opt" == --*=* ]]; then
			value="${opt#*=}"
			opt="${opt%%=*}"
			set -- "$opt" "$value" "${@:2}"
		fi
		case "$opt" in
		-h | --help)
			_lxpu_usage
			_lxpu_result="help"
			exit 0
			;;
		--force) _lxpu_force=1 ;;
		--dry-run) _lxpu_dry_run=1 ;;
		--prune | --uninstall | --rollback)
			[[ "$_lxpu_action" == install || "$_lxpu_action" == "${opt#--}" ]] ||
				_lxpu_bad_input "--$_lxpu_action and $opt cannot be combined: pick one"
			_lxpu_action="${opt#--}"
			;;
		--prefix | --variant | --env-manager | --base-python | --source | --pip-source | --index-url | \
			--extra-index-url | --wheelhouse | --lock-timeout | --shared-group | --keep | --older-than | --installer | \
			--conda-exe | --conda-channel)
			_lxpu_need_value "$@"
			case "$opt" in
			--prefix) _lxpu_prefix="$2" ;;
			--variant) _lxpu_variant="$2" ;;
			--env-manager) _lxpu_env_manager="$2" ;;
			--base-python) _lxpu_base_python="$2" ;;
			--source) _lxpu_source="$2" ;;
			--pip-source) _lxpu_pip_source="$2" ;;
			--index-url) _lxpu_index_url="$2" ;;
			--extra-index-url) _lxpu_extra_index_urls+=("$2") ;;
			--wheelhouse) _lxpu_wheelhouse="$2" ;;
			--lock-timeout) _lxpu_lock_timeout="$2" ;;
			--shared-group) _lxpu_shared_group="$2" ;;
			--keep) _lxpu_keep="$2" ;;
			--older-than) _lxpu_older_than="$2" ;;
			--installer) _lxpu_installer="$2" ;;
			--conda-exe) _lxpu_conda_exe="$2" ;;
			--conda-channel) _lxpu_conda_channel="$2" ;;
			esac
			shift
			;;
		*) _lxpu_bad_input "unknown argument '$opt': see --help" ;;
		esac
		shift
	done
}

# Only a leading ~ or a literal $HOME is expanded (the recipe's default prefix is written that way).
_lxpu_expand_home() {
	local path="$1"
	# shellcheck disable=SC2016,SC2088 # the patterns are literal on purpose
	case "$path" in
	"~") path="$HOME" ;;
	"~/"*) path="$HOME/${path#"~/"}" ;;
	'$HOME') path="$HOME" ;;
	'$HOME/'*) path="$HOME/${path#'$HOME/'}" ;;
	'${HOME}/'*) path="$HOME/${path#'${HOME}/'}" ;;
	esac
	[[ "$path" == /* ]] || path="$PWD/$path"
	printf '%s' "${path%/}"
}

_lxpu_word_in() {
	local word="$1" item
	shift
	for item in "$@"; do
		[[ "$item" == "$word" ]] && return 0
	done
	return 1
}

# An Intel display/compute device in sysfs (vendor 0x8086, PCI class 0x03xxxx).
_lxpu_have_intel_gpu() {
	local dev
	for dev in /sys/class/drm/card*/device; do
		[[ -r "$dev/vendor" && -r "$dev/class" ]] || continue
		[[ "$(<"$dev/vendor")" == 0x8086 && "$(<"$dev/class")" == 0x03* ]] && return 0
	done
	return 1
}

_lxpu_is_repo() { [[ -f "$1/pyproject.toml" && -d "$1/lightning_xpu" ]]; }

# The job's locator found the repository (LXPU_SOURCE: --source DIR, the submit directory under a scheduler,
# since sbatch/qsub run a spool copy of the job, else the job's directory or the current one). A --source is
# checked here, so that a wrong one is named even when the locator found a repository above it.
_lxpu_resolve_source() {
	if [[ -n "$_lxpu_source" ]]; then
		[[ -d "$_lxpu_source" ]] || _lxpu_bad_input "--source $_lxpu_source is not a directory"
		_lxpu_is_repo "$_lxpu_source" ||
			_lxpu_bad_input "--source $_lxpu_source is not the lightning-xpu repository (no pyproject.toml and lightning_xpu/)"
		_lxpu_source="$(cd "$_lxpu_source" && pwd -P)"
		return 0
	fi
	_lxpu_source="${LXPU_SOURCE:-}"
	[[ -z "$_lxpu_source" ]] || ! _lxpu_is_repo "$_lxpu_source" || return 0
	_lxpu_bad_input "cannot find the lightning-xpu repository (${_lxpu_source:-LXPU_SOURCE is not set}): submit from inside the repository or pass --source DIR"
}

_lxpu_resolve_pip_sources() {
	local line
	_lxpu_pip_options=()
	if [[ -n "$_lxpu_wheelhouse" ]]; then
		[[ -z "$_lxpu_index_url" && ${#_lxpu_extra_index_urls[@]} == 0 ]] ||
			_lxpu_bad_input "--wheelhouse cannot be combined with --index-url/--extra-index-url: pick one source"
		[[ -d "$_lxpu_wheelhouse" ]] || _lxpu_bad_input "--wheelhouse $_lxpu_wheelhouse is not a directory"
		_lxpu_wheelhouse="$(cd "$_lxpu_wheelhouse" && pwd -P)"
		_lxpu_sources_mode="wheelhouse"
		_lxpu_pip_options=(--no-index --find-links "$_lxpu_wheelhouse")
		return 0
	fi
	if [[ -n "$_lxpu_index_url" || ${#_lxpu_extra_index_urls[@]} -gt 0 ]]; then
		[[ "$_lxpu_pip_source" != system ]] ||
			_lxpu_bad_input "--pip-source system uses this machine's pip configuration only: drop --index-url/--extra-index-url, or use --pip-source recipe"
		for line in "$_lxpu_index_url" "${_lxpu_extra_index_urls[@]}"; do
			[[ -z "$line" || "$line" == *://* ]] ||
				_lxpu_bad_input "package index '$line' is not a URL: give e.g. https://host/simple or file:///path/simple"
		done
		_lxpu_sources_mode="custom"
		[[ -z "$_lxpu_index_url" ]] || _lxpu_pip_options+=(--index-url "$_lxpu_index_url")
		for line in "${_lxpu_extra_index_urls[@]}"; do
			_lxpu_pip_options+=(--extra-index-url "$line")
		done
		return 0
	fi
	case "$_lxpu_pip_source" in
	system) _lxpu_sources_mode="system" ;;
	recipe)
		_lxpu_sources_mode="recipe"
		mapfile -t _lxpu_pip_options < <(lxpu_pip_sources "$_lxpu_variant")
		;;
	*) _lxpu_bad_input "--pip-source must be recipe or system, not '$_lxpu_pip_source'" ;;
	esac
}

_lxpu_validate() {
	local value
	# Sources may also come from the environment; the options win.
	[[ -n "$_lxpu_pip_source" ]] || _lxpu_pip_source="${LIGHTNING_XPU_PIP_SOURCE:-recipe}"
	[[ -n "$_lxpu_index_url" ]] || _lxpu_index_url="${LIGHTNING_XPU_INDEX_URL:-}"
	if [[ ${#_lxpu_extra_index_urls[@]} == 0 && -n "${LIGHTNING_XPU_EXTRA_INDEX_URL:-}" ]]; then
		read -r -a _lxpu_extra_index_urls <<<"$LIGHTNING_XPU_EXTRA_INDEX_URL"
	fi
	[[ -n "$_lxpu_wheelhouse" ]] || _lxpu_wheelhouse="${LIGHTNING_XPU_WHEELHOUSE:-}"

	# Variant and tag.
	local variants groups
	read -r -a variants <<<"$LXPU_VARIANTS"
	[[ -n "$_lxpu_variant" ]] || _lxpu_variant="$LXPU_SITE_VARIANT"
	if [[ "$_lxpu_variant" == auto ]]; then
		if _lxpu_have_intel_gpu && _lxpu_word_in xpu "${variants[@]}"; then
			_lxpu_variant=xpu
		else
			_lxpu_variant=cpu
			_lxpu_auto_cpu_note=1
		fi
	fi
	_lxpu_word_in "$_lxpu_variant" xpu cpu cuda auto ||
		_lxpu_bad_input "--variant must be xpu, cpu, cuda or auto, not '$_lxpu_variant'"
	_lxpu_word_in "$_lxpu_variant" "${variants[@]}" ||
		_lxpu_bad_input "PyTorch $LXPU_VERSION has no '$_lxpu_variant' variant: pass --variant one of: $LXPU_VARIANTS"
	_lxpu_tag="$(lxpu_tag "$_lxpu_variant")"

	# Prefix.
	[[ -n "$_lxpu_prefix" ]] || _lxpu_prefix="$LXPU_DEFAULT_PREFIX"
	_lxpu_prefix="$(_lxpu_expand_home "$_lxpu_prefix")"
	[[ "$_lxpu_prefix" != *:* && "$_lxpu_prefix" != *$'\n'* ]] ||
		_lxpu_bad_input "--prefix must not contain ':' or a newline (it goes into MODULEPATH): pick another directory"
	[[ ! -e "$_lxpu_prefix" || -d "$_lxpu_prefix" ]] || _lxpu_bad_input "--prefix $_lxpu_prefix exists and is not a directory"
	! _lxpu_is_repo "$_lxpu_prefix" ||
		_lxpu_bad_input "--prefix $_lxpu_prefix is a lightning-xpu repository checkout: install into another directory (e.g. --prefix $_lxpu_prefix-install)"
	if [[ -e "$_lxpu_prefix/$_lxpu_tag" && ! -L "$_lxpu_prefix/$_lxpu_tag" ]]; then
		_lxpu_bad_input "$_lxpu_prefix/$_lxpu_tag exists and is not a symlink made by this installer: move it away or pick another --prefix"
	fi
	value="$_lxpu_prefix"
	while [[ ! -e "$value" ]]; do value="$(dirname "$value")"; done
	[[ -w "$value" ]] || _lxpu_bad_input "cannot write to $value (for --prefix $_lxpu_prefix): pick a prefix you can write"

	# Lock timeout, shared group.
	[[ "$_lxpu_lock_timeout" =~ ^[0-9]+$ ]] ||
		_lxpu_bad_input "--lock-timeout must be a whole number of seconds, not '$_lxpu_lock_timeout'"
	if [[ -n "$_lxpu_shared_group" ]]; then
		getent group "$_lxpu_shared_group" >/dev/null ||
			_lxpu_bad_input "--shared-group $_lxpu_shared_group: no such group (see getent group)"
		read -r -a groups <<<"$(id -Gn)"
		[[ "$(id -u)" == 0 ]] || _lxpu_word_in "$_lxpu_shared_group" "${groups[@]}" ||
			_lxpu_bad_input "--shared-group $_lxpu_shared_group: you are not a member of that group (see id -Gn)"
	fi

	_lxpu_validate_environment
}

# Environment manager and Python. The site's modules are loaded first (a dry run loads them too: it changes
# no file), so that a module can provide conda or Python; then the site's Python module, for a venv.
_lxpu_validate_environment() {
	local value
	_lxpu_python_version="$(lxpu_python_version "$_lxpu_variant")"
	_lxpu_word_in "${_lxpu_env_manager:-auto}" auto conda venv ||
		_lxpu_bad_input "--env-manager must be conda or venv, not '$_lxpu_env_manager'"
	_lxpu_load_modules "site module" "$LXPU_SITE_MODULES"
	if [[ -n "$_lxpu_base_python" ]]; then
		[[ "$_lxpu_env_manager" != conda ]] ||
			_lxpu_bad_input "--base-python builds a venv over that Python: drop --env-manager conda"
		_lxpu_env_manager=venv
		_lxpu_env_why="--base-python given: a venv over it"
		value="$(command -v -- "$_lxpu_base_python" || true)"
		[[ -n "$value" && -x "$value" ]] || _lxpu_bad_input "--base-python $_lxpu_base_python is not an executable"
		_lxpu_base_python="$value"
		_lxpu_base_info="$("$_lxpu_base_python" -c 'import importlib.metadata as m, sys
print("%d.%d" % sys.version_info[:2], m.version("torch"), sys.prefix != sys.base_prefix)' 2>/dev/null)" ||
			_lxpu_bad_input "--base-python $_lxpu_base_python has no torch: pick a Python with torch installed, or drop --base-python"
		read -r _lxpu_python_version _lxpu_base_torch _lxpu_base_is_venv <<<"$_lxpu_base_info"
		local base_minor
		base_minor="$(printf '%s' "${_lxpu_base_torch%%+*}" | cut -d. -f1,2)"
		[[ "$base_minor" == "$LXPU_VERSION" ]] ||
			_lxpu_bad_input "--base-python $_lxpu_base_python has torch $_lxpu_base_torch, not PyTorch $LXPU_VERSION: run install_lightning_$base_minor.sh with it, or pick a Python with torch $LXPU_VERSION"
		_lxpu_python="$_lxpu_base_python"
		return 0
	fi
	case "${_lxpu_env_manager:-auto}" in
	auto)
		if [[ "$LXPU_SITE_ENV_MANAGER" == conda ]]; then
			_lxpu_env_manager=conda
			_lxpu_env_why="site $LXPU_SITE's default (py-rattler: no conda executable needed)"
		else
			_lxpu_env_manager=venv
			_lxpu_env_why="site $LXPU_SITE's default"
		fi
		;;
	conda)
		_lxpu_env_why="--env-manager conda"
		;;
	venv) _lxpu_env_why="--env-manager venv" ;;
	esac
	if [[ -n "${_lxpu_conda_exe:-}" ]]; then
		[[ "$_lxpu_env_manager" == conda ]] ||
			_lxpu_bad_input "--conda-exe builds the conda layer: add --env-manager conda, or drop --conda-exe"
		value="$(command -v -- "$_lxpu_conda_exe" || true)"
		[[ -n "$value" && -x "$value" ]] || _lxpu_bad_input "--conda-exe $_lxpu_conda_exe is not an executable: pass the path of your conda, or drop --conda-exe"
		_lxpu_conda_exe="$value" _lxpu_env_why+=" (with $value)"
	fi
	[[ "$_lxpu_env_manager" == venv ]] || return 0
	_lxpu_load_modules "Python module" "$LXPU_SITE_PYTHON_MODULE"
	_lxpu_python="$(command -v "python$_lxpu_python_version" || true)"
	[[ -n "$_lxpu_python" ]] && return 0
	value="python$_lxpu_python_version not found on PATH${LXPU_SITE_PYTHON_MODULE:+ after loading $LXPU_SITE_PYTHON_MODULE} (the $_lxpu_variant variant needs Python $_lxpu_python_version): load a Python $_lxpu_python_version module or pass --base-python PATH"
	[[ "$_lxpu_dry_run" == 1 ]] || _lxpu_bad_input "$value"
	_lxpu_warnings+=("$value")
	_lxpu_python="python$_lxpu_python_version"
}

# _lxpu_load_modules WHAT "NAME...": load Lmod modules, recording for step 1 whether each exists. A module that
# does not exist is bad input, except in a dry run, which reports it and goes on.
_lxpu_load_modules() {
	local what="$1" names=() name init="${LMOD_PKG:-/usr/share/lmod/lmod}/init/bash"
	read -r -a names <<<"$2"
	((${#names[@]})) || return 0
	if ! declare -F module >/dev/null; then
		if [[ ! -f "$init" ]]; then
			_lxpu_module_report+=("${names[*]}: cannot tell (no module command; Lmod's $init is missing)")
			[[ "$_lxpu_dry_run" == 1 ]] ||
				_lxpu_bad_input "site $LXPU_SITE needs the modules '${names[*]}' but Lmod's module command is missing: run from a login shell of the site"
			return 0
		fi
		# shellcheck disable=SC1090
		source "$init"
	fi
	for name in "${names[@]}"; do
		if module is-avail "$name" >/dev/null 2>&1; then
			printf '+ module load %s\n' "$name"
			module load "$name" >/dev/null 2>&1 || _lxpu_bad_input "$what $name exists but 'module load $name' failed: try it in a login shell"
			_lxpu_module_report+=("$name: loaded ($what)")
		else
			_lxpu_module_report+=("$name: NOT FOUND ($what; module avail $name shows nothing)")
			[[ "$_lxpu_dry_run" == 1 ]] ||
				_lxpu_bad_input "$what $name does not exist here (module avail $name): run on a machine of site $LXPU_SITE, or change recipes/sites/$LXPU_SITE.toml"
		fi
	done
}

# The repository and the files the recipe needs from it.
_lxpu_validate_repository() {
	local value
	_lxpu_resolve_source
	_lxpu_module="$(lxpu_module "$_lxpu_variant")"
	_lxpu_setup_file="$(lxpu_setup_file "$_lxpu_variant")"
	for value in "$_lxpu_source/$LXPU_MODULE_BODY" "$_lxpu_source/$LXPU_SETUP_LIB"; do
		[[ -f "$value" ]] ||
			_lxpu_bad_input "$value is missing: render it with 'python recipes/render.py render --all' or pass --source"
	done
	[[ -f "$_lxpu_source/scripts/common/toy_fit.py" ]] ||
		_lxpu_bad_input "$_lxpu_source/scripts/common/toy_fit.py is missing: pass the repository with --source"
	_lxpu_lock_path="$(lxpu_lock_file "$_lxpu_variant")"
	if [[ -n "$_lxpu_lock_path" ]]; then
		_lxpu_lock_path="$_lxpu_source/$_lxpu_lock_path"
		[[ -f "$_lxpu_lock_path" ]] ||
			_lxpu_bad_input "the recipe's lock file $_lxpu_lock_path is missing: run 'python recipes/render.py lock' or pass --source"
		# A lock made from other recipe pins would install another stack than the job says (issue 19).
		local pins=()
		mapfile -t pins < <(lxpu_requirements "$_lxpu_variant")
		value="$(python3 -I "$_lxpu_source/scripts/common/install/lockbind.py" --lock "$_lxpu_lock_path" \
			--python "$(lxpu_python_version "$_lxpu_variant")" -- "${pins[@]}" 2>&1)" || _lxpu_bad_input "$value"
	fi
	_lxpu_resolve_pip_sources
	_lxpu_installer_validate
}

# ---- inputs hash --------------------------------------------------------------------------------------------

# Everything that decides what gets built. Equal hash + a published manifest with it = nothing to do.
_lxpu_hash_inputs() {
	{
		printf 'recipe %s %s %s %s\n' "$LXPU_RECIPE_HASH" "$LXPU_VERSION" "$LXPU_SITE" "$_lxpu_variant"
		printf 'env-manager %s python %s\n' "$_lxpu_env_manager" "$_lxpu_python_version"
		printf 'base-python %s %s\n' "$_lxpu_base_python" "${_lxpu_base_torch:-}"
		printf 'sources %s %s\n' "$_lxpu_sources_mode" "$(_lxpu_quote "${_lxpu_pip_options[@]}")"
		printf 'shared-group %s\n' "$_lxpu_shared_group"
		printf -- '--- requirements\n'
		lxpu_requirements "$_lxpu_variant"
		if [[ -n "$_lxpu_lock_path" ]]; then
			printf -- '--- lock\n'
			cat "$_lxpu_lock_path"
		fi
		if [[ "$_lxpu_env_manager" == conda ]]; then
			printf -- '--- conda layer\n'
			_lxpu_conda_yml "$_lxpu_variant"
		fi
		printf -- '--- site\n%s\n' "$LXPU_SITE_MODULES"
		lxpu_site_env
		printf -- '--- tag data\n'
		lxpu_tag_data "$_lxpu_variant"
		printf -- '--- engine\n'
		local functions
		mapfile -t functions < <(compgen -A function _lxpu_)
		declare -f lxpu_main "${functions[@]}"
		printf -- '--- repository files\n'
		(
			cd "$_lxpu_source"
			local item items=()
			for item in lightning_xpu pyproject.toml README.md README.rst LICENSE setup.cfg setup.py scripts/common; do
				[[ -e "$item" ]] && items+=("$item")
			done
			find "${items[@]}" -type f ! -name '*.py[co]' ! -path '*/__pycache__/*' -print0 |
				LC_ALL=C sort -z | xargs -0 sha256sum
		)
	} | sha256sum | cut -d' ' -f1
}

_lxpu_repo_commit() {
	local commit dirty=""
	if commit="$(git -C "$_lxpu_source" rev-parse HEAD 2>/dev/null)"; then
		[[ -z "$(git -C "$_lxpu_source" status --porcelain 2>/dev/null)" ]] || dirty="-dirty"
		printf '%s%s' "$commit" "$dirty"
	else
		printf 'unknown'
	fi
}

# ---- the steps ----------------------------------------------------------------------------------------------

_lxpu_step_check() {
	_lxpu_step check
	if [[ "$_lxpu_auto_cpu_note" == 1 ]]; then
		_lxpu_say "################################################################################"
		_lxpu_say "NOTE: no Intel GPU found on this machine: installing the CPU variant of PyTorch"
		_lxpu_say "      $LXPU_VERSION as module lightning-xpu/$_lxpu_tag (NOT the XPU build)."
		_lxpu_say "      Pass --variant xpu to build the XPU environment anyway."
		_lxpu_say "################################################################################"
	fi
	_lxpu_say "recipe:      PyTorch $LXPU_VERSION, Lightning $LXPU_LIGHTNING_VERSION, site $LXPU_SITE, variant $_lxpu_variant (hash ${LXPU_RECIPE_HASH:0:12})"
	[[ -z "${LXPU_LEGACY:-}" ]] || _lxpu_say "legacy:      $LXPU_LEGACY"
	_lxpu_say "prefix:      $_lxpu_prefix (tag $_lxpu_tag)"
	_lxpu_say "repository:  $_lxpu_source (commit $_lxpu_commit)"
	_lxpu_say "environment: $_lxpu_env_manager ($_lxpu_env_why), Python $_lxpu_python_version${_lxpu_python:+ ($_lxpu_python)}"
	[[ -z "$_lxpu_base_python" ]] || _lxpu_say "base python: $_lxpu_base_python (torch $_lxpu_base_torch)"
	_lxpu_say_pins
	_lxpu_say "sources:     $_lxpu_sources_mode${_lxpu_pip_options[*]:+ $(_lxpu_quote "${_lxpu_pip_options[@]}")}${_lxpu_lock_path:+; lock $_lxpu_lock_path}"
	local line
	for line in "${_lxpu_module_report[@]}"; do _lxpu_say "module:      $line"; done
	[[ ${#_lxpu_module_report[@]} -gt 0 || -n "$LXPU_SITE_MODULES_LEFT_OUT" ]] || _lxpu_say "module:      none to load"
	[[ -z "$LXPU_SITE_MODULES_LEFT_OUT" ]] || _lxpu_say "module:      left out for PyTorch $LXPU_VERSION: $LXPU_SITE_MODULES_LEFT_OUT"
	if [[ "$_lxpu_variant" == xpu ]] && ! _lxpu_have_intel_gpu; then
		_lxpu_warnings+=("the xpu variant needs an Intel GPU and none is visible here (/sys/class/drm): the smoke job (step 8) fails unless this runs on a GPU node; --variant cpu builds without one")
	fi
	for line in "${_lxpu_warnings[@]}"; do _lxpu_warn "$line"; done
	_lxpu_say "inputs hash: $_lxpu_inputs_hash"
	_lxpu_say "host:        ${HOSTNAME:-$(uname -n)}${SLURM_JOB_ID:+ (Slurm job $SLURM_JOB_ID)}${PBS_JOBID:+ (PBS job $PBS_JOBID)}"
	[[ -z "$_lxpu_unset_vars" ]] || _lxpu_say "unset for the install:$_lxpu_unset_vars"

	_lxpu_engine publish check-space || exit
}

# The pins the install resolves: the recipe's requirements and pinned build tools, or the lock's entries.
_lxpu_say_pins() {
	local pins=() tools=()
	mapfile -t pins < <(lxpu_requirements "$_lxpu_variant")
	tools=("${LXPU_BUILD_TOOLS[@]}")
	if [[ -n "$_lxpu_lock_path" ]]; then
		_lxpu_say "pins:        ${pins[*]}, with every dependency from the lock: $(grep -c '^[A-Za-z0-9]' "$_lxpu_lock_path") packages, sha256-checked"
		_lxpu_say "build tools: ${tools[*]} (from the lock, sha256-checked)"
	else
		_lxpu_say "pins:        ${pins[*]} (no lock: dependencies resolved by pip, recorded in the manifest)"
		_lxpu_say "build tools: ${tools[*]} (pinned, no hash: the recipe has no lock)"
	fi
}

# True (0) when the published install has exactly these inputs.
_lxpu_published_is_current() {
	local root="$_lxpu_prefix/$_lxpu_tag" recorded
	[[ -L "$root" ]] || return 1
	if [[ ! -x "$root/bin/python" ]] || ! _lxpu_engine publish complete "$_lxpu_current"; then
		_lxpu_say "the published build has no bin/python, or its manifest.json is missing or truncated: rebuilding"
		return 1
	fi
	recorded="$("$root/bin/python" -c 'import json, sys
m = json.load(open(sys.argv[1]))
print(m.get("inputs_hash", "") if m.get("status") == "installed" else "")' "$root/manifest.json" 2>/dev/null)" || return 1
	[[ "$recorded" == "$_lxpu_inputs_hash" ]]
}

_lxpu_create_env() {
	_lxpu_step create
	_lxpu_say "build: $_lxpu_env"
	[[ "$_lxpu_dry_run" == 1 ]] || mkdir -p "$_lxpu_prefix/.envs"
	_lxpu_installer_setup
	if [[ "$_lxpu_env_manager" == conda ]]; then
		# conda builds the conda layer only; the pip layer goes through the same pip step as a venv, so
		# sources, locks and hashes are handled once.
		# lxpu_engine/conda_layer.py: py-rattler in a child process (or --conda-exe), every package's sha256
		# checked, built beside the final path and renamed into place.
		local args=(create "$_lxpu_env" "--python=$_lxpu_python_version") channel option
		for channel in $LXPU_CONDA_CHANNELS; do args+=("--channel=$channel"); done
		[[ -z "${_lxpu_conda_channel:-}" ]] || args+=("--conda-channel=$_lxpu_conda_channel")
		[[ -z "${_lxpu_conda_exe:-}" ]] || args+=("--conda-exe=$_lxpu_conda_exe")
		[[ ! -f "$_lxpu_source/recipes/locks/conda/python-$_lxpu_python_version.txt" ]] ||
			args+=("--lock=$_lxpu_source/recipes/locks/conda/python-$_lxpu_python_version.txt")
		for option in "${_lxpu_pip_options[@]}"; do args+=("--pip-option=$option"); done
		if [[ "$_lxpu_dry_run" == 1 ]]; then
			_lxpu_say "+ python -m lxpu_engine.conda_layer $(_lxpu_quote "${args[@]}")"
		else
			_lxpu_engine_on "$_lxpu_engine_python" conda_layer "${args[@]}" ||
				_lxpu_fail "the conda layer could not be built (the line above says why)"
		fi
	elif [[ -n "$_lxpu_base_python" ]]; then
		_lxpu_installer_create_venv "$_lxpu_env" --system-site-packages
		if [[ "$_lxpu_base_is_venv" == True ]]; then
			# A venv's --system-site-packages means its base interpreter's, not the base venv's: point a .pth
			# file at the base venv's site-packages so its torch is seen.
			_lxpu_run_py_to "$_lxpu_env/lib/python$_lxpu_python_version/site-packages/_lightning_xpu_base.pth" \
				"$_lxpu_base_python" -c 'import site; print("\n".join(site.getsitepackages()))'
		fi
	else
		_lxpu_installer_create_venv "$_lxpu_env"
	fi
	_lxpu_py="$_lxpu_env/bin/python"
	_lxpu_site_packages="$_lxpu_env/lib/python$_lxpu_python_version/site-packages"
	[[ "$_lxpu_dry_run" == 1 ]] && return 0
	[[ -x "$_lxpu_py" ]] || _lxpu_fail "$_lxpu_env_manager did not create $_lxpu_py"
	mkdir -p "$_lxpu_env/share/lightning-xpu"
}

# Run a command and write its stdout to a file (printed as one step).
_lxpu_run_py_to() {
	local out="$1"
	shift
	printf '+ %s > %s\n' "$(_lxpu_quote "$@")" "$(_lxpu_quote "$out")"
	[[ "$_lxpu_dry_run" == 1 ]] && return 0
	"$@" >"$out"
}

# pip, with its last ERROR line as the failure reason (the full output is in the log above it).
_lxpu_pip() {
	local out="$_lxpu_prefix/.envs/.tmp.$_lxpu_tag.$$.pip-output" status=0 why
	if [[ "$_lxpu_dry_run" == 1 ]]; then
		_lxpu_run "$_lxpu_py" -m pip --disable-pip-version-check --no-input "$@"
		return 0
	fi
	_lxpu_run "$_lxpu_py" -m pip --disable-pip-version-check --no-input "$@" 2>&1 | tee "$out" || status=$?
	if [[ "$status" != 0 ]]; then
		why="$(grep '^ERROR:' "$out" | tail -n 1 || true)"
		_lxpu_fail_reason="pip $1 failed (exit $status)${why:+: ${why#ERROR: }}"
	fi
	rm -f "$out"
	return "$status"
}

_lxpu_install_packages() {
	_lxpu_step packages
	local share="$_lxpu_env/share/lightning-xpu" reqs hashes=()
	reqs="$share/requirements.txt"
	if [[ -n "$_lxpu_lock_path" ]]; then
		_lxpu_say "lock: $_lxpu_lock_path (hash-checked)"
		hashes=(--require-hashes)
		[[ "$_lxpu_dry_run" == 1 ]] || cp "$_lxpu_lock_path" "$reqs"
	elif [[ "$_lxpu_dry_run" != 1 ]]; then
		# The pinned build tools go in with the pins (a lock has them already, hashed).
		{ lxpu_requirements "$_lxpu_variant" && printf '%s\n' "${LXPU_BUILD_TOOLS[@]}"; } >"$reqs"
	fi
	if [[ -n "$_lxpu_base_python" && "$_lxpu_dry_run" != 1 ]]; then
		_lxpu_drop_base_packages "$reqs"
	fi
	# pip's report records the hash of every file it installed (the manifest's sha256); uv has no report, and
	# the manifest takes the hashes from the lock instead.
	local report=()
	[[ "$_lxpu_installer" != pip ]] || report=(--report "$share/pip-report.json")
	_lxpu_installer_install "${hashes[@]}" ${report[@]+"${report[@]}"} -r "$reqs"
}

# With --base-python: requirements the base Python already satisfies by name are not reinstalled (torch
# above all); the base's versions are what the environment gets, and the manifest records them.
_lxpu_drop_base_packages() {
	local reqs="$1"
	"$_lxpu_base_python" - "$reqs" <<'PY'
import importlib.metadata as md
import re
import sys

path = sys.argv[1]
have = {re.sub(r"[-_.]+", "-", d.metadata["Name"]).lower(): d.version for d in md.distributions()}
kept, dropped, entry = [], [], []
lines = open(path).read().splitlines()
for line in lines + [""]:
    entry.append(line)
    if line.rstrip().endswith("\\"):
        continue
    text = " ".join(part.rstrip("\\").strip() for part in entry).strip()
    entry_lines, entry = entry, []
    match = re.match(r"([A-Za-z0-9][A-Za-z0-9._-]*)", text)
    name = re.sub(r"[-_.]+", "-", match.group(1)).lower() if match and not text.startswith("-") else None
    if name in have:
        dropped.append(f"{name} {have[name]}")
    else:
        kept.extend(entry_lines)
open(path, "w").write("\n".join(kept).strip() + "\n")
print("from the base python (not reinstalled): " + (", ".join(dropped) or "nothing"))
PY
}

_lxpu_install_runtime() {
	_lxpu_step runtime
	local build="$_lxpu_prefix/.envs/.tmp.$_lxpu_tag.$$.build" wheels="$_lxpu_env/share/lightning-xpu/wheels" item
	# Built without build isolation, by the environment's own setuptools: nothing extra to download (offline
	# wheelhouses need nothing but the recipe's packages), and from a copy, so the repository (possibly
	# shared or read-only) is never written to.
	_lxpu_say "+ copy the package sources to $(_lxpu_quote "$build")"
	if [[ "$_lxpu_dry_run" != 1 ]]; then
		mkdir -p "$build"
		for item in pyproject.toml setup.cfg setup.py README.md README.rst LICENSE lightning_xpu; do
			[[ -e "$_lxpu_source/$item" ]] && cp -R "$_lxpu_source/$item" "$build/"
		done
		find "$build" -name __pycache__ -prune -exec rm -rf {} +
	fi
	if [[ "$_lxpu_dry_run" == 1 ]] || ! "$_lxpu_py" -c '
import importlib.metadata as m, importlib.util as u, sys
v = tuple(int(x) for x in m.version("setuptools").split(".")[:2])
sys.exit(0 if v >= (70, 1) or u.find_spec("wheel") else 1)' 2>/dev/null; then
		_lxpu_say "(setuptools >= 70.1, or setuptools with wheel, is needed to build the wheel: the recipe's pinned build tools)"
		_lxpu_install_build_tools
	fi
	_lxpu_installer_wheel "$build" "$wheels"
	if [[ "$_lxpu_dry_run" == 1 ]]; then
		_lxpu_installer_install --no-deps "$wheels/lightning_xpu-$(_lxpu_package_version)-py3-none-any.whl"
		return 0
	fi
	rm -rf "$build"
	local wheel=("$wheels"/lightning_xpu-*.whl)
	[[ ${#wheel[@]} == 1 && -f "${wheel[0]}" ]] || _lxpu_fail "$_lxpu_installer did not build exactly one lightning_xpu wheel in $wheels"
	# --no-deps: its dependencies (torch, packaging) came with the pins or the base Python, and the smoke job's
	# `pip check` proves it. Resolving them again here could replace the base Python's torch (uv does not see
	# packages reached through the base venv's .pth file) with another build from the indexes.
	_lxpu_installer_install --no-deps "${wheel[0]}"
}

# The recipe's pinned build tools (LXPU_BUILD_TOOLS), with the lock's hashes when the recipe has a lock.
_lxpu_install_build_tools() {
	local reqs="$_lxpu_env/share/lightning-xpu/build-requirements.txt"
	if [[ -z "$_lxpu_lock_path" ]]; then
		_lxpu_installer_install "${LXPU_BUILD_TOOLS[@]}"
		return 0
	fi
	_lxpu_say "+ write $(_lxpu_quote "$reqs") (${LXPU_BUILD_TOOLS[*]} with their hashes from the lock)"
	if [[ "$_lxpu_dry_run" != 1 ]]; then
		printf '%s\n' "${LXPU_BUILD_TOOLS[@]}" | awk 'NR == FNR { want[$0] = 1; next }
			/^[A-Za-z0-9]/ { keep = ($1 in want) } keep' - "$_lxpu_lock_path" >"$reqs"
	fi
	_lxpu_installer_install --require-hashes -r "$reqs"
}

# lightning_xpu's version, as its wheel will carry it (pyproject.toml).
_lxpu_package_version() {
	sed -n 's/^version = "\([^"]*\)"$/\1/p' "$_lxpu_source/pyproject.toml" | head -n 1
}

_lxpu_enable_hook() {
	_lxpu_step hook
	local share="$_lxpu_env/share/lightning-xpu"
	printf '%s\n' 'import importlib.util as _u; _u.find_spec("lightning_xpu") and __import__("lightning_xpu._autoload")' |
		_lxpu_write_new "$_lxpu_site_packages/lightning_xpu-autoload.pth"
	lxpu_site_env | _lxpu_write_new "$_lxpu_env/lightning-xpu-site.sh"
	# The modules the module and setup script load: the site's, and the one that gave the venv its Python.
	local modules=()
	read -r -a modules <<<"$LXPU_SITE_MODULES"
	[[ -z "$LXPU_SITE_PYTHON_MODULE" || "$_lxpu_env_manager" != venv || -n "$_lxpu_base_python" ]] ||
		modules+=("$LXPU_SITE_PYTHON_MODULE")
	{ ((${#modules[@]} == 0)) || printf '%s\n' "${modules[@]}"; } |
		_lxpu_write_new "$_lxpu_env/lightning-xpu-site-modules.txt"
	_lxpu_run cp "$_lxpu_source/scripts/common/toy_fit.py" "$share/"
}

# The environment's pins (lxpu_engine/pins.py: constraints.txt), which the module and setup script apply to every
# pip and uv install into the environment or a user layer.
_lxpu_write_pins() {
	[[ "$_lxpu_dry_run" == 1 ]] || _lxpu_engine_on "$_lxpu_py" pins write "$_lxpu_env"
}

# Write stdin into a file of the staging environment (not yet visible to anyone: no temp file needed).
_lxpu_write_new() {
	printf '+ write %s\n' "$(_lxpu_quote "$1")"
	if [[ "$_lxpu_dry_run" == 1 ]]; then
		cat >/dev/null
	else
		cat >"$1"
	fi
}

_lxpu_byte_compile() {
	_lxpu_step compile
	# Packages' own test suites (a tests/ or test/ directory, a fifth of the files) are never imported by a
	# training job: left as source.
	local compile=("$_lxpu_py" -m compileall -q -j0 -x '/site-packages/.+/tests?/' "$_lxpu_env/lib")
	printf '+ %s\n' "$(_lxpu_quote "${compile[@]}")"
	[[ "$_lxpu_dry_run" == 1 ]] && return 0
	local out failed line
	# compileall exits 1 when any file does not compile; some wheels ship files for newer Pythons on
	# purpose (e.g. torch's py312 test helpers), so failures are reported, not fatal.
	out="$("${compile[@]}" 2>&1 {_lxpu_lock_fd}>&-)" || true
	failed="$(grep -o "^\*\*\* Error compiling '[^']*'" <<<"$out" | sed "s/^\*\*\* Error compiling //; s/'//g" || true)"
	if [[ -n "$failed" ]]; then
		_lxpu_warn "$(wc -l <<<"$failed") file(s) do not compile for Python $_lxpu_python_version (left as source):"
		while IFS= read -r line; do printf '  %s\n' "$line"; done <<<"$failed"
	fi
	printf '%s\n' "$failed" | sed '/^$/d' >"$_lxpu_env/share/lightning-xpu/bytecompile-failures.txt"
	grep -q '/site-packages/lightning_xpu/' <<<"$failed" && _lxpu_fail "lightning_xpu itself does not compile"
	return 0
}

# ---- node-local staging (issue 15): the relocatable environment and its packed image, lxpu_engine/pack.py ----

# _lxpu_engine_on PYTHON MODULE ARGS...: lxpu_engine.MODULE on PYTHON (the environment's own: no engine state),
# writing no bytecode into the checkout.
_lxpu_engine_on() {
	local py="$1" module="$2"
	shift 2
	PYTHONPATH="$_LXPU_ENGINE_DIR" "$py" -B -m "lxpu_engine.$module" "$@" {_lxpu_lock_fd}>&-
}

# Before the smoke job, which then tests the environment as it will be packed.
_lxpu_pack_relocatable() {
	[[ "$_lxpu_env_manager" == venv ]] || return 0
	_lxpu_say "+ make the environment relocatable: script launchers and activate find their own directory"
	_lxpu_run install -m 0755 "$_lxpu_source/scripts/common/stage/lightning-xpu-stage" "$_lxpu_env/bin/"
	[[ "$_lxpu_dry_run" == 1 ]] || _lxpu_engine_on "$_lxpu_py" pack relocatable "$_lxpu_env"
}

# The image is written and checked while the smoke job runs (about a third of a warm install's time on 2 cores):
# the smoke job writes nothing into the environment but smoke.json, which the image leaves out, and bytecode
# (PYTHONDONTWRITEBYTECODE there). Its output goes to a file that step 9 prints; a failed or interrupted install
# stops it, and everything it started, before the build is removed (_lxpu_pack_stop, from the exit trap).
_lxpu_pack_start() {
	[[ "$_lxpu_dry_run" != 1 ]] || return 0
	_lxpu_pack_output="$_lxpu_prefix/.envs/.tmp.$_lxpu_tag.$$.pack.log"
	PYTHONPATH="$_LXPU_ENGINE_DIR" "$_lxpu_py" -B -m lxpu_engine.pack make "$_lxpu_env" "$LXPU_SITE" "$_lxpu_tag" \
		>"$_lxpu_pack_output" 2>&1 {_lxpu_lock_fd}>&- &
	_lxpu_pack_pid=$!
}

_lxpu_pack() {
	_lxpu_step pack
	if [[ "$_lxpu_dry_run" == 1 ]]; then
		_lxpu_say "+ $(_lxpu_quote "$_lxpu_py" -m lxpu_engine.pack make "$_lxpu_env" "$LXPU_SITE" "$_lxpu_tag") (during the smoke job)"
		return 0
	fi
	local status=0
	wait "$_lxpu_pack_pid" || status=$?
	_lxpu_pack_pid=""
	cat "$_lxpu_pack_output"
	rm -f "$_lxpu_pack_output"
	[[ "$status" == 0 ]] || _lxpu_fail "writing the packed image failed (exit $status; see above)"
}

_lxpu_pack_stop() {
	[[ -n "${_lxpu_pack_pid:-}" ]] || return 0
	kill "$_lxpu_pack_pid" 2>/dev/null || true
	wait "$_lxpu_pack_pid" 2>/dev/null
	_lxpu_pack_pid=""
}

# The environment as the setup script and modulefile give it, in a subshell: `lightning-xpu validate --level smoke`
# (its console script: `python -m` would import a lightning_xpu from the working directory, a checkout's).
_lxpu_smoke() {
	_lxpu_step smoke
	local share="$_lxpu_env/share/lightning-xpu" args=()
	args=("$_lxpu_env/bin/lightning-xpu" validate --level smoke --json "$share/smoke.json")
	[[ "$_lxpu_variant" != xpu ]] || args+=(--require-xpu)
	printf '+ %s\n' "$(_lxpu_quote "${args[@]}")"
	[[ "$_lxpu_dry_run" == 1 ]] && return 0
	local status=0
	(
		set +u
		# shellcheck disable=SC1091
		source "$_lxpu_env/lightning-xpu-site.sh"
		export PATH="$_lxpu_env/bin:$PATH" LIGHTNING_XPU_ROOT="$_lxpu_env" PYTHONDONTWRITEBYTECODE=1
		export PYTHONUSERBASE="$HOME/.local/lightning-xpu/$_lxpu_tag"
		if [[ "$_lxpu_env_manager" == conda ]]; then export CONDA_PREFIX="$_lxpu_env"; else export VIRTUAL_ENV="$_lxpu_env"; fi
		exec "${args[@]}" {_lxpu_lock_fd}>&-
	) || status=$?
	[[ "$status" == 0 ]] || _lxpu_fail "the smoke job failed (exit $status): $(_lxpu_smoke_failures "$share/smoke.json")"
}

_lxpu_smoke_failures() {
	"$_lxpu_py" -c 'import json, sys
try:
    checks = json.load(open(sys.argv[1]))["checks"]
except Exception as exc:
    print(f"no result ({exc})")
else:
    print("; ".join(c["name"] + ": " + c["reason"] for c in checks if c["status"] == "fail")[:500])' "$1" 2>/dev/null || true
}

_lxpu_write_manifest() {
	_lxpu_step manifest
	local share="$_lxpu_env/share/lightning-xpu"
	_lxpu_say "+ write $(_lxpu_quote "$_lxpu_env/manifest.json")"
	[[ "$_lxpu_dry_run" == 1 ]] && return 0
	printf '%s\n' "${_lxpu_timings[@]}" >"$share/steps.tsv"
	[[ -z "$_lxpu_log" ]] || cp "$_lxpu_log" "$share/install.log"
	local option options=()
	for option in "${_lxpu_pip_options[@]}"; do options+=("--pip-option=$option"); done
	_lxpu_engine_on "$_lxpu_py" manifest "$_lxpu_env" "--tag=$_lxpu_tag" "--torch=$LXPU_VERSION" "--site=$LXPU_SITE" \
		"--variant=$_lxpu_variant" "--lightning=$LXPU_LIGHTNING_VERSION" "--python=$_lxpu_python_version" \
		"--recipe-hash=$LXPU_RECIPE_HASH" "--inputs-hash=$_lxpu_inputs_hash" "--repository=$_lxpu_source" \
		"--commit=$_lxpu_commit" "--build-id=$_lxpu_build_id" "--prefix=$_lxpu_prefix" \
		"--env-manager=$_lxpu_env_manager" "--base-python=$_lxpu_base_python" "--base-torch=${_lxpu_base_torch:-}" \
		"--sources-mode=$_lxpu_sources_mode" "${options[@]}" "--lock-file=$_lxpu_lock_path" \
		"--installer=$_lxpu_installer" "--installer-version=$_lxpu_installer_version" \
		"--installer-why=$_lxpu_installer_why" "--shared-group=$_lxpu_shared_group"
}

# Never world-writable, whatever the wheels' file modes were; with --shared-group: that group, read-only.
# FLAG is -R for trees, or -- for single files and directories.
_lxpu_share_permissions() {
	local flag="$1"
	shift
	if [[ "$_lxpu_dry_run" == 1 ]]; then
		[[ -z "$_lxpu_shared_group" ]] ||
			_lxpu_say "+ chgrp $flag $_lxpu_shared_group; chmod $flag g+rX,g-w,o-w: $(_lxpu_quote "$@")"
		return 0
	fi
	chmod "$flag" o-w "$@"
	[[ -n "$_lxpu_shared_group" ]] || return 0
	chgrp "$flag" "$_lxpu_shared_group" "$@"
	chmod "$flag" g+rX,g-w "$@"
}

# Setup script and modulefile: identical for every build of a tag (they resolve <prefix>/<tag>), written by
# temp file + rename and left untouched when unchanged. Both are data calling shared code, written first: the
# modulefile body next to the modulefiles and the setup library next to the setup scripts (one of each for every
# tag of the prefix; each checks the contract its callers were rendered for).
_lxpu_write_entry_points() {
	local setup="$_lxpu_prefix/${_lxpu_setup_file##*/}"
	local modfile="$_lxpu_prefix/modulefiles/$_lxpu_module.lua"
	[[ "$_lxpu_dry_run" == 1 ]] || mkdir -p "$(dirname "$modfile")"
	_lxpu_write_atomic "$_lxpu_prefix/$LXPU_SETUP_LIB_NAME" 0644 <"$_lxpu_source/$LXPU_SETUP_LIB"
	_lxpu_write_atomic "$_lxpu_prefix/$LXPU_MODULE_BODY" 0644 <"$_lxpu_source/$LXPU_MODULE_BODY"
	if [[ "$_lxpu_dry_run" == 1 ]]; then
		printf '+ write %s\n' "$(_lxpu_quote "$setup")" "$(_lxpu_quote "$modfile")" \
			"$(_lxpu_quote "$_lxpu_prefix/validate_lightning.sh")"
		return 0
	fi
	_lxpu_tagfiles write >/dev/null || _lxpu_fail "could not write $setup and $modfile"
	_lxpu_site_job write >/dev/null || _lxpu_fail "could not write $_lxpu_prefix/validate_lightning.sh"
	_lxpu_share_permissions -R "$_lxpu_prefix/modulefiles"
	_lxpu_share_permissions -- "$setup" "$_lxpu_prefix/$LXPU_SETUP_LIB_NAME" "$_lxpu_prefix/.envs" "$_lxpu_prefix/logs" \
		"$_lxpu_prefix/validate_lightning.sh" "$_lxpu_prefix/.validate_lightning.common.sh"
	[[ -z "$_lxpu_log" ]] || _lxpu_share_permissions -- "$_lxpu_log"
	_lxpu_warn_other_contracts
}

# The body and library just written serve every tag of the prefix: name the tags whose modulefile or setup script
# (installed from another checkout) was rendered for another contract, and so now stops with that message.
_lxpu_warn_other_contracts() {
	local body lib file want stale=()
	body="$(sed -n 's/^local CONTRACT = \([0-9]*\)$/\1/p' "$_lxpu_source/$LXPU_MODULE_BODY")"
	lib="$(sed -n 's/^  local contract=\([0-9]*\)$/\1/p' "$_lxpu_source/$LXPU_SETUP_LIB")"
	for file in "$_lxpu_prefix/${LXPU_MODULE_BODY%/*}"/*.lua "$_lxpu_prefix"/lightning-setup-*.sh; do
		[[ -f "$file" ]] || continue
		case "$file" in
		*.lua) want="$(sed -n 's/^  contract = \([0-9]*\),$/\1/p' "$file")" && [[ -z "$want" || "$want" == "$body" ]] ;;
		*) want="$(sed -n 's/^\. .* \([0-9]*\) [^ ]* [^ ]* [^ ]*$/\1/p' "$file")" && [[ -z "$want" || "$want" == "$lib" ]] ;;
		esac || stale+=("${file##*/}")
	done
	((${#stale[@]} == 0)) ||
		_lxpu_warn "$(_lxpu_joined "${stale[@]}") in $_lxpu_prefix came from another checkout and need the modulefile body or setup library it replaced: rerun their install jobs from this checkout"
}

# GLUE (tagfiles, to move into the Python driver): the tag's modulefile and setup script are written by
# lxpu_engine/tagfiles.py from the job's LXPU_TAG_DATA_<variant> (the recipe's data as JSON, rendered by recipes/).
_lxpu_tagfiles() {
	_lxpu_engine_on "$_lxpu_engine_python" tagfiles "$1" "$_lxpu_prefix" "$(lxpu_tag_data "$_lxpu_variant")"
}

# The site's validation job (<prefix>/validate_lightning.sh and the common script it calls), written by
# lxpu_engine/tagfiles.py from the job's LXPU_SITE_JOB_DATA (recipes/sites/<site>.toml [validation], rendered).
_lxpu_site_job() {
	_lxpu_engine_on "$_lxpu_engine_python" tagfiles site-job "$1" "$_lxpu_prefix" "$LXPU_SITE_JOB_DATA"
}

_lxpu_entry_points_current() {
	local setup="$_lxpu_prefix/${_lxpu_setup_file##*/}"
	local modfile="$_lxpu_prefix/modulefiles/$_lxpu_module.lua"
	[[ -f "$setup" && -f "$modfile" ]] && _lxpu_tagfiles current && _lxpu_site_job current &&
		cmp -s "$_lxpu_prefix/$LXPU_MODULE_BODY" "$_lxpu_source/$LXPU_MODULE_BODY" &&
		cmp -s "$_lxpu_prefix/$LXPU_SETUP_LIB_NAME" "$_lxpu_source/$LXPU_SETUP_LIB"
}

# ---- main ---------------------------------------------------------------------------------------------------

lxpu_main() {
	set -Eeuo pipefail
	# Engine state (all _lxpu_*).
	_lxpu_t0="$(_lxpu_now_us)"
	_lxpu_prefix="" _lxpu_variant="" _lxpu_env_manager="" _lxpu_base_python="" _lxpu_source=""
	_lxpu_pip_source="" _lxpu_index_url="" _lxpu_extra_index_urls=() _lxpu_wheelhouse=""
	_lxpu_lock_timeout=1800 _lxpu_shared_group="" _lxpu_force=0 _lxpu_dry_run=0
	_lxpu_tag="" _lxpu_log="" _lxpu_tee_pid="" _lxpu_pack_pid="" _lxpu_lock_fd="" _lxpu_env="" _lxpu_published=0
	_lxpu_step_n=0 _lxpu_step_total=$LXPU_STEP_TOTAL _lxpu_step_name="" _lxpu_step_t0=0 _lxpu_timings=()
	_lxpu_fail_reason="" _lxpu_result="" _lxpu_auto_cpu_note=0 _lxpu_base_torch="" _lxpu_base_is_venv=""
	_lxpu_python="" _lxpu_py="" _lxpu_lock_path="" _lxpu_sources_mode="" _lxpu_pip_options=()
	_lxpu_installer="" _lxpu_installer_why="" _lxpu_installer_version=""
	_lxpu_unset_vars="" _lxpu_stdout_fd="" _lxpu_stderr_fd="" _lxpu_module="" _lxpu_setup_file=""
	_lxpu_env_why="" _lxpu_module_report=() _lxpu_warnings=()
	# shared with lxpu_engine (_LXPU_STATE)
	_lxpu_action=install _lxpu_keep="" _lxpu_older_than="" _lxpu_notes=() _lxpu_noop=0 _lxpu_current=""
	_lxpu_lease_file="" _lxpu_lease_fd="" _lxpu_version="$LXPU_VERSION" _lxpu_pid=$$ _lxpu_lock_t0="" _lxpu_engine_python=""
	_lxpu_state_dir=""

	trap _lxpu_on_exit EXIT
	trap '_lxpu_on_error $? "$BASH_COMMAND"' ERR
	trap '_lxpu_on_signal INT 130' INT
	trap '_lxpu_on_signal TERM 143' TERM
	trap '_lxpu_on_signal HUP 129' HUP

	# Shared installs must be readable by others whatever the job's umask (PBS defaults to 077).
	umask 022
	# Schedulers that cannot pass arguments to a job script (qsub -v) can pass them in the environment;
	# the command line comes after them, so it wins.
	local env_args=()
	read -r -a env_args <<<"${LIGHTNING_XPU_INSTALL_ARGS:-}"
	_lxpu_parse_args "${env_args[@]}" "$@"
	command -v flock >/dev/null || _lxpu_bad_input "flock (util-linux) is missing: install util-linux or load a module that has it"
	_lxpu_validate
	_lxpu_validate_repository
	_lxpu_find_engine_python
	_lxpu_engine publish validate-action || exit
	# Nothing from the caller's Python setup may leak into the build or fake a passing smoke job.
	local name
	for name in PYTHONPATH PYTHONHOME PYTHONSTARTUP; do
		if [[ -n "${!name:-}" ]]; then
			_lxpu_unset_vars+=" $name"
			unset "$name"
		fi
	done
	export PYTHONNOUSERSITE=1
	_lxpu_inputs_hash="$(_lxpu_hash_inputs)"
	_lxpu_commit="$(_lxpu_repo_commit)"
	_lxpu_build_id="$(date +%Y%m%dT%H%M%S)-$$"
	_lxpu_env="$_lxpu_prefix/.envs/$_lxpu_tag.$_lxpu_build_id"

	if [[ "$_lxpu_dry_run" == 1 ]]; then
		_lxpu_say "dry run: printing every step and command; nothing is changed"
	else
		_lxpu_start_log
	fi
	if [[ "$_lxpu_action" != install ]]; then
		_lxpu_admin_action
		return 0
	fi
	# The declared steps (lxpu_engine/steps.py), in order; the lock step ends the run when nothing needs doing.
	local step
	for step in "${LXPU_STEPS[@]}"; do
		"$step"
		[[ "$_lxpu_noop" != 1 ]] || return 0
	done
	if [[ "$_lxpu_dry_run" == 1 ]]; then
		_lxpu_result="dry run finished: nothing was changed"
	else
		_lxpu_result="installed $_lxpu_prefix/$_lxpu_tag -> $(readlink "$_lxpu_prefix/$_lxpu_tag")"
	fi
}

# ---- the Python engine (lxpu_engine/) and the publishing steps ------------------------------------------------

# The engine state the Python modules read and change (lxpu_engine/state.py): each _lxpu_<name> listed here goes
# into their environment (and the notes, one per line); a module changes one by writing `name=value` to file
# descriptor 3, applied by _lxpu_apply_updates when it returns, or by the exit trap after a signal stopped both.
_LXPU_STATE=(prefix tag version pid dry_run env shared_group lock_timeout action keep older_than variant base_python
	log setup_file module noop force current published fail_reason result lease_file lock_fd lock_t0)

# The Python the engine's modules run on (standard library only): the one the environment is built from (the
# recipe's or --base-python's), else python3; resolved once to its executable.
_lxpu_find_engine_python() {
	local candidate
	for candidate in "$_lxpu_python" python3; do
		[[ -n "$candidate" ]] || continue
		command -v -- "$candidate" >/dev/null || continue
		_lxpu_engine_python="$("$candidate" -c 'import sys
assert sys.version_info >= (3, 9)
print(sys.executable)' 2>/dev/null)" && [[ -n "$_lxpu_engine_python" ]] && return 0
	done
	_lxpu_bad_input "no Python 3.9 or newer to run the install engine ($_LXPU_ENGINE_DIR/lxpu_engine): load a Python module or pass --base-python PATH"
}

# _lxpu_engine MODULE COMMAND [ARGS...]: run a command of lxpu_engine/MODULE.py with the engine's state; returns
# its exit status (a failure has printed its message and set _lxpu_fail_reason). It writes no bytecode: the
# repository may be shared or read-only.
_lxpu_engine() {
	local name ref vars=() status=0
	for name in "${_LXPU_STATE[@]}"; do
		ref="_lxpu_$name"
		vars+=("$ref=${!ref-}")
	done
	vars+=("_lxpu_notes=$(printf '%s\n' "${_lxpu_notes[@]}")")
	[[ -z "${_lxpu_cluster_name+set}" ]] || vars+=("_lxpu_cluster_name=$_lxpu_cluster_name")
	[[ -n "$_lxpu_state_dir" ]] || _lxpu_state_dir="$(mktemp -d "${TMPDIR:-/tmp}/lightning-xpu-engine.XXXXXX")"
	env "${vars[@]}" PYTHONPATH="$_LXPU_ENGINE_DIR" "$_lxpu_engine_python" -B -u -s -m "lxpu_engine.$1" "${@:2}" \
		3>"$_lxpu_state_dir/updates" || status=$?
	_lxpu_apply_updates
	return "$status"
}

_lxpu_apply_updates() {
	local file="${_lxpu_state_dir:+$_lxpu_state_dir/updates}" name value
	[[ -n "$file" && -s "$file" ]] || return 0
	while IFS='=' read -r name value; do
		case "$name" in
		note) _lxpu_notes+=("$value") ;;
		*) printf -v "_lxpu_$name" '%s' "$value" ;;
		esac
	done <"$file"
	: >"$file"
}

_lxpu_joined() {
	local item list=""
	for item in "$@"; do list+="${list:+, }$item"; done
	printf '%s' "$list"
}

# The last line of a successful run: the engine's result plus what else changed (repairs, removals: the notes).
# A run that changed or removed anything never says "nothing changed".
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

# The install lock (lxpu_engine/locking.py): this shell holds the lock file open for the whole run; the lock taken
# on it by the engine stays with it. Opened read-write without truncating: the holder's line stays readable.
_lxpu_lock() {
	_lxpu_step lock
	local lockfile="$_lxpu_prefix/.locks/$_lxpu_tag.lock" again=() status=0
	if [[ "$_lxpu_dry_run" == 1 ]]; then
		_lxpu_engine publish lock || exit
		return 0
	fi
	mkdir -p "$_lxpu_prefix/.locks"
	while :; do
		exec {_lxpu_lock_fd}<>"$lockfile"
		status=0
		_lxpu_engine publish lock ${again[@]+"${again[@]}"} || status=$?
		((status == 75)) || break # 75: the file was replaced while we waited: lock the new one
		exec {_lxpu_lock_fd}>&-
		again=(again)
	done
	((status == 0)) || exit "$status"
	# The install's own lease, held from the moment it exists: this shell and every child it starts hold its shared
	# flock for the whole run (lxpu_engine/leases.py), which is what tells other runs that it is live.
	_lxpu_lease_file="$_lxpu_prefix/.leases/${_lxpu_env##*/}@$(uname -n).install-$$"
	mkdir -p "$_lxpu_prefix/.leases"
	exec {_lxpu_lease_fd}>>"$_lxpu_lease_file"
	flock -s "$_lxpu_lease_fd"
	_lxpu_engine publish locked || exit
}

# The lock step of an install: take the lock; stop when the published build has these inputs already (a no-op
# run restores the setup script and modulefile when they differ).
_lxpu_lock_or_stop() {
	_lxpu_lock
	if [[ "$_lxpu_force" == 1 ]] || ! _lxpu_published_is_current; then
		[[ -z "${LXPU_TEST_PREBUILT:-}" ]] || _lxpu_test_prebuilt # tests only: steps 3-8 from a prebuilt env
		return 0
	fi
	_lxpu_noop=1
	if [[ "$_lxpu_dry_run" == 1 ]]; then
		_lxpu_result="already installed with these inputs: nothing to do (--force rebuilds)"
	elif _lxpu_entry_points_current; then
		_lxpu_result="already installed with these inputs: nothing changed (--force rebuilds)"
	else
		_lxpu_write_entry_points
		_lxpu_result="already installed with these inputs: setup script, modulefile and validation job restored"
	fi
	_lxpu_env=""
}

# Publishing (lxpu_engine/publish.py has the operations and their order): the record in the new build, the
# entry points, then THE publishing rename and what follows it.
_lxpu_publish() {
	_lxpu_step publish
	_lxpu_engine publish record || exit
	_lxpu_share_permissions -R "$_lxpu_env"
	[[ -z "${LXPU_TEST_PAUSE_AT:-}${LXPU_TEST_FAIL_AT:-}" ]] || _lxpu_engine publish test-hook entry-points || exit
	_lxpu_write_entry_points
	_lxpu_engine publish switch || exit
}

# A failed or interrupted build removes its own staging environment, temporary files and lease.
_lxpu_cleanup_failed_build() {
	[[ "$_lxpu_dry_run" == 1 || -z "$_lxpu_lock_fd" ]] && return 0
	_lxpu_pack_stop
	_lxpu_engine publish cleanup-failed
}

# --prune, --uninstall and --rollback (lxpu_engine/admin.py), under the install lock, after the links were
# validated (and repaired).
_lxpu_admin_action() {
	_lxpu_step_total=${#LXPU_ADMIN_STEPS[@]}
	local step
	for step in "${LXPU_ADMIN_STEPS[@]}"; do "$step"; done
}

_lxpu_admin_run() {
	_lxpu_step "$_lxpu_action"
	_lxpu_engine publish admin || exit
	# The build rolled back to is published with this checkout's setup script and modulefile.
	[[ "$_lxpu_action" != rollback ]] || _lxpu_entry_points_current || _lxpu_write_entry_points
}

# LXPU_TEST_PREBUILT=DIR (tests only): steps 3 to 8 copy DIR, a small prebuilt environment with the files those
# steps would leave (tests/install/install_harness.py makes it), instead of building; the manifest and publishing
# steps then run as always. The fault tests of publishing, links, locks and logs need no real install.
_lxpu_test_prebuilt() {
	_lxpu_step prebuilt
	[[ -d "$LXPU_TEST_PREBUILT" ]] || _lxpu_fail "LXPU_TEST_PREBUILT=$LXPU_TEST_PREBUILT is not a directory"
	mkdir -p "$_lxpu_prefix/.envs"
	_lxpu_run cp -a "$LXPU_TEST_PREBUILT" "$_lxpu_env"
	_lxpu_py="$_lxpu_env/bin/python"
	_lxpu_write_manifest
	_lxpu_publish
	_lxpu_result="installed $_lxpu_prefix/$_lxpu_tag -> $(readlink "$_lxpu_prefix/$_lxpu_tag" || true)"
	exit 0
}
