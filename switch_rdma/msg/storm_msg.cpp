// The C API of libstormmsg (storm_msg.h) over the process's one Endpoint:
// every exception stops here and becomes -1, errno and storm_msg_error().
#include "switch_rdma/msg/storm_msg.h"

#include <cerrno>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>

#include "switch_rdma/msg/endpoint.hpp"

using storm::rdma::msg::Endpoint;
using storm::rdma::msg::MsgError;

namespace {

std::mutex g_mu; // init / finalize against each other
std::unique_ptr<Endpoint> g_ep;
struct storm_msg_stats g_final {}; // the statistics after finalize
struct storm_msg_cosched_stats g_final_cosched {};
bool g_finalized = false;
thread_local std::string t_error = "no error";

int failure(int err, const std::string &what)
{
    t_error = what;
    errno = err;
    return -1;
}

template <class F> auto guarded(F f) -> decltype(f())
{
    try {
        return f();
    } catch (const MsgError &e) {
        return failure(e.err(), e.what());
    } catch (const std::bad_alloc &) {
        return failure(ENOMEM, "out of memory");
    } catch (const std::exception &e) {
        return failure(EIO, e.what());
    }
}

Endpoint *endpoint()
{
    if (!g_ep)
        throw MsgError(EINVAL, "storm_msg_init() was not called (or storm_msg_finalize() was)");
    return g_ep.get();
}

void fill(struct storm_msg_stats *s, const Endpoint &e)
{
    const auto &t = e.stats();
    s->packets_sent = t.packets_sent.load();
    s->packets_received = t.packets_received.load();
    s->messages_sent = t.messages_sent.load();
    s->messages_received = t.messages_received.load();
    s->credit_stalls = t.credit_stalls.load();
    s->halts = t.halts.load();
    s->releases = t.releases.load();
    s->resident_waits = t.resident_waits.load();
    s->credits_missing = t.credits_missing.load();
    s->credits = e.credits();
}

void fill_cosched(struct storm_msg_cosched_stats *s, const Endpoint &e)
{
    const auto &c = e.cosched();
    const auto &t = c.stats();
    s->status = c.status();
    s->pending = t.pending.load();
    s->status_pushes = t.status_pushes.load();
    s->arrivals = t.arrivals.load();
    s->false_arrivals = t.false_arrivals.load();
    s->requests = t.requests.load();
    s->requests_deferred = t.requests_deferred.load();
}

// A statistics call: the live endpoint's figures, or those kept at
// finalize.
template <class S> int read_stats(S *s, void (*fill_from)(S *, const Endpoint &), const S &at_finalize)
{
    return guarded([&]() -> int {
        if (!s)
            throw MsgError(EFAULT, "NULL statistics");
        if (g_ep)
            fill_from(s, *g_ep);
        else if (g_finalized)
            *s = at_finalize;
        else
            throw MsgError(EINVAL, "storm_msg_init() was not called");
        return 0;
    });
}

} // namespace

extern "C" {

int storm_msg_init(void)
{
    return guarded([]() -> int {
        std::lock_guard<std::mutex> l(g_mu);
        if (g_ep)
            throw MsgError(EALREADY, "storm_msg_init() was already called");
        g_ep = std::make_unique<Endpoint>();
        g_finalized = false;
        return 0;
    });
}

int storm_msg_rank(void) { return g_ep ? static_cast<int>(g_ep->rank()) : -1; }

int storm_msg_size(void) { return g_ep ? static_cast<int>(g_ep->size()) : -1; }

int storm_msg_send(int dst, int tag, const void *buf, size_t len)
{
    return guarded([&]() -> int {
        if (tag < 0)
            throw MsgError(EINVAL, "tag " + std::to_string(tag) + ": tags are >= 0");
        if (dst < 0)
            throw MsgError(EINVAL, "destination rank " + std::to_string(dst) + " is negative");
        if (!buf && len)
            throw MsgError(EFAULT, "NULL buffer of " + std::to_string(len) + " bytes");
        endpoint()->send(static_cast<uint32_t>(dst), static_cast<uint32_t>(tag), buf, len);
        return 0;
    });
}

ssize_t storm_msg_recv(int src, int tag, void *buf, size_t cap, int *out_src, int *out_tag)
{
    return guarded([&]() -> ssize_t {
        if (tag < STORM_MSG_ANY)
            throw MsgError(EINVAL, "tag " + std::to_string(tag) + ": tags are >= 0 (or STORM_MSG_ANY)");
        if (!buf && cap)
            throw MsgError(EFAULT, "NULL buffer of " + std::to_string(cap) + " bytes");
        uint32_t s = 0, t = 0;
        size_t n = endpoint()->recv(src, tag, buf, cap, &s, &t);
        if (out_src)
            *out_src = static_cast<int>(s);
        if (out_tag)
            *out_tag = static_cast<int>(t);
        return static_cast<ssize_t>(n);
    });
}

ssize_t storm_msg_probe(int src, int tag, int *out_src, int *out_tag)
{
    return guarded([&]() -> ssize_t {
        uint32_t s = 0, t = 0;
        int64_t n = endpoint()->probe(src, tag, &s, &t);
        if (n < 0)
            throw MsgError(EAGAIN, "no matching message arrived yet");
        if (out_src)
            *out_src = static_cast<int>(s);
        if (out_tag)
            *out_tag = static_cast<int>(t);
        return static_cast<ssize_t>(n);
    });
}

int storm_msg_barrier(void)
{
    return guarded([]() -> int {
        endpoint()->barrier();
        return 0;
    });
}

int storm_msg_finalize(void)
{
    return guarded([]() -> int {
        std::lock_guard<std::mutex> l(g_mu);
        Endpoint *e = endpoint();
        struct Release {
            ~Release()
            {
                fill(&g_final, *g_ep);
                fill_cosched(&g_final_cosched, *g_ep);
                g_finalized = true;
                g_ep.reset();
            }
        } release;
        e->finalize();
        return 0;
    });
}

const char *storm_msg_error(void) { return t_error.c_str(); }

int storm_msg_stats(struct storm_msg_stats *s) { return read_stats(s, fill, g_final); }

int storm_msg_cosched_stats(struct storm_msg_cosched_stats *s)
{
    return read_stats(s, fill_cosched, g_final_cosched);
}

} // extern "C"
