#!/usr/bin/env bash
# t0003: configure and make install refuse bad input with a clear message
# and a non-zero exit: no --with-slurm-source, a directory that is not a
# Slurm tree, a tree not configured (no config.h), a Slurm version other than
# the installed one, a release line Storm does not support, a --with-slurm
# prefix that holds no Slurm, and a PluginDir that is missing or not
# writable.  Run on the line the tree was configured for (--with-slurm).
. "$(dirname "$0")/lib.sh"
slurm_src=$(sed -n 's/^SLURM_SRC = //p' "$STORM_BUILDDIR/Makefile")
[ -f "$slurm_src/config.h" ] || t_bail "the build tree's Slurm source ($slurm_src) has no config.h"
line=()
[ -z "$STORM_SLURM_PREFIX" ] || line=(--with-slurm="$STORM_SLURM_PREFIX")

# A scratch copy of the configured sources, so the real build tree is
# untouched (the tree is configured in place: no VPATH build from it).
b="$T_WORK/build"
mkdir -p "$b"
(cd "$STORM_SRCDIR" && cp -pR configure configure.ac Makefile.in Makefile.am aclocal.m4 storm_config.h.in \
    build-aux m4 lib launch_bcast sched_gang switch_rdma cosched agent slurm_adapter plugins tools tests contrib "$b/") || t_bail "cannot copy the sources to $b"

# the build's compilers (ccache where storm-setup found it)
cc=$(sed -n 's/^CC = //p' "$STORM_BUILDDIR/Makefile") cxx=$(sed -n 's/^CXX = //p' "$STORM_BUILDDIR/Makefile")
conf() { (cd "$b" && ./configure -q CC="$cc" CXX="$cxx" "${line[@]}" "$@") > "$T_WORK/conf.out" 2>&1; }
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
# fake_version MAJOR MINOR MICRO: the fake tree's config.h says that version.
fake_version() {
    sed -e "s/^#define SLURM_VERSION_NUMBER .*/#define SLURM_VERSION_NUMBER $(printf '0x%02x%02x%02x' "$1" "$2" "$3")/" \
        -e "s/^#define SLURM_VERSION_STRING .*/#define SLURM_VERSION_STRING \"$1.$(printf %02d "$2").$3\"/" \
        "$slurm_src/config.h" > "$fake/config.h"
}
real=$(awk '$1 == "#define" && $2 == "SLURM_VERSION_NUMBER" { print $3 }' "$slurm_src/config.h")
maj=$((real >> 16)) min=$(((real >> 8) & 255)) mic=$((real & 255))
fake_version "$maj" "$min" $((mic + 1))
expect_refusal "mismatched Slurm version" \
    "is $maj.$(printf %02d "$min").$((mic + 1)) ($(printf '0x%06x' $((real + 1)))) but the installed Slurm is $(printf '0x%06x' "$real")" \
    --with-slurm-source="$fake"
fake_version 23 2 7
expect_refusal "an unsupported release line" \
    "Slurm 23.02.7 (line 23.02) is not supported: Storm supports the lines 22.05, 24.11, 25.11 and 26.05" \
    --with-slurm-source="$fake"
expect_refusal "--with-slurm: not a directory" "with-slurm: $T_WORK/nonexistent is not a directory" \
    --with-slurm="$T_WORK/nonexistent" --with-slurm-source="$slurm_src"
expect_refusal "--with-slurm: no Slurm installed there" "holds no installed Slurm (no include/slurm/slurm_version.h or sbin/slurmd)" \
    --with-slurm="$T_WORK/notslurm" --with-slurm-source="$slurm_src"


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
    want=$(for p in $(t_make_var STORM_PLUGINS); do basename "$p" .la; done | sed 's/$/.so/' | sort | tr '\n' ' ')
    t_check "make install puts exactly the plugins' .so files into PluginDir ($want)" \
        [ "$(ls "$T_WORK/ro" | tr '\n' ' ')" = "$want" ]
    t_check "  and storm-bcast and storm-gang into the bin directory" [ -x "$T_WORK/prefix/bin/storm-bcast" -a -x "$T_WORK/prefix/bin/storm-gang" ]
else
    t_diag < "$T_WORK/conf.out"; t_fail "configure with an explicit PluginDir"
fi
t_done
