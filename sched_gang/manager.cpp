#include "sched_gang/manager.hpp"

#include <algorithm>
#include <arpa/inet.h>
#include <cerrno>
#include <cstring>
#include <ctime>
#include <fcntl.h>
#include <future>
#include <numeric>
#include <sys/random.h>
#include <unistd.h>
#include <utility>

#include <event2/event.h>

#include "lib/common/files.hpp"
#include "lib/common/params.hpp"
#include "lib/common/percentile.hpp"
#include "lib/common/precise_base.hpp"
#include "lib/common/realtime.hpp"
#include "lib/common/signals.hpp"
#include "lib/common/thread_name.hpp"
#include "lib/common/timeval.hpp"

namespace storm::gang {

namespace {

constexpr size_t kRtts = 4096;

std::string percentiles(std::vector<uint32_t> d)
{
    if (d.empty())
        return "none yet";
    char b[128];
    double p50 = percentile(d, 0.5) / 1000.0, p99 = percentile(d, 0.99) / 1000.0;
    snprintf(b, sizeof b, "p50 %.3f ms p99 %.3f ms (last %zu)", p50, p99, d.size());
    return b;
}

} // namespace

MachineManager::MachineManager(ManagerConfig config, std::unique_ptr<net::Authenticator> auth, Logger log)
    : cfg_(std::move(config)), auth_(std::move(auth)), log_(log.child("gang")), engine_log_(std::move(log)),
      timing_(cfg_.timing), matrix_(cfg_.timing.max_slots)
{
    // Epochs start from the start time: a restarted manager never reuses one.
    epoch_ = static_cast<uint64_t>(time(nullptr)) << 20;
}

MachineManager::~MachineManager() { stop(); }

void MachineManager::start()
{
    base_ = new_precise_base();
    if (!base_)
        throw std::runtime_error("gang manager: event_base_new failed");
    prim::EngineConfig pc;
    pc.nodes = cfg_.nodes;
    pc.fanout = cfg_.fanout;
    pc.timeout = std::chrono::milliseconds(1000); // also how long an unreachable agent is routed around
    engine_ = std::make_unique<prim::Engine>(base_, pc, *auth_, engine_log_);
    if (cfg_.mcast.enabled() && !cfg_.nodes.empty()) {
        try {
            uint16_t port = strobe_port(cfg_.mcast);
            in_addr iface = cfg_.mcast.iface.s_addr != INADDR_ANY ? cfg_.mcast.iface
                                                                  : net::local_address_towards(cfg_.nodes[0]);
            // Loop: an agent on this host is a member too.
            strobe_sock_ = std::make_unique<net::GroupSocket>(base_, cfg_.mcast.group, port, iface, true);
            char g[INET_ADDRSTRLEN] = "?", i[INET_ADDRSTRLEN] = "?";
            inet_ntop(AF_INET, &cfg_.mcast.group, g, sizeof g);
            inet_ntop(AF_INET, &iface, i, sizeof i);
            mc_group_ = std::string(g) + ":" + std::to_string(port) + " from " + i;
            log_.verbose("strobes by multicast to %s", mc_group_.c_str());
        } catch (const std::exception &e) {
            log_.warning("strobes go down the tree alone: cannot multicast them: %s", e.what());
        }
    }
    strobe_ev_ = event_new(
        base_, -1, EV_PERSIST,
        [](evutil_socket_t, short, void *a) { static_cast<MachineManager *>(a)->strobe(); }, this);
    house_ev_ = event_new(
        base_, -1, EV_PERSIST,
        [](evutil_socket_t, short, void *a) { static_cast<MachineManager *>(a)->housekeeping(); }, this);
    timeval h{0, 10000};
    if (!strobe_ev_ || !house_ev_ || event_add(house_ev_, &h) < 0) {
        stop();
        throw std::runtime_error("gang manager: cannot register its timers");
    }
    arm_strobe();
    std::promise<void> started;
    auto ready = started.get_future();
    thread_ = std::thread([this, &started] {
        name_thread("storm-gang");
        running_ = true;
        started.set_value();
        run();
    });
    ready.wait();
    log_.info("machine manager started: quantum %s, MPL %u, fail-safe %s, %zu nodes, fanout %u",
              format_duration_us(static_cast<uint64_t>(timing_.quantum.count())).c_str(), timing_.max_slots,
              format_duration_us(static_cast<uint64_t>(timing_.failsafe.count()) * 1000).c_str(),
              cfg_.nodes.size(), cfg_.fanout);
}

void MachineManager::run() noexcept
{
    block_sigpipe();
    event_base_dispatch(base_);
    running_ = false;
}

void MachineManager::stop() noexcept
{
    if (thread_.joinable()) {
        event_base_loopbreak(base_);
        // loopbreak from another thread needs the loop to wake: the 10 ms
        // housekeeping timer does it.
        thread_.join();
    }
    *alive_ = false;
    engine_.reset();
    if (strobe_ev_)
        event_free(strobe_ev_);
    if (house_ev_)
        event_free(house_ev_);
    strobe_ev_ = house_ev_ = nullptr;
    if (base_)
        event_base_free(base_);
    base_ = nullptr;
}

void MachineManager::submit(Snapshot s)
{
    std::lock_guard<std::mutex> lk(mu_);
    pending_ = std::move(s);
}

std::map<uint32_t, std::chrono::microseconds> MachineManager::take_stopped()
{
    std::lock_guard<std::mutex> lk(mu_);
    return std::exchange(stopped_, {});
}

void MachineManager::set_timing(const Timing &t)
{
    std::lock_guard<std::mutex> lk(mu_);
    pending_timing_ = t;
}

// Strobes at most every 20 ms are answered; between them, at shorter
// quanta, unanswered ones (half the messages and wake-ups on the nodes).
// With multicast, every 100 ms: the tree's copy is then only the heartbeat
// (fault detection, a table for nodes that missed it, and a strobe for any
// that lost the datagrams), and its messages up and down the tree cost the
// nodes more than the datagram itself.
int64_t MachineManager::answer_us() const { return multicasting() ? 100000 : 20000; }

// With one slot every strobe names the slot already running: there is
// nothing to switch, and a strobe every quantum would only cost the nodes a
// wake-up each (at 2 ms, a few per cent of a job alone).  The heartbeat
// alone then goes on, at least four times per fail-safe time.  A table with
// two slots or more brings back a strobe every quantum.
std::chrono::microseconds MachineManager::strobe_period() const
{
    if (matrix_.slots() > 1)
        return timing_.quantum;
    auto beat = std::min(std::chrono::microseconds(answer_us()),
                         std::chrono::duration_cast<std::chrono::microseconds>(timing_.failsafe) / 4);
    return std::max(timing_.quantum, beat);
}

void MachineManager::arm_strobe()
{
    auto period = strobe_period();
    if (period == armed_)
        return;
    armed_ = period;
    timeval tv = to_timeval(period);
    event_del(strobe_ev_);
    event_add(strobe_ev_, &tv);
}

std::string MachineManager::names(const net::RangeSet &set) const
{
    std::string out;
    size_t n = 0;
    for (uint32_t i : set.members()) {
        if (n++ == 16) {
            out += ",...";
            break;
        }
        if (!out.empty())
            out += ',';
        out += i < cfg_.names.size() ? cfg_.names[i] : std::to_string(i);
    }
    return out;
}

net::RangeSet MachineManager::active(const net::RangeSet &set) const
{
    if (isolated_.empty())
        return set;
    std::vector<uint32_t> keep;
    for (uint32_t i : set.members())
        if (!isolated_.count(i))
            keep.push_back(i);
    return net::RangeSet::of(keep);
}

void MachineManager::isolate(const net::RangeSet &failed, const char *what, const std::string &why)
{
    // 1 s the first time, doubling while the node keeps failing.
    auto now = std::chrono::steady_clock::now();
    std::chrono::milliseconds longest{0};
    for (uint32_t i : failed.members()) {
        auto b = backoff_.find(i);
        auto span =
            b == backoff_.end() ? std::chrono::milliseconds(1000) : std::min(b->second * 2, cfg_.isolate);
        backoff_[i] = span;
        isolated_[i] = now + span;
        longest = std::max(longest, span);
    }
    log_.error("%s failed on %s (%s): left out of strobes for %s; their jobs run unswitched meanwhile", what,
               names(failed).c_str(), why.c_str(),
               format_duration_us(static_cast<uint64_t>(longest.count()) * 1000).c_str());
}

void MachineManager::housekeeping()
{
    std::optional<Snapshot> snap;
    std::optional<Timing> timing;
    {
        std::lock_guard<std::mutex> lk(mu_);
        snap.swap(pending_);
        timing.swap(pending_timing_);
    }
    bool changed = false;
    if (timing) {
        bool q = timing->quantum != timing_.quantum;
        changed = timing->failsafe != timing_.failsafe || timing->max_slots != timing_.max_slots || q;
        timing_ = *timing;
        matrix_.set_max_slots(timing_.max_slots);
        if (q)
            armed_ = {}; // re-armed below
        if (changed)
            log_.info("quantum %s, MPL %u, fail-safe %s",
                      format_duration_us(static_cast<uint64_t>(timing_.quantum.count())).c_str(),
                      timing_.max_slots,
                      format_duration_us(static_cast<uint64_t>(timing_.failsafe.count()) * 1000).c_str());
    }
    if (snap) {
        auto suspended = snap->suspended;
        std::sort(suspended.begin(), suspended.end());
        bool moved = matrix_.update(snap->running);
        if (matrix_.overflowed())
            log_.error("the running jobs need %u slots, more than the MPL of %u: check the partitions' "
                       "OverSubscribe",
                       matrix_.slots(), matrix_.max_slots());
        changed = changed || moved || suspended != suspended_;
        suspended_ = std::move(suspended);
        std::string why = realtime_.want(!matrix_.jobs().empty());
        if (!why.empty())
            log_.warning("cannot run the machine manager at real-time priority %u (%s): strobes will "
                         "be late under load",
                         cfg_.rt_priority, why.c_str());
    }
    // Readmit isolated nodes whose time is up.
    auto now = std::chrono::steady_clock::now();
    std::vector<uint32_t> back;
    for (auto it = isolated_.begin(); it != isolated_.end();)
        if (it->second <= now) {
            back.push_back(it->first);
            it = isolated_.erase(it);
        } else
            ++it;
    if (changed) {
        Table t;
        t.epoch = ++epoch_;
        t.slots = static_cast<uint16_t>(std::min(matrix_.slots(), kMaxSlots));
        t.quantum_us = static_cast<uint32_t>(timing_.quantum.count());
        t.failsafe_ms = static_cast<uint32_t>(timing_.failsafe.count());
        net::RangeSet nodes;
        for (const auto &[id, mask] : matrix_.masks()) {
            const auto &j = matrix_.jobs().at(id);
            t.jobs.push_back({id, mask, j.nodes});
            nodes = nodes.unite(j.nodes);
        }
        t.hands_off = suspended_;
        if (strobe_sock_) {
            // A fresh key with every table: sequence numbers, the nonces,
            // never repeat under one.
            if (getrandom(t.strobe_key.data(), t.strobe_key.size(), 0) ==
                static_cast<ssize_t>(t.strobe_key.size()))
                t.has_key = true;
            else
                log_.warning("getrandom: %s: strobes of this table go down the tree alone",
                             std::strerror(errno));
        }
        // Nodes that ran jobs of the old table learn that they ended.
        net::RangeSet to = nodes.unite(gang_nodes_);
        table_ = std::move(t);
        gang_nodes_ = nodes;
        if (slot_ >= std::max(1u, matrix_.slots()))
            slot_ = 0;
        send_table(to);
        write_status();
    } else if (!back.empty()) {
        net::RangeSet r = net::RangeSet::of(back);
        log_.info("readmitting %s to strobes", names(r).c_str());
        send_table(active(r));
    }
    arm_strobe(); // the quantum, or the slots, may have changed
    if (now - last_status_ >= std::chrono::seconds(1))
        write_status();
}

void MachineManager::send_table(const net::RangeSet &to_all)
{
    net::RangeSet to = active(to_all);
    if (to.empty())
        return;
    ++tables_;
    auto alive = alive_;
    engine_->xfer_and_signal(
        to, kTableEvent, table_.encode(),
        [this, alive, to](const prim::XferResult &r) {
            if (!*alive)
                return;
            // Nodes that took the table are back for good.
            for (uint32_t i : to.members())
                if (!r.failed.contains(i))
                    backoff_.erase(i);
            if (!r.ok)
                isolate(r.failed, "table", r.error.empty() ? "no answer" : r.error);
        },
        std::chrono::milliseconds(2000));
}

void MachineManager::strobe()
{
    if (matrix_.jobs().empty()) {
        slot_since_.reset();
        return;
    }
    // Every `every`-th strobe is answered (answer_us()).
    bool mc = multicasting();
    auto every =
        static_cast<uint64_t>(std::max<int64_t>(1, answer_us() / std::max<int64_t>(1, armed_.count())));
    // A node whose network drops the multicast sees only the tree's
    // strobes: they must visit every slot in turn (every is then prime to
    // the slot count), or that node would run one slot's jobs only.
    unsigned slots = std::max(1u, std::min(matrix_.slots(), kMaxSlots));
    while (mc && std::gcd(every, static_cast<uint64_t>(slots)) != 1)
        ++every;
    bool answered = seq_ % every == 0;
    if (in_flight_ && (answered || every == 1)) {
        if (every == 1) {
            ++late_; // the previous one is still on its way: skip this one
            return;
        }
        answered = false;
    }
    net::RangeSet to = active(gang_nodes_);
    if (to.empty()) {
        slot_since_.reset();
        return;
    }
    // The slot that ran until now: the jobs not in it were stopped.
    auto now = std::chrono::steady_clock::now();
    if (slot_since_ && slots > 1) {
        auto ran = std::chrono::duration_cast<std::chrono::microseconds>(now - *slot_since_);
        std::lock_guard<std::mutex> lk(mu_);
        for (const auto &[id, mask] : matrix_.masks())
            if (!(mask >> slot_ & 1))
                stopped_[id] += ran;
    }
    slot_since_ = now;
    slot_ = (slot_ + 1) % slots;
    Strobe s{table_.epoch, static_cast<uint16_t>(slot_), ++seq_, realtime_ns()};
    // With one slot an answered strobe is the heartbeat alone (nothing to
    // switch, nothing to hurry): the tree's copy reaches every node, and a
    // datagram would only wake each node a second time.
    bool sent = !(answered && slots == 1) && multicast(s);
    if (!answered) {
        ++strobes_;
        if (!sent)
            engine_->xfer_unacked(to, kStrobeEvent, s.encode());
        return;
    }
    in_flight_ = true;
    sent_at_ = std::chrono::steady_clock::now();
    ++strobes_;
    auto timeout = std::clamp(std::chrono::duration_cast<std::chrono::milliseconds>(timing_.quantum * 20),
                              std::chrono::milliseconds(100), std::chrono::milliseconds(2000));
    auto alive = alive_;
    engine_->xfer_and_signal(
        to, kStrobeEvent, s.encode(),
        [this, alive](const prim::XferResult &r) {
            if (!*alive)
                return;
            in_flight_ = false;
            auto us = std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now() -
                                                                            sent_at_)
                          .count();
            uint32_t v = static_cast<uint32_t>(std::min<int64_t>(us, UINT32_MAX));
            if (rtt_us_.size() < kRtts)
                rtt_us_.push_back(v);
            else
                rtt_us_[rtt_next_] = v;
            rtt_next_ = (rtt_next_ + 1) % kRtts;
            if (r.ok)
                return;
            ++failed_strobes_;
            // Nodes without the current table (a restarted agent) get it
            // again; the others are isolated.
            std::vector<uint32_t> stale, lost;
            for (uint32_t i : r.failed.members()) {
                auto why = r.reasons.find(i);
                (why != r.reasons.end() && why->second.find("stale table") != std::string::npos ? stale
                                                                                                : lost)
                    .push_back(i);
            }
            if (!stale.empty()) {
                log_.info("sending the table again to %s (they hold an older one)",
                          names(net::RangeSet::of(stale)).c_str());
                send_table(net::RangeSet::of(stale));
            }
            if (!lost.empty()) {
                auto why = r.reasons.find(lost.front());
                isolate(net::RangeSet::of(lost), "strobe",
                        why != r.reasons.end() ? why->second
                        : r.error.empty()      ? "no answer"
                                               : r.error);
            }
        },
        timeout);
}

// One datagram to every node; false when strobes must go down the tree.
bool MachineManager::multicast(const Strobe &s)
{
    if (!multicasting())
        return false;
    try {
        if (strobe_sock_->send(seal_strobe(s, table_.strobe_key))) {
            ++mc_sent_;
            return true;
        }
        if (mc_errors_++ == 0)
            log_.warning("cannot multicast a strobe (%s): it goes down the tree; logged once",
                         std::strerror(errno));
    } catch (const std::exception &e) {
        if (mc_errors_++ == 0)
            log_.warning("cannot seal a strobe (%s): it goes down the tree; logged once", e.what());
    }
    return false;
}

void MachineManager::write_status()
{
    // The strobe rate over the last periodic write (writes at table changes
    // in between keep it).
    auto now = std::chrono::steady_clock::now();
    uint64_t issued = strobes_.load();
    if (now - last_status_ >= std::chrono::seconds(1)) {
        double secs = last_status_.time_since_epoch().count()
                          ? std::chrono::duration<double>(now - last_status_).count()
                          : 0;
        rate_ = secs > 0 ? static_cast<double>(issued - strobes_last_status_) / secs : 0;
        last_status_ = now;
        strobes_last_status_ = issued;
    }
    double rate = rate_;
    if (cfg_.status_path.empty())
        return;
    std::string s;
    char b[512];
    auto line = [&](const char *fmt, auto... a) {
        snprintf(b, sizeof b, fmt, a...);
        s += b;
        s += '\n';
    };
    time_t t = time(nullptr);
    char when[64];
    strftime(when, sizeof when, "%FT%T%z", localtime(&t));
    line("updated: %s", when);
    line("quantum: %s", format_duration_us(static_cast<uint64_t>(timing_.quantum.count())).c_str());
    line("mpl: %u", timing_.max_slots);
    line("failsafe: %s", format_duration_us(static_cast<uint64_t>(timing_.failsafe.count()) * 1000).c_str());
    line("epoch: %llu", static_cast<unsigned long long>(table_.epoch));
    line("slots: %u", matrix_.slots());
    line("current_slot: %u", matrix_.jobs().empty() ? 0 : slot_);
    line("strobes: %llu", static_cast<unsigned long long>(issued));
    line("strobe_rate: %.1f/s", rate);
    line("strobes_skipped: %llu", static_cast<unsigned long long>(late_));
    line("strobes_failed: %llu", static_cast<unsigned long long>(failed_strobes_));
    line("strobe_round_trip: %s", percentiles(rtt_us_).c_str());
    if (strobe_sock_)
        line("strobe_multicast: %s, %llu sent, %llu failed", mc_group_.c_str(),
             static_cast<unsigned long long>(mc_sent_), static_cast<unsigned long long>(mc_errors_));
    else
        line("strobe_multicast: off");
    line("nodes: %s", names(gang_nodes_).c_str());
    std::vector<uint32_t> iso;
    for (auto &[i, until] : isolated_)
        iso.push_back(i);
    line("isolated: %s", iso.empty() ? "-" : names(net::RangeSet::of(iso)).c_str());
    auto homes = matrix_.homes();
    for (unsigned sl = 0; sl < matrix_.slots(); ++sl) {
        std::string jobs, alt;
        for (uint32_t j : matrix_.slot_jobs(sl))
            jobs += (jobs.empty() ? "" : " ") + std::to_string(j);
        for (const auto &[id, mask] : matrix_.masks())
            if (homes[id] != sl && sl < kMaxSlots && (mask >> sl & 1))
                alt += (alt.empty() ? "" : " ") + std::to_string(id);
        line("slot %u: jobs %s; alternative %s; idle_cells %zu of %zu", sl, jobs.empty() ? "-" : jobs.c_str(),
             alt.empty() ? "-" : alt.c_str(), matrix_.idle_cells(sl), matrix_.total_cells());
    }
    for (const auto &[id, j] : matrix_.jobs())
        line("job %u: home %u mask 0x%llx nodes %s", id, homes[id],
             static_cast<unsigned long long>(matrix_.masks().at(id)), names(j.nodes).c_str());
    for (uint32_t id : suspended_)
        line("suspended_by_slurm: %u", id);
    if (!replace_file(cfg_.status_path, s, 0644, Spare::keep) && !status_error_logged_) {
        status_error_logged_ = true; // once: it is rewritten every second
        log_.error("cannot write the status file %s: %s", cfg_.status_path.c_str(), std::strerror(errno));
    }
}

} // namespace storm::gang
