#include "agent/node_agent.hpp"

#include <cerrno>
#include <fcntl.h>
#include <future>
#include <system_error>
#include <unistd.h>

#include <event2/event.h>

#include "lib/common/precise_base.hpp"
#include "lib/common/procs.hpp"
#include "lib/common/signals.hpp"
#include "lib/common/thread_name.hpp"
#include "lib/common/thread_nice.hpp"

namespace storm::agent {

NodeAgent::NodeAgent(const AgentConfig &config, const Logger &log, std::optional<AgentNetwork> network)
    : config_(config), log_(log), network_(std::move(network))
{
}

NodeAgent::~NodeAgent() { stop(); }

void NodeAgent::start()
{
    if (thread_.joinable())
        throw std::logic_error("node agent already started");
    if (pipe2(control_, O_CLOEXEC | O_NONBLOCK) < 0)
        throw std::system_error(errno, std::generic_category(), "node agent: pipe");
    base_ = new_precise_base(); // halt waits and stop checks of a few ms
    if (!base_) {
        stop();
        throw std::runtime_error("node agent: event_base_new failed");
    }
    control_ev_ = event_new(base_, control_[0], EV_READ | EV_PERSIST, on_control, this);
    if (!control_ev_ || event_add(control_ev_, nullptr) < 0) {
        stop();
        throw std::runtime_error("node agent: cannot register its control channel");
    }
    if (network_) {
        try {
            start_services();
        } catch (...) {
            stop();
            throw;
        }
    }
    std::promise<void> started;
    auto ready = started.get_future();
    std::string nice_failed;
    try {
        thread_ = std::thread([this, &started, &nice_failed] {
            name_thread("storm-agent");
            nice_failed = set_thread_nice(config_.nice);
            running_ = true;
            started.set_value();
            run();
        });
    } catch (...) {
        stop();
        throw;
    }
    ready.wait();
    if (!nice_failed.empty())
        log_.warning("the node agent runs at slurmd's priority, not at nice %d: %s", config_.nice,
                     nice_failed.c_str());
    if (network_)
        log_.info("node agent started (port %u, fanout %u, node %u of %zu, libevent %s backend %s)",
                  config_.port, config_.fanout, network_->self, network_->nodes.size(), event_get_version(),
                  event_base_get_method(base_));
    else
        log_.info("node agent started (port %u, fanout %u, libevent %s backend %s)", config_.port,
                  config_.fanout, event_get_version(), event_base_get_method(base_));
}

// The engine, then each capability the network sets up, on the loop
// before it runs; the gang switcher and the pool see each other through
// lib/node's SwitchHook and SwitchControl.
void NodeAgent::start_services()
{
    AgentNetwork &net = *network_;
    prim::EngineConfig ec;
    ec.self = net.self;
    ec.nodes = net.nodes;
    ec.fanout = config_.fanout;
    ec.mcast = config_.mcast;
    ec.hello_timeout = net.hello_timeout;
    engine_ = std::make_unique<prim::Engine>(base_, ec, *net.auth, log_);
    host_.base = base_;
    host_.engine = engine_.get();
    host_.self = net.self;
    host_.nodes = net.nodes;
    host_.names = net.names;
    host_.fanout = config_.fanout;
    host_.steps = net.step_lister;
    host_.trusted = net.trusted;
    host_.log = log_;
    heartbeat_ = std::make_unique<prim::HeartbeatReceiver>(*engine_, "main",
                                                           prim::HeartbeatMaster::Config{}.queue_length);
    if (net.gang && net.step_lister) {
        gang::NodeSetup gs = *net.gang;
        gs.signals_only = !config_.gang_freeze;
        gs.lend = config_.gang_lend;
        gs.rt_priority = config_.rt_priority;
        gs.mcast = config_.mcast;
        switcher_ = gang::make_node_service(host_, gs);
    }
    if (net.pool) {
        std::function<bool(pid_t)> stopped;
        if (switcher_ && switcher_->freezing()) // frozen tasks sleep (state S), not stopped (T)
            stopped = [sw = switcher_.get()](pid_t pid) { return threads_stopped(pid) || sw->frozen(pid); };
        try {
            pool_ = rdma::make_node_service(host_, *net.pool, config_.pool, admissions_, std::move(stopped));
            if (switcher_) {
                switcher_->set_hook(pool_.get());
                pool_->set_switcher(switcher_.get());
            }
        } catch (const std::exception &e) {
            pool_.reset();
            log_.child("rdma").warning("communication contexts are off on this node: %s", e.what());
        }
    }
    if (net.cosched && config_.cosched.enabled()) {
        // Admits the jobs whose coscheduled contexts slurmstepd opened on
        // the pool (none while the pool is off).
        try {
            cosched_ = cosched::make_node_service(host_, *net.cosched, config_.cosched, admissions_);
        } catch (const std::exception &e) {
            cosched_.reset();
            log_.child("cosched").warning("implicit coscheduling is off on this node: %s", e.what());
        }
    }
    engine_->on_signal(
        [this](const std::string &ev, uint64_t, const std::string &) { heartbeat_->on_signal(ev); });
    if (net.bcast)
        bcast_ = bcast::make_node_service(host_, std::move(*net.bcast));
    engine_->listen();
}

void NodeAgent::run() noexcept
{
    block_sigpipe(); // a peer that dies must not kill slurmd
    int rc = event_base_dispatch(base_);
    running_ = false;
    if (rc < 0)
        log_.error("node agent: event loop failed");
}

void NodeAgent::on_control(int fd, short, void *arg)
{
    auto *self = static_cast<NodeAgent *>(arg);
    char buf[64];
    ssize_t n;
    while ((n = read(fd, buf, sizeof buf)) > 0) {
        for (ssize_t i = 0; i < n; ++i) {
            self->wakeups_++;
            if (buf[i] == static_cast<char>(Control::stop))
                event_base_loopbreak(self->base_);
        }
    }
}

bool NodeAgent::send(Control c) noexcept
{
    if (control_[1] < 0 || !running_)
        return false;
    char b = static_cast<char>(c);
    ssize_t n;
    do
        n = write(control_[1], &b, 1);
    while (n < 0 && errno == EINTR);
    return n == 1;
}

bool NodeAgent::ping() noexcept { return send(Control::ping); }

void NodeAgent::stop() noexcept
{
    bool was_started = thread_.joinable();
    if (was_started) {
        send(Control::stop);
        thread_.join();
    }
    if (switcher_)
        switcher_->set_hook(nullptr);
    switcher_.reset(); // continues every job it stopped
    pool_.reset();     // closes the contexts' windows and channels
    cosched_.reset();  // gives every coscheduled job its CPU back
    bcast_.reset();    // removes what open broadcasts staged
    heartbeat_.reset();
    engine_.reset(); // closes its connections; before the base goes
    if (control_ev_) {
        event_free(control_ev_);
        control_ev_ = nullptr;
    }
    if (base_) {
        event_base_free(base_);
        base_ = nullptr;
    }
    for (int &fd : control_)
        if (fd >= 0) {
            close(fd);
            fd = -1;
        }
    if (was_started)
        log_.info("node agent stopped");
}

} // namespace storm::agent
