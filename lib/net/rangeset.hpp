// Node sets as compact lists of index ranges, and the tree they travel on.
//
// Every agent holds the same node table (Slurm's, in slurm.conf order), so a
// set of nodes travels as ranges of indices into it: a job on nodes 0-255
// costs 8 bytes on the wire whatever its size (seed 003: repacking a job
// object of N nodes at each hop costs O(N); this costs O(ranges)).
//
// The tree over a set: its first member is the root; the other members are
// split, in order, into at most F contiguous slices of nearly equal size,
// and the first member of each slice is a child that becomes the root of its
// slice.  A node therefore forwards to its F children in O(F x ranges) work,
// and the depth is about log_F(N).
//
// Contract: a RangeSet is always normalised (sorted, disjoint, non-adjacent,
// non-empty ranges [lo, hi)).  decode() and parse() reject anything else
// (DecodeError / std::invalid_argument) rather than repair it, and decode()
// rejects sets with more than kMaxRanges ranges or indices >= kMaxIndex.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "lib/net/wire.hpp"

namespace storm::net {

class RangeSet {
public:
    static constexpr uint32_t kMaxIndex = 1u << 24; // node indices are < 16 Mi
    static constexpr uint32_t kMaxRanges = 4096;

    RangeSet() = default;
    // [lo, hi); an empty range gives an empty set.
    static RangeSet range(uint32_t lo, uint32_t hi);
    static RangeSet single(uint32_t index) { return range(index, index + 1); }
    // The set of `members`, in any order, repeats allowed.
    static RangeSet of(std::vector<uint32_t> members);
    // "0-63,70,72-80" (inclusive ranges, in increasing order).
    static RangeSet parse(const std::string &text);

    uint32_t size() const noexcept { return size_; }
    bool empty() const noexcept { return size_ == 0; }
    bool contains(uint32_t index) const noexcept;
    // The member at position pos (0 <= pos < size()).
    uint32_t nth(uint32_t pos) const;
    // Members at positions [from, to), as a set.
    RangeSet slice(uint32_t from, uint32_t to) const;
    std::vector<uint32_t> members() const;
    // The union of both sets.
    RangeSet unite(const RangeSet &o) const;
    const std::vector<std::pair<uint32_t, uint32_t>> &ranges() const noexcept { return ranges_; }
    std::string str() const; // the parse() form

    void encode(Writer &w) const;
    static RangeSet decode(Reader &r);

    bool operator==(const RangeSet &o) const noexcept { return ranges_ == o.ranges_; }

private:
    void append(uint32_t lo, uint32_t hi); // keeps the set normalised; lo >= last hi
    std::vector<std::pair<uint32_t, uint32_t>> ranges_;
    uint32_t size_ = 0;
};

// The subtrees below the root of `set` (its first member), at most
// `fanout` of them: each child is the first member of its slice.  Empty
// when the set has one member.  fanout >= 1.
std::vector<RangeSet> split_children(const RangeSet &set, unsigned fanout);

} // namespace storm::net
