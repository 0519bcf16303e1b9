// The gang matrix (seed 000 section 2.1, seed 002 section 2.1): time slots
// x processors.  Each running job of a gang partition occupies a set of
// cells (a core of a node) in one slot, its home; jobs of one slot never
// share a cell, so they run together while every other slot waits.
//
// Packing: a new job goes to the lowest slot whose cells it finds free
// (first fit, in arrival order), so jobs fill the first slots and the
// matrix keeps as few slots as it can; a slot that empties is removed.
// Jobs already placed are never moved: an update disturbs no other job.
// Alternative scheduling: a job also runs in every other slot where all of
// its cells are idle (taken greedily, home jobs first, then others in
// order of job id), so idle cells do not stay idle.
//
// Contract: cells are opaque 64-bit ids (the caller encodes node and core);
// update() takes the complete set of running jobs each time.  A job that
// cannot fit in any of `max_slots` slots still gets a slot of its own (the
// matrix grows beyond max_slots rather than leave a job unscheduled; the
// caller logs it).  Masks are bit s = runs in slot s; at most kMaxSlots.
#pragma once

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "lib/net/rangeset.hpp"

namespace storm::gang {

constexpr unsigned kMaxSlots = 64;

struct JobShape {
    uint32_t job_id = 0;
    std::vector<uint64_t> cells; // node/core cells the job holds
    net::RangeSet nodes;         // the job's nodes, as Storm's node indices
};

class Matrix {
public:
    explicit Matrix(unsigned max_slots) : max_slots_(max_slots) {}

    // Brings the matrix to `running`: removes jobs that are gone, places new
    // ones.  Returns true if any job's slots changed.
    bool update(const std::vector<JobShape> &running);

    unsigned slots() const noexcept { return static_cast<unsigned>(slots_.size()); }
    unsigned max_slots() const noexcept { return max_slots_; }
    void set_max_slots(unsigned n) noexcept { max_slots_ = n; }
    // The home slot of each job.
    std::map<uint32_t, unsigned> homes() const;
    // The slots each job runs in (home and alternatives), as bit masks.
    const std::map<uint32_t, uint64_t> &masks() const noexcept { return masks_; }
    const std::map<uint32_t, JobShape> &jobs() const noexcept { return jobs_; }
    // Jobs whose home is slot s, in order of id.
    std::vector<uint32_t> slot_jobs(unsigned s) const;
    // Cells of slot s used by no job running in s (home or alternative).
    size_t idle_cells(unsigned s) const;
    size_t total_cells() const;
    // True if the last update could not keep within max_slots.
    bool overflowed() const noexcept { return slots_.size() > max_slots_; }

private:
    struct Slot {
        std::set<uint64_t> used;
        std::set<uint32_t> jobs;
    };
    bool fits(const Slot &s, const JobShape &j) const;
    void compute_masks();

    unsigned max_slots_;
    std::vector<Slot> slots_;
    std::map<uint32_t, JobShape> jobs_;
    std::map<uint32_t, unsigned> home_;
    std::map<uint32_t, uint64_t> masks_;
};

} // namespace storm::gang
