# shellcheck shell=bash
# shellcheck disable=SC2154  # the engine's state (_lxpu_*, LXPU_*) is set by engine.sh and the recipe data
# lightning-xpu install engine, part "pack": a relocatable environment and its packed image (issue 15).
# Sourced by the engine (scripts/common/install/engine.sh); defines functions only, all named _lxpu_pack_*, and
# uses the engine's state (_lxpu_env, _lxpu_py, _lxpu_dry_run, _lxpu_say, _lxpu_warn, _lxpu_step, ...).
#
# Called by the engine:
#   _lxpu_pack_relocatable   before the smoke job: makes the environment relocatable (script launchers that find
#                            the interpreter next to themselves, as `uv venv --relocatable` writes them; activate
#                            computes its own path) and adds lightning-xpu-stage to its bin/. The smoke job then
#                            tests the environment as it will be packed.
#   _lxpu_pack_start         before the smoke job: starts _lxpu_pack_make in the background
#   _lxpu_pack               after the smoke job, before the manifest (step 9): waits for it, or (dry run) runs
#                            it; _lxpu_pack_make writes the image
#                            <env>/share/lightning-xpu/pack/env.tar.zst (or .tar.gz), checks it runs from another path, and
#                            records the result in <env>/share/lightning-xpu/pack/pack.env (KEY=value lines read
#                            by lightning-xpu-stage without starting Python) and pack.json (into manifest.json).
#
# What the image holds:
#   venv (python -m venv or uv venv): the environment, plus the base interpreter (its executable, libpython and
#     standard library, without its site-packages) so that nothing is read from the base Python on the shared
#     file system either: the unpacked copy is a standalone Python whose prefix is wherever it lies. Not with
#     --base-python (the base's own packages, torch included, are part of the environment there): then the image
#     is the venv alone and the base interpreter stays shared (manifest: pack.base.staged = false, with why).
#   conda: conda-pack's archive where conda-pack exists (lightning-xpu-stage runs its conda-unpack).
#   Anything else, or a check that fails: no image, one line why (the install itself still succeeds; jobs run
#   from the shared install, and lightning-xpu-stage says why).
# LIGHTNING_XPU_PACK=0 skips the image.

# The script launcher uv writes for relocatable venvs: a shell line that runs the python next to the script.
_lxpu_pack_launcher() {
	cat <<'LAUNCHER'
#!/bin/sh
'''exec' "$(dirname -- "$(realpath -- "$0")")"/'python' "$0" "$@"
' '''
LAUNCHER
}

_lxpu_pack_relocatable() {
	[[ "$_lxpu_env_manager" == venv ]] || return 0
	_lxpu_say "+ make the environment relocatable: script launchers and activate find their own directory"
	_lxpu_run install -m 0755 "$_lxpu_source/scripts/common/stage/lightning-xpu-stage" "$_lxpu_env/bin/"
	[[ "$_lxpu_dry_run" == 1 ]] && return 0
	"$_lxpu_py" - "$_lxpu_env" "$(_lxpu_pack_launcher)" <<'PY' {_lxpu_lock_fd}>&-
import os
import sys
from pathlib import Path

env, launcher = Path(sys.argv[1]), sys.argv[2] + "\n"
python = str(env / "bin" / "python")
fixed = []
for script in sorted((env / "bin").iterdir()):
    if script.is_symlink() or not script.is_file():
        continue
    head = script.read_bytes()[:4096]
    try:
        lines = head.decode().splitlines(keepends=True)
    except UnicodeDecodeError:
        continue  # a binary
    if not lines:
        continue
    # pip's two forms: "#!<env>/bin/python[X.Y]" and, for paths with spaces, the /bin/sh + "'''exec' ..." form.
    if lines[0].startswith("#!" + python):
        rest = script.read_text()[len(lines[0]):]
    elif lines[0].strip() == "#!/bin/sh" and len(lines) > 2 and lines[1].startswith("'''exec' \"" + python):
        rest = script.read_text()[len(lines[0]) + len(lines[1]) + len(lines[2]):]
    else:
        continue
    mode = script.stat().st_mode
    script.write_text(launcher + rest)
    os.chmod(script, mode)
    fixed.append(script.name)
activate = env / "bin" / "activate"
if activate.is_file():
    text = activate.read_text()
    for quote in ("'", '"'):
        old = f"VIRTUAL_ENV={quote}{env}{quote}"
        if old in text:
            text = text.replace(old, 'VIRTUAL_ENV="$(cd "$(dirname "${BASH_SOURCE[0]:-$0}")/.." && pwd)"')
            activate.write_text(text)
            fixed.append("activate")
print(f"relocatable launchers: {len(fixed)} file(s) in bin/")
PY
}

# A line why the environment cannot be packed, or nothing.
_lxpu_pack_refusal() {
	local pth
	if [[ "${LIGHTNING_XPU_PACK:-1}" == 0 ]]; then
		printf 'LIGHTNING_XPU_PACK=0: no image written'
		return 0
	fi
	if [[ -d "$_lxpu_env/conda-meta" ]]; then
		command -v conda-pack >/dev/null ||
			printf 'a conda environment is packed with conda-pack, which is not on PATH (conda install conda-pack)'
		return 0
	fi
	if [[ ! -f "$_lxpu_env/pyvenv.cfg" ]]; then
		printf 'only venvs (python -m venv, uv venv) and conda environments can be packed; %s is neither' "$_lxpu_env"
		return 0
	fi
	# A .pth file naming the environment's own path would break in the copy.
	pth="$(grep -lF -- "$_lxpu_env" "$_lxpu_site_packages"/*.pth 2>/dev/null | head -n 1 || true)"
	[[ -z "$pth" ]] || printf '%s names the environment'"'"'s absolute path, which moves with the copy' "$pth"
	return 0
}

# The image is written and checked while the smoke job runs (about a third of a warm install's time on 2 cores):
# the smoke job writes nothing into the environment but smoke.json, which the image leaves out, and bytecode
# (PYTHONDONTWRITEBYTECODE there). Its output goes to a file that step 9 prints; a failed or interrupted install
# stops it before the build is removed (_lxpu_pack_stop, from the exit trap).
_lxpu_pack_start() {
	[[ "$_lxpu_dry_run" != 1 ]] || return 0
	_lxpu_pack_output="$_lxpu_prefix/.envs/.tmp.$_lxpu_tag.$$.pack.log"
	_lxpu_pack_make >"$_lxpu_pack_output" 2>&1 {_lxpu_lock_fd}>&- &
	_lxpu_pack_pid=$!
}

_lxpu_pack() {
	_lxpu_step "pack the environment for node-local staging"
	if [[ -z "${_lxpu_pack_pid:-}" ]]; then
		_lxpu_pack_make
		return 0
	fi
	local status=0
	wait "$_lxpu_pack_pid" || status=$?
	_lxpu_pack_pid=""
	cat "$_lxpu_pack_output"
	rm -f "$_lxpu_pack_output"
	[[ "$status" == 0 ]] || _lxpu_fail "writing the packed image failed (exit $status; see above)"
}

# Stop a background pack and everything it started (tar, zstd, the check's Python).
_lxpu_pack_stop() {
	[[ -n "${_lxpu_pack_pid:-}" ]] || return 0
	_lxpu_kill_tree "$_lxpu_pack_pid"
	wait "$_lxpu_pack_pid" 2>/dev/null
	_lxpu_pack_pid=""
}

_lxpu_kill_tree() {
	local child
	for child in $(ps -o pid= --ppid "$1" 2>/dev/null); do
		_lxpu_kill_tree "$child"
	done
	kill "$1" 2>/dev/null || true
}

_lxpu_pack_make() {
	local dir="$_lxpu_env/share/lightning-xpu/pack" why
	why="$(_lxpu_pack_refusal)"
	if [[ "${LIGHTNING_XPU_PACK:-1}" == 0 ]]; then
		_lxpu_say "$why"
		[[ "$_lxpu_dry_run" == 1 ]] || _lxpu_pack_record "$dir" refused "$why"
		return 0
	elif [[ -n "$why" ]]; then
		_lxpu_warn "no packed image: $why; jobs run from the shared install"
		[[ "$_lxpu_dry_run" == 1 ]] || _lxpu_pack_record "$dir" refused "$why"
		return 0
	fi
	_lxpu_say "+ write an image in $(_lxpu_quote "$dir")"
	[[ "$_lxpu_dry_run" == 1 ]] && return 0
	mkdir -p "$dir"
	if [[ -d "$_lxpu_env/conda-meta" ]]; then
		_lxpu_run conda-pack --prefix "$_lxpu_env" --output "$dir/env.tar.gz" --format tar.gz \
			--exclude "share/lightning-xpu/pack/*" --force || {
			_lxpu_pack_give_up "$dir" "conda-pack failed (see above)"
			return 0
		}
		_lxpu_pack_unpacked_bytes="$(du -sb "$_lxpu_env" | cut -f1)"
		_lxpu_pack_finish "$dir" tar.gz 0 "conda environment: conda-pack's conda-unpack fixes its prefix"
		return 0
	fi
	_lxpu_pack_choose_format
	local base_why=""
	_lxpu_pack_base_check
	base_why="$_lxpu_pack_base_why"
	if [[ -z "$base_why" ]] && _lxpu_pack_tar "$dir" 1 && _lxpu_pack_verify "$dir" 1; then
		_lxpu_pack_finish "$dir" "$_lxpu_pack_format" 1 ""
		return 0
	fi
	[[ -n "$base_why" ]] || base_why="${_lxpu_pack_last_error:-the image with the base interpreter did not run}"
	_lxpu_say "the base interpreter stays shared: $base_why"
	if _lxpu_pack_tar "$dir" 0 && _lxpu_pack_verify "$dir" 0; then
		_lxpu_pack_finish "$dir" "$_lxpu_pack_format" 0 "$base_why"
	else
		_lxpu_pack_give_up "$dir" "${_lxpu_pack_last_error:-the packed environment did not run from another path}"
	fi
}

# Sets _lxpu_pack_base_why to why the base interpreter cannot go into the image (empty: it can).
_lxpu_pack_base_check() {
	_lxpu_pack_base_why=""
	if grep -Eq '^include-system-site-packages *= *true' "$_lxpu_env/pyvenv.cfg"; then
		_lxpu_pack_base_why="the environment uses the base Python's own packages (--base-python / --system-site-packages)"
	elif ! _lxpu_pack_base_info; then
		_lxpu_pack_base_why="cannot locate the base Python's executable and standard library"
	fi
}

# Sets _lxpu_pack_base_{exe,stdlib,libpython,ver}; false when they cannot be found.
_lxpu_pack_base_info() {
	local info
	info="$("$_lxpu_py" -c 'import os, sys, sysconfig as s
exe = os.path.realpath(getattr(sys, "_base_executable", "") or "")
lib = ""
if s.get_config_var("Py_ENABLE_SHARED"):
    lib = os.path.join(s.get_config_var("LIBDIR") or "", s.get_config_var("INSTSONAME") or "")
print(exe); print(s.get_path("stdlib")); print(lib); print(s.get_config_var("LDVERSION") or s.get_python_version())' \
		2>/dev/null {_lxpu_lock_fd}>&-)" || return 1
	{
		read -r _lxpu_pack_base_exe
		read -r _lxpu_pack_base_stdlib
		read -r _lxpu_pack_base_libpython
		read -r _lxpu_pack_base_ver
	} <<<"$info"
	[[ -x "$_lxpu_pack_base_exe" && -f "$_lxpu_pack_base_stdlib/os.py" ]] || return 1
	[[ -z "$_lxpu_pack_base_libpython" || -f "$_lxpu_pack_base_libpython" ]]
}

# The compressor: zstd where it exists (several times faster to unpack on every node), else gzip (pigz when
# present); LIGHTNING_XPU_PACK_FORMAT=tar.gz or tar.zst chooses. Sets _lxpu_pack_format and _lxpu_pack_compress.
_lxpu_pack_choose_format() {
	_lxpu_pack_format="${LIGHTNING_XPU_PACK_FORMAT:-}"
	if [[ -z "$_lxpu_pack_format" ]]; then
		_lxpu_pack_format=tar.gz
		command -v zstd >/dev/null && _lxpu_pack_format=tar.zst
	fi
	case "$_lxpu_pack_format" in
	tar.zst) _lxpu_pack_compress=(zstd -q -T0 -3) ;;
	tar.gz)
		_lxpu_pack_compress=(gzip -1)
		command -v pigz >/dev/null && _lxpu_pack_compress=(pigz -1)
		;;
	*) _lxpu_fail "LIGHTNING_XPU_PACK_FORMAT must be tar.zst or tar.gz, not '$_lxpu_pack_format'" ;;
	esac
}

# The copied interpreter, libpython and the standard library's extension modules name the base's lib/ in their
# RUNPATH (absolute): every library lookup of every rank would probe it on the shared file system first. Rewritten
# in place to NEW (relative to $ORIGIN: the copy's own lib/), where the old string is long enough and no other
# name of the string table points into it; files without a RUNPATH are left alone. Where one cannot be rewritten
# it stays, and lightning-xpu-stage puts the copy's lib/ on LD_LIBRARY_PATH (libpython=1 in pack.env).
# _lxpu_pack_origin_runpath FILE... NEW
_lxpu_pack_origin_runpath() {
	local out
	out="$("$_lxpu_py" - "$@" <<'PY' 2>&1 {_lxpu_lock_fd}>&-
from __future__ import annotations

import struct
import sys


def rewrite(path: str, new: bytes) -> str | None:
    data = bytearray(open(path, "rb").read())
    if data[:4] != b"\x7fELF" or data[4] != 2 or data[5] != 1:
        return "not a 64-bit little-endian ELF file"
    shoff, = struct.unpack_from("<Q", data, 0x28)
    shentsize, shnum = struct.unpack_from("<HH", data, 0x3A)
    sections = [struct.unpack_from("<IIQQQQIIQQ", data, shoff + i * shentsize) for i in range(shnum)]
    dynamic = next((s for s in sections if s[1] == 6), None)  # SHT_DYNAMIC
    if dynamic is None:
        return None
    strtab = sections[dynamic[6]]  # sh_link: the dynamic string table
    refs, runpath = [], None
    for i in range(dynamic[5] // 16):
        tag, value = struct.unpack_from("<qQ", data, dynamic[4] + i * 16)
        if tag in (1, 14, 15, 29):  # DT_NEEDED, DT_SONAME, DT_RPATH, DT_RUNPATH
            refs.append(value)
            if tag in (15, 29):
                runpath = value
    if runpath is None:
        return None
    for sec in sections:
        if sec[1] == 11 and sections[sec[6]] == strtab:  # SHT_DYNSYM names
            refs += [struct.unpack_from("<I", data, sec[4] + j * 24)[0] for j in range(sec[5] // 24)]
    start = strtab[4] + runpath
    end = data.index(b"\0", start)
    if data[start:end] == new:
        return None
    if end - start < len(new) or any(runpath < r <= runpath + (end - start) for r in refs):
        return "its RUNPATH is too short to rewrite in place, or shared with another name"
    data[start:end] = new + b"\0" * (end - start - len(new))
    open(path, "wb").write(bytes(data))
    return None


*files, new = sys.argv[1:]
kept = [f"{f}: {why}" for f in files if (why := rewrite(f, new.encode()))]
if kept:
    sys.exit("; ".join(kept))
PY
	)" && return 0
	_lxpu_say "RUNPATH kept (${out:0:300}): the copy's lib/ goes on LD_LIBRARY_PATH when staged"
	_lxpu_pack_runpath_kept=1
}

# Write the image: the environment, and with WITH_BASE=1 the base interpreter merged into it (bin/pythonX.Y a
# copy of the executable instead of a symlink, libpython in lib/, the standard library in lib/pythonX.Y/, and no
# pyvenv.cfg: the copy is then a standalone Python that finds everything relative to its executable).
# shellcheck disable=SC2016  # $ORIGIN is the dynamic loader's, written literally
_lxpu_pack_tar() {
	local dir="$1" with_base="$2" overlay="$1/.overlay" py="python$_lxpu_python_version" status=0
	# tar's --exclude applies to the names after it, and --anchored keeps "python3.11/site-packages" (the base's)
	# from matching the environment's own ./lib/python3.11/site-packages: the base parts come first.
	local members=(--anchored)
	_lxpu_pack_runpath_kept=0
	rm -rf "$overlay" "$dir/.env.tmp"
	if [[ "$with_base" == 1 ]]; then
		mkdir -p "$overlay/bin" "$overlay/lib"
		cp -p "$_lxpu_pack_base_exe" "$overlay/bin/$py"
		# python and python3 name it relatively (uv's venvs link python to the base and python3.X to python).
		ln -s "$py" "$overlay/bin/python"
		ln -s "$py" "$overlay/bin/python3"
		mkdir -p "$overlay/lib/$py"
		cp -Rp "$_lxpu_pack_base_stdlib/lib-dynload" "$overlay/lib/$py/"
		[[ -z "$_lxpu_pack_base_libpython" ]] || cp -p "$_lxpu_pack_base_libpython" "$overlay/lib/"
		_lxpu_pack_origin_runpath "$overlay/bin/$py" '$ORIGIN/../lib'
		[[ -z "$_lxpu_pack_base_libpython" ]] ||
			_lxpu_pack_origin_runpath "$overlay/lib/$(basename "$_lxpu_pack_base_libpython")" '$ORIGIN'
		_lxpu_pack_origin_runpath "$overlay/lib/$py/lib-dynload/"*.so '$ORIGIN/../..'
		members+=(-C "$overlay" ./bin ./lib
			# The base's standard library as lib/pythonX.Y/ of the copy; its own site-packages stay out (the
			# environment's are the ones wanted), as does its test suite.
			-C "$(dirname "$_lxpu_pack_base_stdlib")" "--exclude=$py/site-packages" "--exclude=$py/dist-packages"
			"--exclude=$py/test" "--exclude=$py/lib-dynload" "--transform=flags=r;s,^$py\(/\|\$\),./lib/$py\1," "$py/"
			--exclude=./pyvenv.cfg "--exclude=./bin/$py" --exclude=./bin/python --exclude=./bin/python3)
	fi
	# The smoke job's result is written meanwhile (_lxpu_pack_start); it belongs to the manifest, not the image.
	members+=(-C "$_lxpu_env" --exclude=./share/lightning-xpu/pack "--exclude=./share/lightning-xpu/*smoke.json*" .)
	_lxpu_say "+ tar -c ... | ${_lxpu_pack_compress[*]} > $(_lxpu_quote "$dir/env.$_lxpu_pack_format") ($([[ "$with_base" == 1 ]] && echo "the environment and the base interpreter $_lxpu_pack_base_exe" || echo "the environment; the base interpreter stays shared"))"
	{ tar -c "${members[@]}" | "${_lxpu_pack_compress[@]}" >"$dir/.env.tmp"; } {_lxpu_lock_fd}>&- || status=$?
	rm -rf "$overlay"
	if [[ "$status" != 0 ]]; then
		_lxpu_pack_last_error="tar failed (exit $status)"
		rm -f "$dir/.env.tmp"
		return 1
	fi
	rm -f "$dir"/env.tar.*
	mv -f "$dir/.env.tmp" "$dir/env.$_lxpu_pack_format"
}

# Where the check unpacks: LIGHTNING_XPU_PACK_CHECK_DIR, else /dev/shm (memory: writing the unpacked tree, about
# four times the image, to a disk file system costs several times the rest of the check) when it has room for
# twice the environment, else $TMPDIR or /tmp.
_lxpu_pack_check_parent() {
	local need avail
	if [[ -n "${LIGHTNING_XPU_PACK_CHECK_DIR:-}" ]]; then
		printf '%s' "$LIGHTNING_XPU_PACK_CHECK_DIR"
		return 0
	fi
	if [[ -d /dev/shm && -w /dev/shm && "$(stat -f -c %T /dev/shm 2>/dev/null)" == tmpfs ]]; then
		need="$(du -sk "$_lxpu_env" 2>/dev/null | cut -f1)"
		avail="$(df -Pk /dev/shm 2>/dev/null | awk 'NR == 2 { print $4 }')"
		if [[ "$need" =~ ^[0-9]+$ && "$avail" =~ ^[0-9]+$ ]] && ((avail > 2 * need)); then
			printf '/dev/shm'
			return 0
		fi
	fi
	printf '%s' "${TMPDIR:-/tmp}"
}

# Unpack the image to a temporary directory elsewhere and run Python from there: lightning and lightning_xpu
# must import from the copy, and with WITH_BASE=1 every sys.path entry must lie in it (nothing from the base).
_lxpu_pack_verify() {
	local dir="$1" with_base="$2" tmp out status=0
	tmp="$(mktemp -d "$(_lxpu_pack_check_parent)/lxpu-pack-check.XXXXXX")"
	_lxpu_say "+ check: unpack to $tmp and import lightning and lightning_xpu from there"
	out="$( (
		tar -xf "$dir/env.$_lxpu_pack_format" -C "$tmp" && du -sb "$tmp" | cut -f1 >"$tmp.bytes" &&
			env -u PYTHONPATH -u PYTHONHOME -u VIRTUAL_ENV PYTHONNOUSERSITE=1 \
				LD_LIBRARY_PATH="$tmp/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" \
				"$tmp/bin/python" - "$tmp" "$with_base" <<'PY'
import os
import sys

root, with_base = os.path.realpath(sys.argv[1]), sys.argv[2] == "1"
import lightning  # noqa: E402
import lightning_xpu  # noqa: E402

inside = lambda p: os.path.realpath(p).startswith(root + os.sep)  # noqa: E731
bad = [m.__name__ for m in (lightning, lightning_xpu) if not inside(m.__file__)]
if with_base:
    bad += [p for p in sys.path if p and os.path.exists(p) and not inside(p)]
    bad += [] if inside(sys.base_prefix + os.sep + "x") else [f"sys.base_prefix {sys.base_prefix}"]
if bad:
    sys.exit("not from the copy: " + ", ".join(bad))
print("ok")
PY
	) 2>&1 {_lxpu_lock_fd}>&-)" || status=$?
	rm -rf "$tmp"
	_lxpu_pack_unpacked_bytes="$(cat "$tmp.bytes" 2>/dev/null || echo 0)"
	rm -f "$tmp.bytes"
	if [[ "$status" != 0 ]]; then
		_lxpu_pack_last_error="the unpacked copy did not run: $(tail -n 1 <<<"$out")"
		_lxpu_say "$_lxpu_pack_last_error"
		return 1
	fi
	return 0
}

# pack.env (for lightning-xpu-stage, read without Python) and pack.json (for the manifest).
_lxpu_pack_record() {
	local dir="$1" status="$2" note="$3" format="${4:-}" base="${5:-0}" sha="" bytes=0 unpacked=0
	mkdir -p "$dir"
	if [[ "$status" == ok ]]; then
		sha="$(sha256sum "$dir/env.$format" | cut -d' ' -f1)"
		bytes="$(stat -c %s "$dir/env.$format")"
		unpacked="${_lxpu_pack_unpacked_bytes:-0}"
	fi
	{
		printf 'status=%s\n' "$status"
		printf 'file=%s\n' "${sha:+share/lightning-xpu/pack/env.$format}"
		printf 'format=%s\n' "$format"
		printf 'sha256=%s\n' "$sha"
		printf 'bytes=%s\n' "$bytes"
		printf 'unpacked_bytes=%s\n' "$unpacked"
		printf 'base_staged=%s\n' "$base"
		printf 'libpython=%s\n' "$([[ "$base" == 1 && "${_lxpu_pack_runpath_kept:-0}" == 1 ]] && echo 1 || echo 0)"
		printf 'site=%s\n' "$LXPU_SITE"
		printf 'tag=%s\n' "$_lxpu_tag"
		printf 'note=%s\n' "${note//$'\n'/ }"
	} >"$dir/pack.env"
	"$_lxpu_py" - "$dir/pack.env" "$dir/pack.json" <<'PY' {_lxpu_lock_fd}>&-
import json
import sys

fields = dict(line.rstrip("\n").split("=", 1) for line in open(sys.argv[1]) if "=" in line)
record = {
    "status": fields["status"],
    "file": fields["file"] or None,
    "format": fields["format"] or None,
    "sha256": fields["sha256"] or None,
    "bytes": int(fields["bytes"]),
    "unpacked_bytes": int(fields["unpacked_bytes"]),
    "base": {"staged": fields["base_staged"] == "1", "why_not": None if fields["base_staged"] == "1" else fields["note"]},
    "note": fields["note"] or None,
}
if fields["status"] != "ok":
    record["base"] = None
json.dump(record, open(sys.argv[2], "w"), indent=2)
PY
}

_lxpu_pack_finish() {
	local dir="$1" format="$2" base="$3" note="$4"
	_lxpu_pack_record "$dir" ok "$note" "$format" "$base"
	_lxpu_say "image: $dir/env.$format ($(($(stat -c %s "$dir/env.$format") / 1048576)) MiB$([[ "$base" == 1 ]] && echo ', with the base interpreter'))"
}

_lxpu_pack_give_up() {
	local dir="$1" why="$2"
	rm -f "$dir"/env.tar.*
	_lxpu_warn "no packed image: $why; jobs run from the shared install"
	_lxpu_pack_record "$dir" refused "$why"
}
