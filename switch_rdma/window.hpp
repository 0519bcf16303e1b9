// Swapping a task's share of a context's window (layout.hpp) in and out of
// a backing store: what the node agent does between a context's halted and
// its release at a gang switch (seed 002, section 3.2 "COMM_context_switch").
//
// Contract:
//  - init_share() writes a fresh header (magic, version, sizes, credits,
//    rank, ntasks, resident, indices 0) and leaves the slots as they are.
//  - save_share() checks the header against the expected geometry and the
//    ring indices (head <= tail, tail - head <= slots) first and throws
//    CorruptQueue naming the share's rank and the offending index pair or
//    field, leaving `store` untouched; otherwise it replaces `store` with
//    the header and either the valid packets (send [head, tail], slot tail
//    included when free: the application may be writing it; recv
//    [head, tail)) or the whole share, and returns the number of packet
//    slots saved.
//  - restore_share() writes back exactly what save_share() saved into a
//    share of the same geometry (throws std::invalid_argument on a store it
//    did not write or of another geometry); `resident` is left as saved:
//    the agent sets it to 1 (and FUTEX_WAKEs it) when the context may run.
// None of them touches the share concurrently with its task: the agent
// calls them while the context is halted and its tasks are stopped.
#pragma once

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>

namespace storm::rdma {

class CorruptQueue : public std::runtime_error {
public:
    using std::runtime_error::runtime_error;
};

// A fresh share: header initialised, rings empty.
void init_share(void *share, uint64_t bytes, uint32_t packet_size, uint32_t send_slots, uint32_t recv_slots,
                uint32_t credits, uint32_t rank, uint32_t ntasks, bool resident);

// Saves the share's header and, if valid_only, only its valid packets (send [head, tail] -- slot tail
// included if free, the application may be writing it -- and recv [head, tail)), else the whole share,
// into `store` (replacing its contents).  Returns the number of packet slots saved.  Throws CorruptQueue
// naming the share's rank and the index pair if a header field or an index pair is impossible
// (tail - head > slots, sizes differing from the expected ones), saving nothing.
size_t save_share(const void *share, uint64_t bytes, uint32_t packet_size, uint32_t send_slots,
                  uint32_t recv_slots, bool valid_only, std::string &store);

// Writes back what save_share saved (same geometry), leaving `resident` as saved.
void restore_share(void *share, uint64_t bytes, const std::string &store);

// Brings back what save_share saved into a share whose pages were kept
// (the node agent keeps them: a task stopped inside its queues resumes on
// them).  Writes the saved bytes back only if the share's ring indices are
// still the saved ones, never its header, and never the send slots from
// the tail on (the application may be writing them: whole-window copies
// restore the rest).  Returns the packet
// slots written back; 0 if the indices moved (the share's own bytes are
// then the truth).  Throws std::invalid_argument on a store it did not
// write or of another geometry.
size_t reload_share(void *share, uint64_t bytes, const std::string &store);

} // namespace storm::rdma
