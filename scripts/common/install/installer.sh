# shellcheck shell=bash
# shellcheck disable=SC2154  # the engine's state (_lxpu_prefix, _lxpu_py, ...) is assigned in engine.sh
# Installer back ends of the install engine: uv where it can be had (the default), pip otherwise.
#
# Sourced by the engine (engine.sh); defines functions only, every name starting with _lxpu_. The engine calls:
#   _lxpu_installer_validate       while validating inputs (bad input exits 2 before anything is written)
#   _lxpu_installer_setup          after taking the lock: bootstraps uv, or falls back to pip and says why
#   _lxpu_installer_create_venv    ENV [--system-site-packages]
#   _lxpu_installer_install        ARGS...   (pip-install arguments: -r FILE, --require-hashes, a wheel path)
#   _lxpu_installer_wheel          SRC_DIR WHEEL_DIR   (builds lightning_xpu's wheel without build isolation)
#
# Why uv: it installs a warm-cache torch stack in about a second where pip takes tens (docs/performance.md).
# What must not change with it (issue 12): hash-checked locks, every package source override, and this
# machine's own pip configuration, which uv does not read: uv_sources.py maps each resolution key of
# `pip config list` to uv's options and refuses, in one line, a key it cannot map.

# The pinned, hash-checked uv (one line per platform wheel); bootstrapped into <prefix>/.tools/uv-<version>.
_LXPU_UV_LOCK=recipes/tools/install-tools.txt

_lxpu_installer_validate() {
	[[ -n "$_lxpu_installer" ]] || _lxpu_installer="${LIGHTNING_XPU_INSTALLER:-auto}"
	_lxpu_word_in "$_lxpu_installer" uv pip auto ||
		_lxpu_bad_input "--installer must be uv, pip or auto, not '$_lxpu_installer'"
	_lxpu_uv_args=() _lxpu_uv_env=() _lxpu_uv_constraints=() _lxpu_uv="" _lxpu_uv_version=""
	[[ "$_lxpu_installer" != pip ]] || {
		_lxpu_installer_why="--installer pip"
		return 0
	}
	# Over --base-python the environment reuses the base's packages, which pip sees (through the .pth file that
	# points at a base venv, too) and uv does not: uv would resolve torch again and install another build.
	if [[ -n "$_lxpu_base_python" ]]; then
		[[ "$_lxpu_installer" != uv ]] ||
			_lxpu_bad_input "--installer uv cannot build over --base-python (uv does not see the base Python's packages): drop one of them"
		_lxpu_installer=pip _lxpu_installer_why="--base-python: pip sees the base Python's packages, uv does not"
		return 0
	fi
	local lock="$_lxpu_source/$_LXPU_UV_LOCK"
	[[ -f "$lock" ]] || _lxpu_bad_input "$lock is missing: pass the repository with --source, or --installer pip"
	_lxpu_uv_version="$(sed -n 's/^uv==\([^ \\]*\).*/\1/p' "$lock")"
	[[ -n "$_lxpu_uv_version" ]] || _lxpu_bad_input "$lock pins no uv==<version>: restore it from the repository"
	_lxpu_uv_python="${_lxpu_python:-$(command -v python3 || true)}"
	if [[ -z "$_lxpu_uv_python" ]]; then
		_lxpu_installer_fallback "no Python to bootstrap uv with"
		return 0
	fi
	# The package sources, as uv options. A setting uv cannot honour is bad input, whatever --installer says:
	# auto must not quietly resolve differently from pip.
	local mapper="$_lxpu_source/scripts/common/install/uv_sources.py" out kind name value
	if [[ "$_lxpu_sources_mode" == system ]]; then
		out="$("$_lxpu_uv_python" "$mapper" from-pip-config 2>&1)" || _lxpu_bad_input "${out#error: }"
	else
		out="$("$_lxpu_uv_python" "$mapper" from-pip-options "${_lxpu_pip_options[@]}" 2>&1)" ||
			_lxpu_bad_input "${out#error: }"
	fi
	while IFS=$'\t' read -r kind name value; do
		case "$kind" in
		arg) _lxpu_uv_args+=("$name" ${value:+"$value"}) ;;
		env) _lxpu_uv_env+=("$name=$value") ;;
		constraint) _lxpu_uv_constraints+=("$name") ;;
		esac
	done <<<"$out"
	# uv otherwise stops at the first index that has a package; pip merges every index.
	_lxpu_uv_args+=(--index-strategy unsafe-best-match)
	if [[ -n "$_lxpu_lock_path" && ${#_lxpu_uv_constraints[@]} -gt 0 ]]; then
		out="$("$_lxpu_uv_python" "$mapper" check-constraints "$_lxpu_lock_path" "${_lxpu_uv_constraints[@]}" 2>&1)" ||
			_lxpu_bad_input "${out#error: }"
	fi
	_lxpu_uv_dir="$_lxpu_prefix/.tools/uv-$_lxpu_uv_version"
	_lxpu_uv_cache="${LIGHTNING_XPU_UV_CACHE_DIR:-$_lxpu_prefix/.cache/uv}"
}

_lxpu_installer_fallback() {
	[[ "$_lxpu_installer" != uv ]] || _lxpu_fail "uv could not be had: $1 (use --installer pip)"
	_lxpu_installer=pip
	_lxpu_installer_why="uv could not be had ($1)"
	_lxpu_say "note: uv could not be had ($1): installing with pip instead"
}

# uv from the lock into the prefix's tools directory (a temporary directory, then one rename), unless the
# pinned version is already there. Only pip is trusted to fetch it: pip checks the lock's hashes.
_lxpu_installer_setup() {
	if [[ "$_lxpu_installer" == pip ]]; then
		_lxpu_installer_version="$("${_lxpu_python:-python3}" -m pip --version 2>/dev/null | cut -d' ' -f2 || true)"
		_lxpu_say "installer: pip ${_lxpu_installer_version:-(version unknown)} ($_lxpu_installer_why)"
		return 0
	fi
	local lock="$_lxpu_source/$_LXPU_UV_LOCK" tmp have="" out
	_lxpu_uv="$_lxpu_uv_dir/bin/uv"
	[[ ! -x "$_lxpu_uv" ]] || have="$("$_lxpu_uv" --version 2>/dev/null || true)"
	if [[ "$have" == "uv $_lxpu_uv_version"* ]]; then
		_lxpu_say "installer: uv $_lxpu_uv_version ($_lxpu_uv_dir)"
	else
		tmp="$_lxpu_prefix/.tools/.tmp.uv-$_lxpu_uv_version.$$"
		_lxpu_say "installer: bootstrapping uv $_lxpu_uv_version (hash-checked, from $lock)"
		if [[ "$_lxpu_dry_run" == 1 ]]; then
			_lxpu_run "$_lxpu_uv_python" -m pip install --no-deps --require-hashes --target "$tmp" "${_lxpu_pip_options[@]}" -r "$lock"
		else
			mkdir -p "$_lxpu_prefix/.tools"
			rm -rf "$tmp"
			if ! out="$(_lxpu_run "$_lxpu_uv_python" -m pip --disable-pip-version-check --no-input install --quiet --root-user-action=ignore \
				--no-deps --require-hashes --target "$tmp" "${_lxpu_pip_options[@]}" -r "$lock" 2>&1)"; then
				printf '%s\n' "$out"
				rm -rf "$tmp"
				_lxpu_installer_fallback "$(grep -m 1 '^ERROR:' <<<"$out" | sed 's/^ERROR: //' || true)"
				_lxpu_installer_setup
				return 0
			fi
			printf '%s\n' "$out"
			# Another tag's install may have put the same version there meanwhile: keep that one.
			mv -T "$tmp" "$_lxpu_uv_dir" 2>/dev/null || rm -rf "$tmp"
			if ! "$_lxpu_uv" --version >/dev/null 2>&1; then
				_lxpu_installer_fallback "$_lxpu_uv does not run on this machine"
				_lxpu_installer_setup
				return 0
			fi
		fi
	fi
	_lxpu_installer_why="${_lxpu_installer_why:-default}"
	_lxpu_installer=uv _lxpu_installer_version="$_lxpu_uv_version"
	# Hard links from the cache are fast, but not across file systems, and not on Lustre (ALCF's frameworks
	# build sets UV_LINK_MODE=copy for that reason): copy there.
	# A dry run on a new prefix creates neither: each is judged by its nearest existing directory.
	local cache_parent="$_lxpu_uv_cache" prefix_parent="$_lxpu_prefix"
	[[ "$_lxpu_dry_run" == 1 ]] || mkdir -p "$_lxpu_uv_cache"
	while [[ ! -e "$cache_parent" ]]; do cache_parent="$(dirname "$cache_parent")"; done
	while [[ ! -e "$prefix_parent" ]]; do prefix_parent="$(dirname "$prefix_parent")"; done
	_lxpu_uv_link_mode=hardlink
	if [[ "$(stat -c %d "$cache_parent")" != "$(stat -c %d "$prefix_parent")" ]] ||
		[[ "$(stat -f -c %T "$prefix_parent")" == lustre ]]; then
		_lxpu_uv_link_mode=copy
	fi
	_lxpu_say "installer: uv, cache $_lxpu_uv_cache (link mode $_lxpu_uv_link_mode)"
}

# uv with the sources and environment settings mapped from pip's.
_lxpu_uv_run() {
	local status=0
	_lxpu_run env ${_lxpu_uv_env[@]+"${_lxpu_uv_env[@]}"} UV_CACHE_DIR="$_lxpu_uv_cache" \
		UV_LINK_MODE="$_lxpu_uv_link_mode" UV_PYTHON_DOWNLOADS=never UV_NO_PROGRESS=1 "$_lxpu_uv" "$@" || status=$?
	# uv makes its lock files world-writable on purpose (any user may share a cache); a prefix is shared
	# read-only, so nobody but its owner may write there.
	[[ "$_lxpu_dry_run" == 1 || ! -d "$_lxpu_uv_cache" ]] ||
		find "$_lxpu_uv_cache" -perm -o+w ! -type l -exec chmod o-w {} + 2>/dev/null || true
	return "$status"
}

_lxpu_installer_create_venv() {
	local env="$1"
	shift
	if [[ "$_lxpu_installer" == pip ]]; then
		_lxpu_run "$_lxpu_python" -m venv "$@" "$env"
		return 0
	fi
	# Relocatable: scripts and activation find the environment from their own location, which staging to
	# node-local disk relies on. uv seeds no pip: the Python's own bundled pip wheel (ensurepip's, so pinned by
	# the Python and needing no download) is installed, as `python -m venv` would.
	_lxpu_uv_run venv --quiet --relocatable --python "$_lxpu_python" "$@" "$env" || return 1
	local bundled
	bundled="$("$_lxpu_python" -c 'import ensurepip, pathlib
print(next((pathlib.Path(ensurepip.__file__).parent / "_bundled").glob("pip-*.whl"), ""))' 2>/dev/null || true)"
	if [[ -n "$bundled" ]]; then
		_lxpu_uv_run pip install --quiet --python "$env/bin/python" --no-index --no-deps "$bundled"
	else
		_lxpu_warn "this Python bundles no pip wheel (ensurepip): the environment has no pip"
	fi
}

# pip-install arguments through the chosen installer; the failure reason is the installer's last error line.
_lxpu_installer_install() {
	if [[ "$_lxpu_installer" == pip ]]; then
		_lxpu_pip install "${_lxpu_pip_options[@]}" "$@"
		return
	fi
	local constraints=() path
	# Without a lock, constraints are passed on; a lock's exact pins were checked against them already.
	if [[ "$*" != *--require-hashes* ]]; then
		for path in ${_lxpu_uv_constraints[@]+"${_lxpu_uv_constraints[@]}"}; do constraints+=(--constraint "$path"); done
	fi
	_lxpu_uv_checked pip install --python "$_lxpu_py" "${_lxpu_uv_args[@]}" ${constraints[@]+"${constraints[@]}"} "$@"
}

_lxpu_installer_wheel() {
	if [[ "$_lxpu_installer" == pip ]]; then
		_lxpu_pip wheel --no-deps --no-build-isolation --wheel-dir "$2" "$1"
		return
	fi
	_lxpu_uv_checked build --quiet --wheel --no-build-isolation --python "$_lxpu_py" --out-dir "$2" "$1"
}

# uv's own reason, on one line: an unsatisfiable pin says why under "No solution found" (the line after "╰─▶");
# anything else is "error: ..." followed by its causes, the last one the most specific.
_lxpu_uv_reason() {
	local why
	why="$(grep -m 1 '╰─▶' "$1" | sed 's/^.*╰─▶ *//' || true)"
	if [[ -z "$why" ]]; then
		why="$(sed -n 's/^error: //p' "$1" | head -n 1)"
		local cause
		cause="$(sed -n 's/^ *\(cause\|Caused by\): //p' "$1" | tail -n 1)"
		why="$why${cause:+ ($cause)}"
	fi
	[[ -z "$why" ]] || printf ': %s' "$why"
}

_lxpu_uv_checked() {
	local out="$_lxpu_prefix/.envs/.tmp.$_lxpu_tag.$$.uv-output" status=0 why
	if [[ "$_lxpu_dry_run" == 1 ]]; then
		_lxpu_uv_run "$@"
		return 0
	fi
	_lxpu_uv_run "$@" 2>&1 | tee "$out" || status=$?
	if [[ "$status" != 0 ]]; then
		_lxpu_fail_reason="uv $1 $2 failed (exit $status)$(_lxpu_uv_reason "$out")"
	fi
	rm -f "$out"
	# 1 whatever uv's own code: the install's exit status 2 means bad input, which this is not.
	[[ "$status" == 0 ]] || return 1
}
