// What the Engine's sources (engine.hpp lists them) share, and nobody else
// includes: the net:: names they use, the head of an xfer payload, the
// merging of reasons, and the record of one hop of the tree.
//
// Contract: a Hop is created by Engine::forward() (tree.cpp) and owned by
// the engine's table of hops until every child answered or timed out; its
// `finish` then runs once.  xfer_mc.cpp reads a hop's data and `repair` to
// answer a child that asks for a chunk's bytes.
#pragma once

#include <event2/event.h>

#include "lib/prim/engine.hpp"

namespace storm::prim {

// The names the sources use most.
using net::Connection;
using net::MsgType;
using net::Reader;
using net::Writer;

// Adds `from` to `to`, up to kMaxReasons in all.
void add_reasons(Reasons &to, const Reasons &from);

// Everything of an xfer payload but the data, which follows the last field
// (its length) by reference.
std::string xfer_head(const RangeSet &set, const Route &route, uint64_t origin, const std::string &event,
                      uint64_t offset, uint64_t total, size_t len);

struct Engine::Hop {
    net::MsgType type;
    unsigned fanout;
    std::function<std::string(const RangeSet &)> body;
    net::DataRef data; // appended to every frame of the hop, by reference (xfer_mc: kept for repairs)
    // xfer_mc: the announcement with the data, for a child that asks
    std::function<std::string(const RangeSet &)> repair;
    // What each frame of the hop carries after its body.
    net::DataRef in_frames() const { return type == net::MsgType::xfer_mc ? net::DataRef{} : data; }
    Answer answer;
    Finish finish;
    unsigned waiting = 0;
    event *timer = nullptr;
    struct TimerArg {
        Engine *engine;
        uint64_t op;
    } timer_arg{};
    ~Hop()
    {
        if (timer)
            event_free(timer);
    }
};

// The answer of an asynchronous sink (Engine::add_async_sink) to come.
struct Engine::LocalWait {
    bool done = false;
    Answer answer;
    Finish then; // set by join() when the children answered first
};

} // namespace storm::prim
