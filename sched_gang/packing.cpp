#include "sched_gang/packing.hpp"

#include <algorithm>

namespace storm::gang {

namespace {

// Prefix counts over a 0/1 row: count(a, len) in O(1).
class Prefix {
public:
    Prefix(const std::vector<uint8_t> &row, uint32_t size) : sum_(size + 1, 0)
    {
        for (uint32_t i = 0; i < size; ++i)
            sum_[i + 1] = sum_[i] + (i < row.size() ? row[i] : 0);
    }
    uint32_t count(uint32_t a, uint32_t len) const
    {
        uint32_t hi = std::min<uint32_t>(a + len, static_cast<uint32_t>(sum_.size() - 1));
        a = std::min(a, hi);
        return sum_[hi] - sum_[a];
    }

private:
    std::vector<uint32_t> sum_;
};

uint32_t pow2_at_least(uint32_t n)
{
    uint32_t p = 1;
    while (p < n)
        p <<= 1;
    return p;
}

// The machine as 0/1 rows: candidates, and each slot's busy nodes.
struct Rows {
    uint32_t nodes;
    std::vector<uint8_t> cand;
    std::vector<std::vector<uint8_t>> busy;

    Rows(const PackView &view, const std::vector<uint32_t> &candidates)
        : nodes(view.nodes), cand(view.nodes, 0), busy(view.slots.size(), std::vector<uint8_t>(view.nodes, 0))
    {
        for (uint32_t c : candidates)
            if (c < nodes)
                cand[c] = 1;
        for (size_t s = 0; s < view.slots.size(); ++s)
            for (uint32_t n : view.slots[s])
                if (n < nodes)
                    busy[s][n] = 1;
    }
    // Free candidates of slot s (s == busy.size(): a new, empty slot).
    std::vector<uint8_t> free_in(size_t s) const
    {
        std::vector<uint8_t> f(cand);
        if (s < busy.size())
            for (uint32_t i = 0; i < nodes; ++i)
                f[i] = f[i] && !busy[s][i];
        return f;
    }
    uint32_t candidates() const
    {
        uint32_t n = 0;
        for (uint8_t c : cand)
            n += c;
        return n;
    }
};

// Step 3: buddy descent inside [a, a + len), taking n of its free nodes.
void descend(const std::vector<uint8_t> &free, const Prefix &fp, uint32_t a, uint32_t len, uint32_t n,
             std::vector<uint32_t> &out)
{
    if (n == 0)
        return;
    if (n == fp.count(a, len)) {
        for (uint32_t i = a; i < a + len && i < free.size(); ++i)
            if (free[i])
                out.push_back(i);
        return;
    }
    uint32_t h = len / 2;
    uint32_t fl = fp.count(a, h), fr = fp.count(a + h, h);
    if (fl >= n || fr >= n) {
        bool left = fl >= n && (fr < n || fl <= fr); // the tighter half that holds it
        descend(free, fp, left ? a : a + h, h, n, out);
        return;
    }
    bool left_small = fl <= fr;
    uint32_t small = left_small ? a : a + h, other = left_small ? a + h : a;
    uint32_t fs = left_small ? fl : fr;
    descend(free, fp, small, h, fs, out);
    descend(free, fp, other, h, n - fs, out);
}

// Steps 2-3 in slot s; false if the slot has fewer than n free candidates.
bool place_in_slot(const Rows &rows, size_t s, uint32_t n, std::vector<uint32_t> &out)
{
    std::vector<uint8_t> free = rows.free_in(s);
    Prefix fp(free, rows.nodes);
    if (fp.count(0, rows.nodes) < n)
        return false;
    std::vector<Prefix> others;
    for (size_t t = 0; t < rows.busy.size(); ++t)
        if (t != s)
            others.emplace_back(rows.busy[t], rows.nodes);
    uint32_t top = pow2_at_least(rows.nodes);
    for (uint32_t len = pow2_at_least(n); len <= top; len <<= 1) {
        bool found = false;
        std::vector<uint32_t> best;
        for (uint32_t a = 0; a < rows.nodes; a += len) {
            uint32_t f = fp.count(a, len);
            if (f < n)
                continue;
            uint32_t exist = std::min(a + len, rows.nodes) - a, ragged = 0;
            for (const auto &o : others) {
                uint32_t b = o.count(a, len);
                ragged += b > 0 && b < exist;
            }
            // Buddy best fit: the tightest block, then the tightest parent,
            // grandparent, ... (free nodes of the enclosing aligned blocks).
            std::vector<uint32_t> key{f};
            for (uint32_t up = len << 1; up <= top; up <<= 1)
                key.push_back(fp.count(a / up * up, up));
            key.push_back(ragged);
            key.push_back(a);
            if (!found || key < best)
                best = std::move(key);
            found = true;
        }
        if (found) {
            descend(free, fp, best.back(), len, n, out);
            std::sort(out.begin(), out.end());
            return true;
        }
    }
    return false; // not reached: the whole machine holds n free nodes
}

} // namespace

namespace {

// The lowest slot (an existing one, or a new one below max_slots) where
// fit(rows, slot, count, nodes) places the job.
template <class Fit>
Placement lowest_slot(const PackView &view, const std::vector<uint32_t> &candidates, uint32_t count,
                      unsigned max_slots, Fit fit)
{
    Placement p;
    Rows rows(view, candidates);
    if (count == 0 || count > rows.candidates())
        return p;
    for (size_t s = 0; s <= rows.busy.size(); ++s) {
        if (s == rows.busy.size() && s >= max_slots)
            break;
        p.nodes.clear();
        if (fit(rows, s, count, p.nodes)) {
            p.kind = s < rows.busy.size() ? Placement::existing : Placement::new_slot;
            p.slot = static_cast<unsigned>(s);
            return p;
        }
    }
    p.nodes.clear();
    return p;
}

// cons_tres's choice within a slot: the first free nodes in order.
bool first_free(const Rows &rows, size_t s, uint32_t count, std::vector<uint32_t> &out)
{
    std::vector<uint8_t> free = rows.free_in(s);
    for (uint32_t i = 0; i < rows.nodes && out.size() < count; ++i)
        if (free[i])
            out.push_back(i);
    return out.size() == count;
}

} // namespace

Placement place(const PackView &view, const std::vector<uint32_t> &candidates, uint32_t count,
                unsigned max_slots)
{
    return lowest_slot(view, candidates, count, max_slots, place_in_slot);
}

Placement first_fit(const PackView &view, const std::vector<uint32_t> &candidates, uint32_t count,
                    unsigned max_slots)
{
    return lowest_slot(view, candidates, count, max_slots, first_free);
}

PackView pack_view(const Matrix &m, uint32_t nodes)
{
    PackView v{nodes, std::vector<std::vector<uint32_t>>(m.slots())};
    for (const auto &[id, s] : m.homes()) {
        if (s >= v.slots.size())
            continue;
        auto &busy = v.slots[s];
        for (uint64_t c : m.jobs().at(id).cells)
            busy.push_back(static_cast<uint32_t>(c >> 20));
        std::sort(busy.begin(), busy.end());
        busy.erase(std::unique(busy.begin(), busy.end()), busy.end());
    }
    return v;
}

const char *kind_name(Placement::Kind k) noexcept
{
    switch (k) {
    case Placement::existing:
        return "existing slot";
    case Placement::new_slot:
        return "new slot";
    case Placement::none:
        break;
    }
    return "no fit";
}

} // namespace storm::gang
