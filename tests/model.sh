#!/usr/bin/env bash
# make check: contrib/model/storm-model fits what it is given, checks the
# held-out points against the tolerance (exit 1 outside it), refuses bad
# data with the line's number (exit 2), and says which points it leaves
# out for want of a floor; and the measurement the README quotes still
# checks within 25%.
set -u
model="${STORM_SRCDIR:?}/contrib/model/storm-model"
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
fail=0
check() { # check WHAT CMD...: CMD must succeed
    local what=$1; shift
    if "$@"; then echo "ok: $what"; else echo "FAIL: $what"; fail=1; fi
}
command -v python3 > /dev/null || { echo "SKIP: needs python3"; exit 77; }

# Data made from known terms: T = 20 ms + h(N) x 30 ms + 0.8 x floor(N),
# h(N) the levels of a fanout-8 tree less one (8: 1, 64: 2, 256 and 512: 3,
# 1000: 4), the floor growing faster than N.
python3 - "$work/exact.txt" <<'PY'
import sys
floor = {8: 0.04, 64: 0.2, 256: 1.1, 512: 4.5, 1000: 19.0}
hops = {8: 1, 64: 2, 256: 3, 512: 3, 1000: 4}
with open(sys.argv[1], "w") as f:
    for n, fl in floor.items():
        f.write(f"{n} 12 floor-sealed {fl}\n")
        f.write(f"{n} 12 storm-mcast {0.02 + hops[n] * 0.03 + 0.8 * fl:.6f}\n")
PY
"$model" "$work/exact.txt" --fit 8,64,256,512 --check 1000 --floor floor-sealed > "$work/out" 2>&1; rc=$?
check "an exact model's held-out point checks within tolerance (rc $rc)" test "$rc" = 0
check "the fit reads back T0, t_hop and k" grep -q "T0 = 20.0 ms   t_hop = 30.000 ms   k = 0.800" "$work/out"
check "the held-out error is printed as about 0" grep -Eq "1000 +12 .* -?0\.0%  held out" "$work/out"

# The held-out point 50% slower than the terms say: exit 1, OUTSIDE.
sed -i 's/^1000 12 storm-mcast .*/1000 12 storm-mcast 22.8/' "$work/exact.txt"
"$model" "$work/exact.txt" --fit 8,64,256,512 --check 1000 --floor floor-sealed > "$work/out" 2>&1; rc=$?
check "a held-out point off by more than the tolerance fails the check (rc $rc)" test "$rc" = 1
check "and says so" grep -q "OUTSIDE" "$work/out"

# A point without its floor is left out, and said so.
grep -v "^512 12 floor-sealed" "$work/exact.txt" > "$work/gap.txt"
echo "16 12 storm-mcast 0.1" >> "$work/gap.txt"
"$model" "$work/gap.txt" --fit 8,16,64,256,512 --check 1000 --floor floor-sealed > "$work/out" 2>&1
check "points without a floor measurement are named" \
    grep -q "no floor-sealed measurement at 512 nodes, 12 MB: point left out" "$work/out"

# Bad data: the line is named, exit 2.
printf '8 12 storm-mcast 0.1\n64 twelve storm-mcast 0.4\n' > "$work/bad.txt"
"$model" "$work/bad.txt" > "$work/out" 2>&1; rc=$?
check "malformed data is refused (rc $rc) with its line number" \
    bash -c "[ $rc = 2 ] && grep -q 'bad.txt:2: nodes, MB and seconds must be numbers' '$work/out'"
"$model" "$work/none.txt" > "$work/out" 2>&1; rc=$?
check "a missing data file is refused (rc $rc)" bash -c "[ $rc = 2 ] && grep -q 'cannot read' '$work/out'"

# The measurement the README quotes.
"$model" "$STORM_SRCDIR/contrib/model/measured-2026-12-01-late.txt" --fit 8,64,256,512 --check 1000 \
    --floor floor-sealed > "$work/out" 2>&1; rc=$?
check "measured-2026-12-01-late.txt: 8-512 nodes predict 1000 within 25% (rc $rc)" test "$rc" = 0
exit $fail
