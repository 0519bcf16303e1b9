// FM's credit-based flow control (seed 002, section 3.3), without I/O.
//
// One Credits per task, kept by its progress thread, for `peers` other
// tasks (indexed by rank; the task's own index is simply never used).
//  - Sender side: available(p) packets may be injected towards p; spend()
//    takes one, refilled() gives back what p reports consumed.  Starts at
//    `initial` (FM's C0) and never exceeds it.
//  - Receiver side: arrived(p) counts a packet from p into the receive
//    queue; a packet beyond p's credits is a protocol error (CreditError),
//    never an overwrite.  consumed(p, n) counts packets the application
//    took from the queue; once refill_due(p) (at least half the initial
//    credits unreported, or any when `flush_all`), take_refill(p) returns
//    the count to report to p and counts it as returned.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

namespace storm::rdma::msg {

class CreditError : public std::runtime_error {
public:
    using std::runtime_error::runtime_error;
};

class Credits {
public:
    Credits(uint32_t peers, uint32_t initial)
        : initial_(initial), available_(peers, initial), outstanding_(peers, 0), unconsumed_(peers, 0),
          unreported_(peers, 0)
    {
        if (initial == 0)
            throw std::invalid_argument("no credits: the receive queue is too small for the senders");
    }

    uint32_t initial() const noexcept { return initial_; }
    uint32_t threshold() const noexcept { return initial_ / 2 ? initial_ / 2 : 1; }

    // ---- sender side
    uint32_t available(uint32_t p) const { return available_.at(p); }
    bool can_send(uint32_t p) const { return available_.at(p) > 0; }
    void spend(uint32_t p)
    {
        if (available_.at(p) == 0)
            throw std::logic_error("no credit left for rank " + std::to_string(p));
        --available_[p];
    }
    void refilled(uint32_t p, uint32_t n)
    {
        if (uint64_t{available_.at(p)} + n > initial_)
            throw CreditError("rank " + std::to_string(p) + " returned " + std::to_string(n) + " credits, " +
                              std::to_string(available_[p]) + " of " + std::to_string(initial_) +
                              " were still available");
        available_[p] += n;
    }

    // ---- receiver side
    void arrived(uint32_t p)
    {
        if (outstanding_.at(p) >= initial_)
            throw CreditError("rank " + std::to_string(p) + " sent a packet without credit (" +
                              std::to_string(outstanding_[p]) + " of " + std::to_string(initial_) +
                              " credits already in use)");
        ++outstanding_[p];
        ++unconsumed_[p];
    }
    void consumed(uint32_t p, uint32_t n)
    {
        if (n > unconsumed_.at(p))
            throw CreditError("consumed " + std::to_string(n) + " packets of rank " + std::to_string(p) +
                              ", only " + std::to_string(unconsumed_[p]) + " arrived");
        unconsumed_[p] -= n;
        unreported_[p] += n;
    }
    bool refill_due(uint32_t p, bool flush_all = false) const
    {
        return unreported_.at(p) >= (flush_all ? 1 : threshold());
    }
    uint32_t unreported(uint32_t p) const { return unreported_.at(p); }
    // The count to report to p now (0 if none), counted as returned.
    uint32_t take_refill(uint32_t p)
    {
        uint32_t n = unreported_.at(p);
        unreported_[p] = 0;
        outstanding_[p] -= n;
        return n;
    }
    // Packets p may still send before a refill (as p sees it, once every
    // refill reached it).
    uint32_t receivable(uint32_t p) const { return initial_ - outstanding_.at(p); }

    // Every counter at its initial value: nothing in flight either way.
    bool at_initial(uint32_t self) const
    {
        for (uint32_t p = 0; p < available_.size(); ++p)
            if (p != self && (available_[p] != initial_ || outstanding_[p] != 0))
                return false;
        return true;
    }
    // Credits missing towards every peer (sender side), for statistics.
    uint64_t short_total(uint32_t self) const
    {
        uint64_t s = 0;
        for (uint32_t p = 0; p < available_.size(); ++p)
            if (p != self)
                s += initial_ - available_[p];
        return s;
    }

private:
    uint32_t initial_;
    std::vector<uint32_t> available_;   // sender: credits towards p
    std::vector<uint32_t> outstanding_; // receiver: p's packets not yet reported consumed
    std::vector<uint32_t> unconsumed_;  // receiver: p's packets still in the receive queue
    std::vector<uint32_t> unreported_;  // receiver: consumed, not yet reported to p
};

} // namespace storm::rdma::msg
