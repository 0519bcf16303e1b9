// Packing: where a new job of a gang partition should go so that the gang
// matrix (matrix.hpp) keeps few slots and few idle cells.  A pure placement
// policy, no Slurm: select/gang (plugins/select_gang/) asks it and
// narrows cons_tres's candidate nodes to its answer.
//
// Buddy placement, as STORM's machine manager does (seed 000 section 2.1,
// "buddy-tree algorithm") and in the spirit of ParPar's distributed
// hierarchical control (seed 002 section 2.1, DHC): the nodes form a binary
// tree of aligned power-of-two blocks (a block of size 2^k starts at a
// multiple of 2^k).  A job of n nodes belongs to blocks of size
// b = 2^ceil(log2 n).
//
//  1. Existing slots, lowest first: the job goes to the lowest slot with at
//     least n free candidate nodes (a node is free in a slot if no job of
//     that slot holds it), so it opens no slot that first fit would not.
//  2. In that slot, the smallest level L >= b (b, 2b, ... up to the whole
//     machine) that has an aligned block of L nodes with >= n free
//     candidates; among those blocks the best fit: fewest free nodes, then
//     fewest free nodes in its parent block, grandparent, ... (buddy best
//     fit: large free blocks stay whole), then fewest "ragged" other slots
//     (slots where the block is partly busy: there the job could neither
//     run as an alternative nor add no idle cells), then the lowest address.
//  3. Inside the block, buddy descent: if one half can hold the job, go
//     into the tighter such half; otherwise take every free node of the
//     half with fewer free nodes and the rest from the other half the same
//     way.  The nodes left free stay in as few aligned blocks as possible.
//  4. No existing slot fits: the job opens a new slot (if the matrix has
//     fewer than `max_slots`), placed as in 2-3 over an empty slot, so the
//     new slot's free nodes form the largest aligned blocks; the raggedness
//     rule makes it line up with the blocks of the other slots.
//
// Node-level view: a slot's busy nodes are the nodes of the jobs whose home
// is that slot, which is exactly the matrix's view when jobs hold whole
// nodes (swapped communication contexts).  With core-level cells (pool
// mode "divided") a node counts as busy in a slot as soon as one job of the
// slot holds one core of it: packing never puts two jobs on one node in a
// slot, even where their cores would not collide (conservative; cons_tres
// still chooses the cores).
//
// Contract: node indices are 0 .. nodes-1 (select/gang passes Slurm's node
// index).  `slots[s]` lists the busy nodes of slot s (indices >= nodes are
// ignored); `candidates` the nodes the job may use.  place() returns the
// chosen nodes (exactly `count` of them, sorted, all candidates) and the
// slot, or kind == none when count is 0, exceeds the candidates, or needs a
// new slot while slots.size() >= max_slots.  It never throws except
// std::bad_alloc, and costs O(slots^2 x nodes) at most.
#pragma once

#include <cstdint>
#include <vector>

#include "sched_gang/matrix.hpp"

namespace storm::gang {

struct PackView {
    uint32_t nodes = 0;                       // machine size
    std::vector<std::vector<uint32_t>> slots; // busy nodes of each slot
};

struct Placement {
    enum Kind { none, existing, new_slot };
    Kind kind = none;
    unsigned slot = 0;           // the slot the job lands in
    std::vector<uint32_t> nodes; // sorted
};

Placement place(const PackView &view, const std::vector<uint32_t> &candidates, uint32_t count,
                unsigned max_slots);

// The model of plain cons_tres the comparison measures against: the lowest
// numbered free candidates of the lowest slot with enough of them (first
// fit, as cons_common's rows of an OverSubscribe=FORCE partition), same
// contract as place().
Placement first_fit(const PackView &view, const std::vector<uint32_t> &candidates, uint32_t count,
                    unsigned max_slots);

// The slots' view of a matrix whose cells are (node << 20 | core), as
// sched/gang and select/gang encode them: slot s's busy nodes are those of
// the jobs whose home is s.
PackView pack_view(const Matrix &m, uint32_t nodes);

const char *kind_name(Placement::Kind k) noexcept;

} // namespace storm::gang
