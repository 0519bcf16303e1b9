#include "lib/net/rangeset.hpp"

#include <algorithm>
#include <cstdlib>
#include <stdexcept>

namespace storm::net {

void RangeSet::append(uint32_t lo, uint32_t hi)
{
    if (lo >= hi)
        return;
    if (!ranges_.empty() && ranges_.back().second == lo)
        ranges_.back().second = hi;
    else
        ranges_.emplace_back(lo, hi);
    size_ += hi - lo;
}

RangeSet RangeSet::range(uint32_t lo, uint32_t hi)
{
    RangeSet s;
    s.append(lo, hi);
    return s;
}

RangeSet RangeSet::of(std::vector<uint32_t> members)
{
    std::sort(members.begin(), members.end());
    members.erase(std::unique(members.begin(), members.end()), members.end());
    RangeSet s;
    for (uint32_t m : members)
        s.append(m, m + 1);
    return s;
}

RangeSet RangeSet::parse(const std::string &text)
{
    RangeSet s;
    size_t pos = 0;
    auto number = [&](void) -> uint32_t {
        size_t start = pos;
        while (pos < text.size() && text[pos] >= '0' && text[pos] <= '9')
            ++pos;
        if (start == pos || pos - start > 8)
            throw std::invalid_argument("node set \"" + text + "\": expected an index at offset " +
                                        std::to_string(start));
        unsigned long v = std::strtoul(text.substr(start, pos - start).c_str(), nullptr, 10);
        if (v >= kMaxIndex)
            throw std::invalid_argument("node set \"" + text + "\": index " + std::to_string(v) +
                                        " too large");
        return static_cast<uint32_t>(v);
    };
    while (pos < text.size()) {
        uint32_t lo = number(), hi = lo;
        if (pos < text.size() && text[pos] == '-') {
            ++pos;
            hi = number();
        }
        if (hi < lo || (!s.ranges_.empty() && lo < s.ranges_.back().second))
            throw std::invalid_argument("node set \"" + text + "\": ranges must increase");
        s.append(lo, hi + 1);
        if (pos < text.size()) {
            if (text[pos] != ',' || pos + 1 == text.size())
                throw std::invalid_argument("node set \"" + text + "\": expected ',' at offset " +
                                            std::to_string(pos));
            ++pos;
        }
    }
    return s;
}

bool RangeSet::contains(uint32_t index) const noexcept
{
    for (const auto &r : ranges_)
        if (index < r.second)
            return index >= r.first;
    return false;
}

uint32_t RangeSet::nth(uint32_t pos) const
{
    for (const auto &r : ranges_) {
        if (pos < r.second - r.first)
            return r.first + pos;
        pos -= r.second - r.first;
    }
    throw std::out_of_range("RangeSet::nth: position beyond the set");
}

RangeSet RangeSet::slice(uint32_t from, uint32_t to) const
{
    RangeSet out;
    uint32_t base = 0; // position of the current range's first member
    for (const auto &r : ranges_) {
        uint32_t len = r.second - r.first;
        uint32_t a = std::max(from, base), b = std::min(to, base + len);
        if (a < b)
            out.append(r.first + (a - base), r.first + (b - base));
        base += len;
        if (base >= to)
            break;
    }
    return out;
}

std::vector<uint32_t> RangeSet::members() const
{
    std::vector<uint32_t> v;
    v.reserve(size_);
    for (const auto &r : ranges_)
        for (uint32_t i = r.first; i < r.second; ++i)
            v.push_back(i);
    return v;
}

RangeSet RangeSet::unite(const RangeSet &o) const
{
    if (o.empty())
        return *this;
    if (empty())
        return o;
    std::vector<std::pair<uint32_t, uint32_t>> all(ranges_);
    all.insert(all.end(), o.ranges_.begin(), o.ranges_.end());
    std::sort(all.begin(), all.end());
    RangeSet out;
    for (const auto &r : all) {
        if (!out.ranges_.empty() && r.first <= out.ranges_.back().second) {
            if (r.second > out.ranges_.back().second) {
                out.size_ += r.second - out.ranges_.back().second;
                out.ranges_.back().second = r.second;
            }
        } else {
            out.append(r.first, r.second);
        }
    }
    return out;
}

std::string RangeSet::str() const
{
    std::string s;
    for (const auto &r : ranges_) {
        if (!s.empty())
            s += ',';
        s += std::to_string(r.first);
        if (r.second - r.first > 1)
            s += '-' + std::to_string(r.second - 1);
    }
    return s;
}

void RangeSet::encode(Writer &w) const
{
    w.u32(static_cast<uint32_t>(ranges_.size()));
    for (const auto &r : ranges_) {
        w.u32(r.first);
        w.u32(r.second);
    }
}

RangeSet RangeSet::decode(Reader &r)
{
    uint32_t n = r.u32();
    if (n > kMaxRanges)
        throw DecodeError("node set of " + std::to_string(n) + " ranges exceeds " +
                          std::to_string(kMaxRanges));
    RangeSet s;
    uint32_t prev_hi = 0;
    for (uint32_t i = 0; i < n; ++i) {
        uint32_t lo = r.u32(), hi = r.u32();
        if (lo >= hi || hi > kMaxIndex || (i > 0 && lo <= prev_hi))
            throw DecodeError("node set range [" + std::to_string(lo) + ", " + std::to_string(hi) +
                              ") is empty, out of order, adjacent or out of bounds");
        s.ranges_.emplace_back(lo, hi);
        s.size_ += hi - lo;
        prev_hi = hi;
    }
    return s;
}

std::vector<RangeSet> split_children(const RangeSet &set, unsigned fanout)
{
    std::vector<RangeSet> out;
    if (fanout == 0)
        throw std::invalid_argument("split_children: fanout must be at least 1");
    uint32_t rest = set.size() > 0 ? set.size() - 1 : 0; // members below the root
    uint32_t k = std::min<uint32_t>(fanout, rest);
    out.reserve(k);
    uint32_t pos = 1;
    for (uint32_t c = 0; c < k; ++c) {
        uint32_t len = rest / k + (c < rest % k ? 1 : 0);
        out.push_back(set.slice(pos, pos + len));
        pos += len;
    }
    return out;
}

} // namespace storm::net
