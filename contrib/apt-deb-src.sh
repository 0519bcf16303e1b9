#!/usr/bin/env bash
# Derive deb-src entries from this machine's own Debian apt sources.
#
# Prints a deb822 sources file on stdout: one "Types: deb-src" stanza for
# every enabled "Types: deb" stanza (deb822 *.sources files) or one-line
# "deb" entry (sources.list, *.list) whose suite belongs to this Debian
# release (its codename, or codename-something).  Third-party entries with
# other suites are skipped, because most of them publish no source indexes.
# No host name is ever written by hand: every URI comes from /etc/apt.
set -euo pipefail
codename=$( . /etc/os-release && echo "${VERSION_CODENAME:-}" )
[ -n "$codename" ] || { echo "apt-deb-src: no VERSION_CODENAME in /etc/os-release" >&2; exit 1; }

emit() { # uris suites components signedby
    local uris=$1 suites=$2 comps=$3 signed=$4 keep="" s
    for s in $suites; do
        case "$s" in "$codename"|"$codename"-*) keep="$keep $s" ;; esac
    done
    [ -n "$keep" ] || return 0
    printf 'Types: deb-src\nURIs: %s\nSuites:%s\nComponents: %s\n' "$uris" "$keep" "$comps"
    [ -z "$signed" ] || printf 'Signed-By: %s\n' "$signed"
    printf '\n'
}

shopt -s nullglob
for f in /etc/apt/sources.list.d/*.sources; do
    case "$f" in */storm-deb-src.sources) continue ;; esac
    # deb822: stanzas separated by blank lines; skip comments.
    awk 'BEGIN{RS=""; FS="\n"}
         { types=""; uris=""; suites=""; comps=""; signed=""; enabled="yes"
           for (i=1;i<=NF;i++) { line=$i; if (line ~ /^#/) continue
             k=line; sub(/:.*/,"",k); v=line; sub(/^[^:]*:[ \t]*/,"",v)
             if (k=="Types") types=v; else if (k=="URIs") uris=v
             else if (k=="Suites") suites=v; else if (k=="Components") comps=v
             else if (k=="Signed-By") signed=v; else if (k=="Enabled") enabled=v }
           if (enabled=="no" || (" " types " ") !~ / deb /) next
           printf "%s\t%s\t%s\t%s\n", uris, suites, comps, signed }' "$f"
done | while IFS=$'\t' read -r uris suites comps signed; do emit "$uris" "$suites" "$comps" "$signed"; done

for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
    [ -f "$f" ] || continue
    # one-line form: deb [opts] uri suite comp...
    sed -e 's/#.*//' "$f" | awk '$1=="deb" { opts=""; i=2
            if ($2 ~ /^\[/) { while (i<=NF && $i !~ /\]$/) { opts=opts " " $i; i++ } opts=opts " " $i; i++ }
            signed=""; if (match(opts, /signed-by=[^] ]*/)) signed=substr(opts, RSTART+10, RLENGTH-10)
            uri=$i; suite=$(i+1); comps=""; for (j=i+2;j<=NF;j++) comps=comps (comps==""?"":" ") $j
            printf "%s\t%s\t%s\t%s\n", uri, suite, comps, signed }'
done | while IFS=$'\t' read -r uris suites comps signed; do emit "$uris" "$suites" "$comps" "$signed"; done
