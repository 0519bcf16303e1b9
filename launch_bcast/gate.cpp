#include "launch_bcast/gate.hpp"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <stdexcept>
#include <sys/socket.h>
#include <unistd.h>

#include <event2/event.h>

#include "launch_bcast/protocol.hpp"
#include "lib/net/wire.hpp"

namespace storm::bcast {

namespace {

constexpr uint8_t kHold = 'W', kStill = 'S', kOk = 'K', kError = 'E';
constexpr size_t kMaxReason = 4096;

} // namespace

namespace gate {

std::string format(const std::vector<uint64_t> &sids)
{
    std::string s;
    for (uint64_t sid : sids)
        s += (s.empty() ? "" : ",") + session_hex(sid);
    return s;
}

std::vector<uint64_t> parse(std::string_view text)
{
    std::vector<uint64_t> sids;
    while (true) {
        size_t comma = text.find(',');
        std::string_view one = text.substr(0, comma);
        if (one.size() != 16 || one.find_first_not_of("0123456789abcdef") != std::string_view::npos)
            throw std::invalid_argument("\"" + std::string(one) + "\" is not a broadcast's session id");
        if (sids.size() == max_sids)
            throw std::invalid_argument("more than " + std::to_string(max_sids) + " broadcasts");
        sids.push_back(std::stoull(std::string(one), nullptr, 16));
        if (comma == std::string_view::npos)
            return sids;
        text.remove_prefix(comma + 1);
    }
}

std::string hold(uint32_t job, uint32_t step, const std::vector<uint64_t> &sids)
{
    net::Writer w;
    w.u8(version);
    w.u8(kHold);
    w.u32(job);
    w.u32(step);
    w.u32(static_cast<uint32_t>(sids.size()));
    for (uint64_t sid : sids)
        w.u64(sid);
    return w.take();
}

Hold read_hold(std::string_view packet)
{
    net::Reader r(packet.data(), packet.size());
    if (r.u8() != version)
        throw net::DecodeError("another version of the launch gate");
    if (r.u8() != kHold)
        throw net::DecodeError("not a hold request");
    Hold h;
    h.job = r.u32();
    h.step = r.u32();
    uint32_t count = r.u32();
    if (count == 0 || count > max_sids)
        throw net::DecodeError(std::to_string(count) + " broadcasts");
    for (uint32_t i = 0; i < count; ++i)
        h.sids.push_back(r.u64());
    r.finish();
    return h;
}

void wait(const std::string &socket_path, uint32_t job, uint32_t step, const std::vector<uint64_t> &sids,
          std::chrono::milliseconds quiet_limit)
{
    auto still = [](std::string_view packet) {
        return packet.size() == 2 && static_cast<uint8_t>(packet[0]) == version &&
               static_cast<uint8_t>(packet[1]) == kStill;
    };
    std::string answer;
    try {
        answer = net::unix_request(socket_path, hold(job, step, sids), static_cast<int>(quiet_limit.count()),
                                   "the node agent", 64 * 1024, still);
    } catch (const net::UnixTimeout &) {
        throw std::runtime_error(
            "the node agent at " + socket_path + " said nothing for " + std::to_string(quiet_limit.count()) +
            " ms while it held the step (it gives word every " + std::to_string(still_every.count()) +
            " s): it is stuck or starved, so the step does not wait any longer");
    }
    net::Reader r(answer);
    if (r.u8() != version)
        throw std::runtime_error("the node agent answers in another version of the launch gate");
    uint8_t kind = r.u8();
    if (kind == kOk) {
        r.finish();
        return;
    }
    if (kind != kError)
        throw std::runtime_error("unexpected answer from the node agent at " + socket_path);
    std::string why(r.bytes(kMaxReason));
    r.finish();
    throw std::runtime_error(why);
}

} // namespace gate

LaunchGate::LaunchGate(event_base *base, std::string socket_path, std::vector<uid_t> trusted, Logger log,
                       std::chrono::seconds keep, std::chrono::milliseconds still)
    : trusted_(std::move(trusted)), log_(log.child("bcast").child("launch gate")), keep_(keep), still_(still),
      base_(base), server_(base, std::move(socket_path), log, "bcast", "launch gate",
                           [this](int fd, const ucred &cred) { on_client(fd, cred.uid); })
{
    // Only slurmstepd (root or SlurmdUser) holds steps here.
    server_.admit_only(trusted_);
    // slurmstepd sends its request right after it connects; a held step
    // then waits by design (hearing "still" every `still`).
    server_.first_request_within(net::UnixServer::kDefaultFirstRequest, [this](int fd) { drop(fd); });
}

LaunchGate::~LaunchGate()
{
    if (still_ev_)
        event_free(still_ev_);
    for (auto &[fd, w] : waiters_) {
        event_free(w->ev);
        ::close(fd); // the step sees the agent go: it fails its launch
    }
}

void LaunchGate::start()
{
    server_.start();
    if (!still_ev_) {
        still_ev_ = event_new(base_, -1, EV_PERSIST, on_still, this);
        if (!still_ev_)
            throw std::runtime_error("launch gate: cannot create its timer");
        auto us = std::chrono::duration_cast<std::chrono::microseconds>(still_).count();
        timeval tv{static_cast<time_t>(us / 1000000), static_cast<suseconds_t>(us % 1000000)};
        event_add(still_ev_, &tv);
    }
}

// Every held step (its request read) hears that it still is.  A step whose
// socket is full or gone is left to read_request(), which drops it when
// its slurmstepd goes.
void LaunchGate::on_still(int, short, void *arg)
{
    auto *self = static_cast<LaunchGate *>(arg);
    const char still[2] = {static_cast<char>(gate::version), static_cast<char>(kStill)};
    for (auto &[fd, w] : self->waiters_)
        if (!w->sids.empty())
            (void)send(fd, still, sizeof still, MSG_NOSIGNAL | MSG_DONTWAIT);
}

void LaunchGate::opened(uint64_t sid)
{
    Outcome &o = outcomes_[sid];
    o.ended = false;
    o.why.clear();
    o.when = std::chrono::steady_clock::now();
}

void LaunchGate::ended(uint64_t sid, const std::string &why)
{
    auto it = outcomes_.find(sid);
    if (it == outcomes_.end())
        return;
    it->second.ended = true;
    it->second.why = why;
    it->second.when = std::chrono::steady_clock::now();
    std::vector<int> settled;
    for (auto &[fd, w] : waiters_)
        if (std::find(w->sids.begin(), w->sids.end(), sid) != w->sids.end() && settle(*w))
            settled.push_back(fd);
    for (int fd : settled)
        drop(fd);
}

void LaunchGate::sweep()
{
    auto now = std::chrono::steady_clock::now();
    for (auto it = outcomes_.begin(); it != outcomes_.end();)
        it = it->second.ended && now - it->second.when > keep_ ? outcomes_.erase(it) : std::next(it);
}

void LaunchGate::on_client(int fd, uid_t uid)
{
    auto w = std::make_unique<Waiter>();
    w->fd = fd;
    w->uid = uid;
    w->since = std::chrono::steady_clock::now();
    net::keep_watched(base_, waiters_, std::move(w), on_readable, this);
}

void LaunchGate::on_readable(int fd, short, void *arg)
{
    auto *self = static_cast<LaunchGate *>(arg);
    auto it = self->waiters_.find(fd);
    if (it != self->waiters_.end())
        self->read_request(*it->second);
}

void LaunchGate::read_request(Waiter &w)
{
    char buf[16 + 8 * gate::max_sids + 1];
    ssize_t n = recv(w.fd, buf, sizeof buf, 0);
    if (n < 0 && (errno == EAGAIN || errno == EINTR))
        return;
    server_.settled(w.fd); // its request is in: answered, dropped or held
    if (n <= 0 || !w.sids.empty()) {
        // The step went away (its slurmstepd was killed, or gave up), or
        // spoke out of turn: nobody to answer.
        if (!w.sids.empty())
            log_.info("step %u.%u stopped waiting for its broadcasts", w.job, w.step);
        drop(w.fd);
        return;
    }
    if (std::find(trusted_.begin(), trusted_.end(), w.uid) == trusted_.end()) {
        // Answered once its request is in: a peer that is still sending
        // would see a closed socket instead of the reason.
        log_.error("refused a request of uid %u (only slurmstepd may ask)", static_cast<unsigned>(w.uid));
        answer(w.fd, "only slurmstepd may hold a step for its broadcasts");
        drop(w.fd);
        return;
    }
    try {
        gate::Hold h = gate::read_hold(std::string_view(buf, static_cast<size_t>(n)));
        w.job = h.job;
        w.step = h.step;
        w.sids = std::move(h.sids);
    } catch (const net::DecodeError &e) {
        log_.error("malformed request: %s", e.what());
        answer(w.fd, std::string("malformed request: ") + e.what());
        drop(w.fd);
        return;
    }
    if (settle(w))
        drop(w.fd);
}

bool LaunchGate::settle(Waiter &w)
{
    bool all = true;
    for (uint64_t sid : w.sids) {
        auto it = outcomes_.find(sid);
        std::string why;
        if (it == outcomes_.end())
            why = "broadcast " + session_hex(sid) +
                  " is unknown on this node (its agent restarted since, or it ended long ago)";
        else if (it->second.ended && !it->second.why.empty())
            why = "broadcast " + session_hex(sid) + " failed: " + it->second.why;
        if (!why.empty()) {
            log_.error("step %u.%u not started: %s", w.job, w.step, why.c_str());
            answer(w.fd, why);
            return true;
        }
        all = all && it->second.ended;
    }
    if (!all)
        return false;
    auto waited =
        std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - w.since);
    log_.info("step %u.%u may start: %s in place (held %lld ms)", w.job, w.step, gate::format(w.sids).c_str(),
              static_cast<long long>(waited.count()));
    answer(w.fd, "");
    return true;
}

void LaunchGate::answer(int fd, const std::string &error)
{
    net::Writer w;
    w.u8(gate::version);
    if (error.empty()) {
        w.u8(kOk);
    } else {
        w.u8(kError);
        w.bytes(error.substr(0, kMaxReason));
    }
    std::string m = w.take();
    if (send(fd, m.data(), m.size(), MSG_NOSIGNAL | MSG_DONTWAIT) != static_cast<ssize_t>(m.size()))
        log_.error("cannot answer a step: %s", std::strerror(errno));
}

void LaunchGate::drop(int fd)
{
    auto it = waiters_.find(fd);
    if (it == waiters_.end())
        return;
    event_free(it->second->ev);
    server_.settled(fd);
    ::close(fd);
    waiters_.erase(it);
}

} // namespace storm::bcast
