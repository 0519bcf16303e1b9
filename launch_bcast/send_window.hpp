// The client's window: how many chunks may be unanswered at once.
//
// A chunk is answered once every node wrote it, and a hop counts a node
// failed when its answer takes longer than the broadcast's timeout T (per
// level of the tree).  A window of fixed bytes queues a fixed amount of
// work at every node, so where the nodes write slowly (many small files,
// nodes sharing a loaded machine) the answer to the last chunk queued can
// outlast T while every node is alive and writing: 16 MiB of files of
// 2 KB are 8,000 creates per node.  So the window follows how long the
// answers take, as a delay-based congestion window does:
// - it starts at `initial` chunks;
// - an answer that came within T/8 of its chunk's send adds one chunk (a
//   window's worth of such answers doubles it);
// - one that took more than T/4 halves it, once for the chunks sent
//   before that cut (their answers were already queued behind the same
//   work);
// - it stays within [2, max].
//
// Contract: size() is the window after the answers seen so far;
// answered() takes two times of `clock`: when the chunk was sent and when
// its answer came.  Not thread-safe: the client's loop owns it.
#pragma once

#include <algorithm>
#include <chrono>

namespace storm::bcast {

class SendWindow {
public:
    using clock = std::chrono::steady_clock;

    SendWindow(unsigned max, unsigned initial, std::chrono::milliseconds timeout);

    unsigned size() const noexcept { return size_; }

    // The answer to a chunk sent at `sent` came at `now`.
    void answered(clock::time_point sent, clock::time_point now);

private:
    unsigned max_, size_;
    clock::duration grow_below_, cut_above_;
    clock::time_point last_cut_{};
};

} // namespace storm::bcast
