// The network flush at a gang switch (seed 002, section 3.2 and its
// figure 3), without I/O: one Flush per task, kept by its progress thread.
//
// Halt: the node agent's halt{e} (local_halt) stops injection on a packet
// boundary; the task then sends a HALT(e) mark to every peer behind its
// data.  HALT marks from peers (arrived_halt) may come before or after the
// local halt; once the local halt happened and every peer's HALT(e) has
// arrived, nothing of the context is in flight towards this task: the
// call that completes it returns Answer::halted (answer halted{e}).
// Release: the agent's release{e} (local_release, only once halted at e)
// sends a READY(e) mark to every peer; once every peer's READY(e) arrived
// (possibly before the local release: they are kept), the call that
// completes it returns Answer::ready: injection resumes (answer ready{e}).
//
// Every switch that stops the job halts it, whatever its phase: a halt
// also ends a release that has not completed (a node whose pool could not
// take the context never released it, so its peers never inject) and
// supersedes a halt still collecting marks.
// Marks of one peer come in its send order: HALT marks with increasing
// epochs, each followed by at most one READY of the same epoch (none when
// that peer was not released); anything else is a FlushError.  A peer that
// left (finished, peer_gone) counts as having sent every mark.  Failure
// (set_failed) ends the machine: nothing completes afterwards.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

namespace storm::rdma::msg {

class FlushError : public std::runtime_error {
public:
    using std::runtime_error::runtime_error;
};

class Flush {
public:
    enum class Phase { running, halting, halted, releasing, failed };
    enum class Answer { none, halted, ready };

    // `ntasks` ranks, this task being `self`, at `epoch`: running, or halted
    // at `epoch` (a task attached while its context was swapped out; then
    // epoch >= 1 and the peers are taken as halted at it too).
    Flush(uint32_t ntasks, uint32_t self, uint64_t epoch, bool halted = false)
        : self_(self), epoch_(epoch), phase_(halted ? Phase::halted : Phase::running), peers_(ntasks)
    {
        if (halted && epoch == 0)
            throw std::invalid_argument("a halted start needs an epoch >= 1");
        for (auto &p : peers_) {
            p.halt = epoch;
            p.ready = halted ? epoch - 1 : epoch;
        }
    }

    Answer local_halt(uint64_t e)
    {
        if (phase_ == Phase::failed)
            return Answer::none;
        // A halt comes at every switch that stops the job, whatever the
        // phase: it also ends a release that has not completed (a node
        // whose pool could not take the context in time never released
        // it) or a halt still collecting marks (a later one supersedes it).
        if (e <= epoch_)
            throw FlushError("halt for epoch " + std::to_string(e) + " while " + phase_name() + " at epoch " +
                             std::to_string(epoch_));
        epoch_ = e;
        phase_ = Phase::halting;
        return check();
    }
    Answer arrived_halt(uint32_t p, uint64_t e)
    {
        auto &m = peer(p);
        if (phase_ == Phase::failed || m.gone)
            return Answer::none;
        if (e <= m.halt)
            throw FlushError("rank " + std::to_string(p) + " sent a halt mark for epoch " +
                             std::to_string(e) + " after its marks halt " + std::to_string(m.halt) +
                             ", ready " + std::to_string(m.ready));
        m.halt = e;
        return check();
    }
    Answer local_release(uint64_t e)
    {
        if (phase_ == Phase::failed)
            return Answer::none;
        if (phase_ != Phase::halted || e != epoch_)
            throw FlushError("release for epoch " + std::to_string(e) + " while " + phase_name() +
                             " at epoch " + std::to_string(epoch_));
        phase_ = Phase::releasing;
        return check();
    }
    Answer arrived_ready(uint32_t p, uint64_t e)
    {
        auto &m = peer(p);
        if (phase_ == Phase::failed || m.gone)
            return Answer::none;
        if (e != m.halt || e <= m.ready)
            throw FlushError("rank " + std::to_string(p) + " sent a ready mark for epoch " +
                             std::to_string(e) + " after its marks halt " + std::to_string(m.halt) +
                             ", ready " + std::to_string(m.ready));
        m.ready = e;
        return check();
    }
    Answer peer_gone(uint32_t p)
    {
        peer(p).gone = true;
        return phase_ == Phase::failed ? Answer::none : check();
    }
    void set_failed() noexcept { phase_ = Phase::failed; }

    Phase phase() const noexcept { return phase_; }
    uint64_t epoch() const noexcept { return epoch_; }
    bool may_inject() const noexcept { return phase_ == Phase::running; }
    // p's halt mark arrived and its ready mark not yet: data from p now is
    // a protocol error (p stopped injecting before its halt mark).
    bool peer_halted(uint32_t p) const
    {
        const auto &m = peers_.at(p);
        return !m.gone && m.halt > m.ready;
    }
    // Waiting for peers' marks (a timeout applies).
    bool waiting() const noexcept { return phase_ == Phase::halting || phase_ == Phase::releasing; }
    // The first peer whose mark the current phase waits for, or -1.
    int64_t missing() const noexcept
    {
        for (uint32_t p = 0; p < peers_.size(); ++p)
            if (p != self_ && !has(p))
                return p;
        return -1;
    }
    // Peers whose mark for the current phase arrived (gone ones included).
    uint32_t arrived() const noexcept
    {
        uint32_t n = 0;
        for (uint32_t p = 0; p < peers_.size(); ++p)
            n += p != self_ && has(p);
        return n;
    }
    const char *phase_name() const noexcept
    {
        switch (phase_) {
        case Phase::running:
            return "running";
        case Phase::halting:
            return "halting";
        case Phase::halted:
            return "halted";
        case Phase::releasing:
            return "releasing";
        case Phase::failed:
            break;
        }
        return "failed";
    }

private:
    struct Marks {
        uint64_t halt = 0, ready = 0; // last epochs received
        bool gone = false;
    };
    Marks &peer(uint32_t p)
    {
        if (p >= peers_.size() || p == self_)
            throw FlushError("mark from rank " + std::to_string(p) + ", not a peer");
        return peers_[p];
    }
    bool has(uint32_t p) const noexcept
    {
        const auto &m = peers_[p];
        if (m.gone)
            return true;
        return phase_ == Phase::releasing ? m.ready >= epoch_ : m.halt >= epoch_;
    }
    Answer check()
    {
        if (!waiting() || missing() >= 0)
            return Answer::none;
        if (phase_ == Phase::halting) {
            phase_ = Phase::halted;
            return Answer::halted;
        }
        phase_ = Phase::running;
        return Answer::ready;
    }

    uint32_t self_;
    uint64_t epoch_;
    Phase phase_;
    std::vector<Marks> peers_;
};

} // namespace storm::rdma::msg
