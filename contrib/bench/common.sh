# shellcheck shell=bash
# Shell helpers the benchmarks share (sourced, not run).

# median VALUE...: the middle value, or of an even count the mean of the two
# middle ones (to as many decimals as they have); "failed" counts as the
# slowest (a mean with it is "failed"); any "corrupt" wins; "-" stays "-";
# "held" (not measured) is left out, and is the answer only if all are
median() {
    case " $* " in *" corrupt "*) echo corrupt; return ;; *" - "*) echo -; return ;; esac
    local v=() x
    for x in "$@"; do [ "$x" = held ] || v+=("$x"); done
    [ ${#v[@]} -gt 0 ] || { echo held; return; }
    printf '%s\n' "${v[@]}" | sed 's/^failed$/1e18/' | sort -g |
        awk 'function decimals(x) { return index(x, ".") ? length(x) - index(x, ".") : 0 }
            { v[NR] = $1 }
            END {
                lo = v[int((NR + 1) / 2)]; hi = v[int(NR / 2) + 1]
                if (hi + 0 >= 1e18) print "failed"
                else if (lo == hi) print lo
                else printf "%." (decimals(lo) > decimals(hi) ? decimals(lo) : decimals(hi)) "f\n", (lo + hi) / 2
            }'
}

# ratio A B [FORMAT]: A / B printed with FORMAT (default "%.1fx": "1.2x"),
# or "-" unless both are positive numbers
ratio() { awk -v a="$1" -v b="$2" -v f="${3:-%.1fx}" 'BEGIN { if (a + 0 > 0 && b + 0 > 0) printf f, a / b; else printf "-" }'; }

# check_reps NAME VALUE: exits 2 unless VALUE is a positive whole number
check_reps() {
    [[ $2 =~ ^[1-9][0-9]*$ ]] || { echo "$1: -k REPS must be a positive whole number, not \"$2\"" >&2; exit 2; }
}

# vc_up MODE(stock|storm) NODES CONF-LINE...: a fresh virtual cluster of
# NODES nodes, stock Slurm's plugins or Storm's, with CONF-LINEs appended to
# slurm.conf; its environment is exported. Needs VC and work; exits 1 (with
# the tool's output) when the cluster does not come up.
# shellcheck disable=SC2154 # VC and work are the calling benchmark's
vc_up() {
    local mode=$1 n=$2 l
    shift 2
    local -a args=()
    [ "$mode" = stock ] && args+=(--stock)
    for l in "$@"; do args+=(--conf "$l"); done
    "$VC" down > /dev/null 2>&1
    "$VC" up "$n" "${args[@]}" > "$work/up.out" 2>&1 || { cat "$work/up.out" >&2; exit 1; }
    eval "$("$VC" env)"
}

# agents_cipher STATE: the AES-GCM implementation the running cluster's
# agents chose for multicast, from vn1's start-up line ("" if none logged)
agents_cipher() {
    sed -n 's/.*multicast data path on group .*, AES-GCM by //p' "$1/log/slurmd-vn1.log" 2>/dev/null | tail -n 1
}
