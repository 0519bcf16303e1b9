#!/usr/bin/env bash
# t0017: whole software environments through storm-bcast on 4 real slurmd,
# as the unprivileged user nobody.
#  - --send-libs with --libs-from: python3 (Debian's) and its libraries,
#    with the extension modules it dlopen()s for bz2 and ctypes and the
#    library ctypes dlopen()s by name (libbz2.so -> libbz2.so.1.0 ->
#    libbz2.so.1.0.4, one link absolute at the source), arrive in
#    /tmp/py_libs as the same links and one file each; on every node the
#    copy runs with only that directory on LD_LIBRARY_PATH, and every
#    shared object it maps but the loader and the extension modules comes
#    from there.  srun --bcast --send-libs puts DEST_libs first in the
#    tasks' LD_LIBRARY_PATH, as stock slurmd does, and sends the libraries
#    STORM_BCAST_LIBS_FROM=FILE lists too (a bad list fails srun, naming
#    its line, before anything is sent).
#  - a venv (python3 -m venv; setuptools installed again from Debian's
#    wheel with pip --no-index) with --venv-relocate: on every node python
#    imports pip and setuptools from the copy, bin/pip's #! line and
#    activate name the copy.  A conda-pack-shaped directory with
#    --conda-unpack runs its bin/conda-unpack on every node, as nobody; a
#    relocation step that fails on one node fails storm-bcast, naming it;
#    one that hangs on a node is cancelled after --unpack-timeout, naming
#    the node still running it.
#  - srun --bcast of a directory is refused, naming it (by srun itself,
#    as stock); nothing is sent and no task runs.
#  - progress: on a terminal (script(1)), files and bytes; nothing when
#    stderr is not one.
. "$(dirname "$0")/lib.sh"
t_require_root
t_require_installed
command -v setpriv > /dev/null || t_skip "needs setpriv (util-linux)"
PY=/usr/bin/python3
[ -x "$PY" ] && "$PY" -c 'import venv, ensurepip' 2> /dev/null || t_skip "needs Debian's python3 and python3-venv"
BZ2DEV=$(ls /usr/lib/*/libbz2.so 2> /dev/null | head -1)
[ -L "$BZ2DEV" ] || t_skip "needs libbz2.so (libbz2-dev)"
BCAST="$STORM_BUILDDIR/tools/storm-bcast"
N=4
vc_up "$N"
NODES=$("$VC" nodes | tr "\n" " ")
chmod 1777 "$T_WORK"
# on_nodes OUT CMD...: CMD as nobody once on each node (a step), into OUT
on_nodes() {
    local out=$1; shift
    as_user srun --jobid="$job" -N "$N" --ntasks-per-node=1 "$@" > "$T_WORK/$out" 2>&1
    local rc=$?; t_diag < "$T_WORK/$out"; return $rc
}
# lines OUT PATTERN: how many lines of OUT match PATTERN (grep -E)
lines() { grep -cE "$2" "$T_WORK/$1"; }
# every_node CMD EXPECTED: CMD (sh) prints EXPECTED on every node
every_node() {
    local n bad=0 got
    for n in $NODES; do
        got=$("$VC" exec "$n" sh -c "$1" 2>&1)
        [ "$got" = "$2" ] || { echo "$n: $got (not $2)" | t_diag; bad=1; }
    done
    return $bad
}
nobody_job "$N" 10
SRC=$T_WORK/src
as_user mkdir -p "$SRC"

# --- --send-libs with a list of dlopen()ed libraries ------------------------------
"$PY" -c 'import _bz2, _ctypes; print(_bz2.__file__); print(_ctypes.__file__)' > "$T_WORK/modules"
{ echo "# what python3 dlopen()s for bz2 and ctypes, and what ctypes loads by name"
  cat "$T_WORK/modules"; echo "$BZ2DEV"; } > "$SRC/dlopen.list"
BZ2_1=$(readlink "$BZ2DEV")         # /lib/x86_64-linux-gnu/libbz2.so.1.0 (absolute)
BZ2_FILE=$(basename "$(readlink -f "$BZ2DEV")")
ZLIB=$(readlink -f "$(ldd "$PY" | sed -n 's/.*libz.so.1 => \([^ ]*\) .*/\1/p')")
Z_FILE=$(basename "$ZLIB")
t_check "(set-up) libbz2.so -> $BZ2_1 -> $BZ2_FILE at the source" bash -c "[ -L '$BZ2_1' ] && [ -n '$BZ2_FILE' ] && [ -n '$Z_FILE' ]"
# (--exclude=none: Slurm's default BcastExclude leaves out /lib, /usr/lib,
# /lib64 and /usr/lib64, which hold everything python3 loads)
t_check "storm-bcast --send-libs --libs-from --exclude=none python3 to /tmp/py" \
    b -v --exclude=none --libs-from="$SRC/dlopen.list" "$PY" /tmp/py
t_check "  the libraries went to /tmp/py_libs" grep -q "libraries -> /tmp/py_libs on $N nodes" "$T_WORK/b.out"
t_check "  libbz2.so -> libbz2.so.1.0 -> $BZ2_FILE (the absolute link by name), a file, on every node" \
    every_node "cd /tmp/py_libs && echo \$(readlink libbz2.so) \$(readlink libbz2.so.1.0) \$(stat -c %F $BZ2_FILE)" \
    "libbz2.so.1.0 $BZ2_FILE regular file"
t_check "  libz.so.1 -> $Z_FILE, and the bytes of the library, on every node" \
    every_node "readlink /tmp/py_libs/libz.so.1; md5sum < /tmp/py_libs/$Z_FILE" \
    "$(printf '%s\n%s' "$Z_FILE" "$(md5sum < "$ZLIB")")"
t_check "  the extension modules listed and their libraries (libffi) too" \
    every_node "cd /tmp/py_libs && ls $(basename "$(sed -n 1p "$T_WORK/modules")") $(basename "$(sed -n 2p "$T_WORK/modules")") && ls libffi.so.* | head -1 | cut -c1-9" \
    "$(basename "$(sed -n 1p "$T_WORK/modules")")
$(basename "$(sed -n 2p "$T_WORK/modules")")
libffi.so"
cat > "$SRC/maps.py" << 'PYEOF'
import os, sys
if sys.argv[2:] == ["dlopen"]:
    import bz2, ctypes
    assert bz2.decompress(bz2.compress(b"storm" * 100)) == b"storm" * 100
    ctypes.CDLL("libbz2.so").BZ2_bzlibVersion
maps = sorted({l.split()[-1] for l in open("/proc/self/maps") if ".so" in l.split()[-1]})
lib = sys.argv[1] + "/"
ours = [p for p in maps if p.startswith(lib)]
other = [p for p in maps if not p.startswith(lib) and "/lib-dynload/" not in p and "/ld-linux" not in p]
print(os.environ["SLURMD_NODENAME"], "ran", sys.executable, "with", len(ours), "libraries of", lib,
      " ".join(os.path.basename(p) for p in ours), "others:", other)
PYEOF
chmod 644 "$SRC/maps.py"
on_nodes run1 env LD_LIBRARY_PATH=/tmp/py_libs PYTHONHOME=/usr /tmp/py "$SRC/maps.py" /tmp/py_libs dlopen
t_check "  on every node the copy runs with LD_LIBRARY_PATH=/tmp/py_libs, bz2 and ctypes.CDLL(\"libbz2.so\") work" \
    [ "$(lines run1 "^vn[0-9]+ ran /tmp/py with")" = "$N" ]
t_check "  every library it maps (but the loader and the modules) is from /tmp/py_libs: libc, libz, libbz2, libffi" \
    [ "$(lines run1 "libraries of /tmp/py_libs/ .*\blibc\.so\.6 .*\b$Z_FILE\b.*others: \[\]$")" = "$N" ]
t_check "    $BZ2_FILE among them" [ "$(lines run1 " $BZ2_FILE .*others: \[\]$")" = "$N" ]
t_check "    libffi among them" [ "$(lines run1 " libffi\.so\.[0-9.]+ .*others: \[\]$")" = "$N" ]
echo "/usr/lib/nope.so" > "$SRC/bad.list"; echo "libz.so.1" >> "$SRC/bad.list"
t_check "a relative path in the list: exit 1, naming the line, nothing sent" fails b --libs-from="$SRC/bad.list" "$PY" /tmp/bad
t_check "  naming it" grep -q "bad.list: library list, line 2: \"libz.so.1\" is not an absolute path" "$T_WORK/b.out"
t_check "  nothing on any node" every_node "ls -d /tmp/bad /tmp/bad_libs 2>/dev/null | wc -l" 0

# --- srun --bcast --send-libs: DEST_libs first in LD_LIBRARY_PATH ------------------
cd "$T_WORK" || t_bail "cd $T_WORK"
as_user env PYTHONHOME=/usr LD_LIBRARY_PATH=/nonexistent STORM_BCAST_LIBS_FROM="$SRC/dlopen.list" \
    srun --jobid="$job" -N "$N" --ntasks-per-node=1 \
    --bcast=/tmp/sp --send-libs --bcast-exclude=none "$PY" "$SRC/maps.py" /tmp/sp_libs dlopen > "$T_WORK/run2" 2>&1
rc=$?
t_diag < "$T_WORK/run2"
t_check "srun --bcast=/tmp/sp --send-libs python3: every task ran /tmp/sp with its libraries from /tmp/sp_libs (rc $rc)" \
    [ "$(lines run2 "^vn[0-9]+ ran /tmp/sp with .*\b$Z_FILE\b.*others: \[\]$")" = "$N" ]
t_check "  with STORM_BCAST_LIBS_FROM: bz2 and ctypes.CDLL(\"libbz2.so\") work, $BZ2_FILE from /tmp/sp_libs" \
    [ "$(lines run2 "^vn[0-9]+ ran /tmp/sp with .* $BZ2_FILE .*others: \[\]$")" = "$N" ]
t_check "  libbz2.so -> libbz2.so.1.0 -> $BZ2_FILE there" \
    every_node "cd /tmp/sp_libs && echo \$(readlink libbz2.so) \$(readlink libbz2.so.1.0)" "libbz2.so.1.0 $BZ2_FILE"
as_user env STORM_BCAST_LIBS_FROM="$SRC/bad.list" srun --jobid="$job" -N "$N" --ntasks-per-node=1 \
    --bcast=/tmp/sp3 --send-libs --bcast-exclude=none "$PY" -c 'print("ran")' > "$T_WORK/run2b" 2>&1
rc=$?
t_diag < "$T_WORK/run2b"
t_check "STORM_BCAST_LIBS_FROM with a relative path in it: srun fails (rc $rc), no task runs" \
    bash -c "[ $rc != 0 ] && ! grep -q '^ran' '$T_WORK/run2b'"
t_check "  naming the list's line" grep -q "bad.list: library list, line 2: \"libz.so.1\" is not an absolute path" "$T_WORK/run2b"
t_check "  nothing sent" every_node "ls -d /tmp/sp3 /tmp/sp3_libs 2>/dev/null | wc -l" 0
on_nodes run3 --bcast=/tmp/sp2 --send-libs --bcast-exclude=none /usr/bin/printenv LD_LIBRARY_PATH
t_check "  LD_LIBRARY_PATH: /tmp/sp2_libs first" [ "$(lines run3 "^/tmp/sp2_libs(:|$)")" = "$N" ]
t_check "  libz.so.1 -> $Z_FILE there" every_node "readlink /tmp/sp_libs/libz.so.1" "$Z_FILE"

# --- a venv, relocated on every node -------------------------------------------------
as_user env HOME="$T_WORK" PIP_NO_CACHE_DIR=1 "$PY" -m venv "$SRC/venv" > "$T_WORK/venv.out" 2>&1 &&
    as_user env HOME="$T_WORK" PIP_NO_CACHE_DIR=1 "$SRC/venv/bin/pip" install -q --no-index \
        --find-links=/usr/share/python-wheels --force-reinstall setuptools >> "$T_WORK/venv.out" 2>&1
rc=$?
t_diag < "$T_WORK/venv.out"
t_check "(set-up) a venv with pip and setuptools from Debian's wheels (pip install --no-index; rc $rc)" \
    bash -c "[ $rc = 0 ] && head -1 '$SRC/venv/bin/pip' | grep -qx '#!$SRC/venv/bin/python3'"
ls -la "$SRC/venv/bin" | t_diag
t_check "storm-bcast --venv-relocate of the venv to /tmp/venv" b -v --venv-relocate "$SRC/venv" /tmp/venv
t_check "  relocated on every node" \
    [ "$(grep -c "^storm-venv-relocate: /tmp/venv: [1-9][0-9]* files now name it instead of $SRC/venv\$" "$T_WORK/b.out")" = "$N" ]
t_check "  the source is unchanged" bash -c "head -1 '$SRC/venv/bin/pip' | grep -qx '#!$SRC/venv/bin/python3'"
cat > "$SRC/venv.sh" << 'SHEOF'
n=$SLURMD_NODENAME
echo "$n pip-shebang $(head -1 /tmp/venv/bin/pip)"
/tmp/venv/bin/python3 -c 'import os, sys, setuptools, pip
print(os.environ["SLURMD_NODENAME"], "prefix", sys.prefix, "pip", pip.__file__, "setuptools", setuptools.__file__)'
echo "$n pip-version $(/tmp/venv/bin/pip --version)"
. /tmp/venv/bin/activate && echo "$n activated $VIRTUAL_ENV $(command -v python) $(python -c 'import sys; print(sys.prefix)')"
SHEOF
on_nodes run4 bash "$SRC/venv.sh"
t_check "  on every node bin/pip's #! line names the copy" [ "$(lines run4 "^vn[0-9]+ pip-shebang #!/tmp/venv/bin/python3$")" = "$N" ]
t_check "  python imports pip and setuptools from the copy on every node (__file__ under /tmp/venv)" \
    [ "$(lines run4 "^vn[0-9]+ prefix /tmp/venv pip /tmp/venv/lib/python3[.0-9]*/site-packages/pip/__init__.py setuptools /tmp/venv/lib/python3[.0-9]*/site-packages/setuptools/__init__.py$")" = "$N" ]
t_check "  bin/pip runs from the copy" [ "$(lines run4 "^vn[0-9]+ pip-version pip [0-9.]+ from /tmp/venv/lib/")" = "$N" ]
t_check "  activate sets VIRTUAL_ENV and PATH to the copy" \
    [ "$(lines run4 "^vn[0-9]+ activated /tmp/venv /tmp/venv/bin/python /tmp/venv$")" = "$N" ]

# --- conda-pack's step, and a step that fails on one node --------------------------------
as_user mkdir -p "$SRC/conda/bin" "$SRC/noconda"
printf '#!/bin/sh\n# stands for conda-pack'"'"'s script: it runs in the copy, as the user\necho "$(id -un) $PWD" > "$(dirname "$0")/../unpacked.$SLURMD_NODENAME"\n' |
    as_user tee "$SRC/conda/bin/conda-unpack" > /dev/null
chmod 755 "$SRC/conda/bin/conda-unpack"
t_check "storm-bcast --conda-unpack of a conda-pack directory" b --conda-unpack "$SRC/conda" /tmp/conda
t_check "  its bin/conda-unpack ran on every node, as nobody, in the copy" \
    every_node 'cat /tmp/conda/unpacked.$(ls /tmp/conda | sed -n "s/^unpacked\.//p")' "nobody /tmp/conda"
t_check "  once per node" every_node 'ls /tmp/conda | grep -c ^unpacked' 1
t_check "--conda-unpack of a directory without bin/conda-unpack: exit 1" fails b --conda-unpack "$SRC/noconda" /tmp/noconda
t_check "  saying so, before sending anything" bash -c "grep -q 'has no bin/conda-unpack' '$T_WORK/b.out' &&
    [ -z \"\$(for n in $NODES; do '$VC' exec \$n ls -d /tmp/noconda 2>/dev/null; done)\" ]"
t_check "--unpack that fails on vn3: exit 1" fails b -f --unpack='[ "$SLURMD_NODENAME" != vn3 ] || exit 7' "$SRC/conda" /tmp/conda
t_check "  naming vn3 and its status" \
    grep -q "is in place on every node, but its relocation step failed on 1 of $N nodes: vn3 (exit 7)" "$T_WORK/b.out"
start=$(date +%s.%N)
t_check "--unpack that hangs on vn2, --unpack-timeout=2: exit 1" \
    fails b -f --unpack-timeout=2 --unpack='[ "$SLURMD_NODENAME" != vn2 ] || exec sleep 297' "$SRC/conda" /tmp/conda
took=$(echo "$(date +%s.%N) - $start" | bc)
t_check "  naming vn2 as still running and the timeout" \
    grep -q "is in place on every node, but its relocation step did not end within 2 s (--unpack-timeout) and was cancelled: vn2 (still running)\$" "$T_WORK/b.out"
t_check "  within 15 s (${took} s)" [ "$(echo "$took < 15" | bc)" = 1 ]
for _ in $(seq 50); do pgrep -u nobody -fx "sleep 297" > /dev/null || break; sleep 0.1; done
t_check "  the step was cancelled: its sleep is gone" fails pgrep -u nobody -fx "sleep 297"

# --- srun --bcast of a directory ---------------------------------------------------
as_user srun --jobid="$job" -N "$N" --bcast=/tmp/dirprog "$SRC/conda" > "$T_WORK/run5" 2>&1
rc=$?
t_diag < "$T_WORK/run5"
t_check "srun --bcast of a directory: refused (rc $rc)" [ "$rc" != 0 ]
# srun itself refuses it when it checks its options (search_path, X_OK),
# before any plugin runs; cli_filter/storm would too, with its reason
t_check "  naming it" grep -qE "srun: fatal: Can not execute $SRC/conda\$|cannot broadcast $SRC/conda: $SRC/conda is a directory" "$T_WORK/run5"
t_check "  nothing sent" every_node "ls -d /tmp/dirprog 2>/dev/null | wc -l" 0

# --- progress: files and bytes on a terminal, nothing otherwise ------------------------
as_user mkdir -p "$SRC/many"
as_user sh -c "cd '$SRC/many' && for i in \$(seq 1 20); do head -c 100000 /dev/urandom > f\$i; done && ln -s f1 link"
t_check "without a terminal: no progress" b "$SRC/many" /tmp/many1
t_check "  (nothing at all on stderr)" [ ! -s "$T_WORK/b.out" ]
if command -v script > /dev/null; then
    script -qec "setpriv --reuid=nobody --regid=nogroup --clear-groups '$BCAST' -j '$job' '$SRC/many' /tmp/many2" \
        /dev/null > "$T_WORK/tty.out" 2>&1
    rc=$?
    tr '\r' '\n' < "$T_WORK/tty.out" | t_diag
    t_check "on a terminal (script): exit 0, and the last line says 20 of 20 files, 2.0 of 2.0 MB (rc $rc)" \
        bash -c "[ $rc = 0 ] && tr '\r' '\n' < '$T_WORK/tty.out' | grep -q 'storm-bcast: $SRC/many 100% 20 of 20 files, 2.0 of 2.0 MB, '"
else
    echo "# script(1) is not installed: the terminal's progress is not checked"
fi
scancel "$job"
t_done
