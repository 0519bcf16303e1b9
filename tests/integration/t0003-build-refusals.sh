#!/usr/bin/env bash
# t0003: configure and make install refuse bad input with a clear message
# and a non-zero exit: no --with-slurm-source, a directory that is not a
# Slurm tree, a tree not configured (no config.h), a Slurm version other than
# the installed one, and a PluginDir that is missing or not writable.
. "$(dirname "$0")/lib.sh"
slurm_src=$(sed -n 's/^SLURM_SRC = //p' "$STORM_BUILDDIR/Makefile")
[ -f "$slurm_src/config.h" ] || t_bail "the build tree's Slurm source ($slurm_src) has no config.h"

# A scratch copy of the configured sources, so the real build tree is
# untouched (the tree is configured in place: no VPATH build from it).
b="$T_WORK/build"
mkdir -p "$b"
(cd "$STORM_SRCDIR" && cp -pR configure configure.ac Makefile.in Makefile.am aclocal.m4 storm_config.h.in \
    build-aux m4 lib launch_bcast sched_gang switch_rdma cosched agent slurm_adapter plugins tools tests contrib "$b/") || t_bail "cannot copy the sources to $b"

conf() { (cd "$b" && ./configure -q "$@") > "$T_WORK/conf.out" 2>&1; }
expect_refusal() { # description expected-message configure-args...
    local d=$1 msg=$2; shift 2
    if conf "$@"; then t_fail "$d: configure succeeded"; return; fi
    if grep -q -- "$msg" "$T_WORK/conf.out"; then t_ok "$d"; else
        t_fail "$d: message \"$msg\" missing"; t_diag < "$T_WORK/conf.out"; fi
}

# A library that pkg-config cannot find (PKG_CONFIG_LIBDIR of an empty dir).
mkdir -p "$T_WORK/no-pc"
PKG_CONFIG_LIBDIR="$T_WORK/no-pc" expect_refusal "missing libevent" "libevent 2.1 not found (Debian: apt-get install libevent-dev)" \
    --with-slurm-source="$slurm_src"
expect_refusal "no --with-slurm-source" "with-slurm-source=DIR is required"
expect_refusal "missing directory" "is not a directory" --with-slurm-source="$T_WORK/nonexistent"
mkdir -p "$T_WORK/notslurm"
expect_refusal "not a Slurm tree" "is not a Slurm source tree" --with-slurm-source="$T_WORK/notslurm"

# A copy of the headers that matter, without config.h, then with another version.
fake="$T_WORK/fake-slurm"
mkdir -p "$fake/src/common" "$fake/slurm"
cp "$slurm_src/src/common/plugin.h" "$fake/src/common/"
cp "$slurm_src/slurm/slurm.h" "$fake/slurm/"
expect_refusal "unconfigured tree" "config.h is missing: run Slurm's ./configure" --with-slurm-source="$fake"
sed -e 's/^#define SLURM_VERSION_NUMBER .*/#define SLURM_VERSION_NUMBER 0x160507/' \
    -e 's/^#define SLURM_VERSION_STRING .*/#define SLURM_VERSION_STRING "22.05.7"/' "$slurm_src/config.h" > "$fake/config.h"
expect_refusal "mismatched Slurm version" "is 22.05.7 (0x160507) but the installed Slurm is 0x160508" --with-slurm-source="$fake"


# configure accepts an explicit PluginDir; make install must refuse it.
if conf --with-slurm-source="$slurm_src" --with-slurm-plugindir="$T_WORK/nodir"; then
    (cd "$b" && make -s -j2 > "$T_WORK/make.out" 2>&1)
    t_check "the scratch tree builds" [ -f "$b/plugins/.libs/switch_rdma.so" -a -x "$b/tools/storm-bcast" ]
    if (cd "$b" && make install prefix="$T_WORK/prefix" > "$T_WORK/install.out" 2>&1); then t_fail "make install into a missing PluginDir succeeded"
    else t_check "make install: missing PluginDir refused" grep -q "PluginDir $T_WORK/nodir does not exist" "$T_WORK/install.out"; fi
    mkdir -p "$T_WORK/ro"; chmod 755 "$T_WORK/ro"
    if [ "$(id -u)" = 0 ] && command -v setpriv > /dev/null; then
        (cd "$b" && setpriv --reuid=nobody --regid=nogroup --clear-groups make install prefix="$T_WORK/prefix" plugindir="$T_WORK/ro" > "$T_WORK/install2.out" 2>&1)
        rc=$?
        t_check "make install: unwritable PluginDir refused (rc $rc)" \
            bash -c "[ $rc != 0 ] && grep -q 'PluginDir $T_WORK/ro is not writable by nobody' '$T_WORK/install2.out'"
        t_check "nothing written into the unwritable PluginDir" [ -z "$(ls -A "$T_WORK/ro")" ]
    fi
    t_check "  nor storm-bcast nor storm-gang" [ ! -e "$T_WORK/prefix/bin/storm-bcast" -a ! -e "$T_WORK/prefix/bin/storm-gang" ]
    (cd "$b" && make install prefix="$T_WORK/prefix" plugindir="$T_WORK/ro" > "$T_WORK/install3.out" 2>&1)
    t_check "make install puts exactly the five .so files into PluginDir" \
        [ "$(ls "$T_WORK/ro" | tr '\n' ' ')" = "launch_bcast.so sched_gang.so select_gang.so spank_storm.so switch_rdma.so " ]
    t_check "  and storm-bcast and storm-gang into the bin directory" [ -x "$T_WORK/prefix/bin/storm-bcast" -a -x "$T_WORK/prefix/bin/storm-gang" ]
else
    t_diag < "$T_WORK/conf.out"; t_fail "configure with an explicit PluginDir"
fi
t_done
