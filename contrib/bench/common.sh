# shellcheck shell=bash
# Shell helpers the benchmarks share (sourced, not run).

# median VALUE...: "failed" counts as the slowest; any "corrupt" wins; "-" stays "-"
median() {
    case " $* " in *" corrupt "*) echo corrupt; return ;; *" - "*) echo -; return ;; esac
    printf '%s\n' "$@" | sed 's/^failed$/1e18/' | sort -g |
        awk '{ v[NR] = $1 } END { m = v[int((NR + 1) / 2)]; if (m + 0 >= 1e18) print "failed"; else print m }'
}

# check_reps NAME VALUE: exits 2 unless VALUE is a positive whole number
check_reps() {
    [[ $2 =~ ^[1-9][0-9]*$ ]] || { echo "$1: -k REPS must be a positive whole number, not \"$2\"" >&2; exit 2; }
}
