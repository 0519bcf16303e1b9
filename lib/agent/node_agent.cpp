#include "lib/agent/node_agent.hpp"

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
            prim::EngineConfig ec;
            ec.self = network_->self;
            ec.nodes = network_->nodes;
            ec.fanout = config_.fanout;
            ec.mcast = config_.mcast;
            engine_ = std::make_unique<prim::Engine>(base_, ec, *network_->auth, log_);
            heartbeat_ = std::make_unique<prim::HeartbeatReceiver>(
                *engine_, "main", prim::HeartbeatMaster::Config{}.queue_length);
            if (network_->step_lister) {
                gang::SwitcherConfig sc{network_->self,
                                        network_->gang_journal_dir,
                                        std::chrono::milliseconds(1000),
                                        config_.rt_priority,
                                        config_.mcast,
                                        {},
                                        false};
                if (sc.mcast.iface.s_addr == INADDR_ANY)
                    sc.mcast.iface = network_->nodes.at(network_->self).sin_addr;
                sc.freeze.emplace();
                sc.freeze->group = network_->gang_freeze_group;
                sc.signals_only = !config_.gang_freeze;
                sc.lend = config_.gang_lend;
                switcher_ =
                    std::make_unique<gang::Switcher>(base_, *engine_, network_->step_lister, sc, log_);
                switcher_->recover();
                engine_->add_sink("gang:", [this](const std::string &ev, uint64_t origin, uint64_t offset,
                                                  uint64_t total, std::string_view data, bool) {
                    return switcher_->on_chunk(ev, origin, offset, total, data);
                });
            }
            if (!network_->pool_socket.empty()) {
                rdma::PoolSetup ps;
                ps.socket_path = network_->pool_socket;
                ps.stats_path = network_->pool_stats;
                ps.self_addr = network_->nodes.at(network_->self).sin_addr.s_addr;
                ps.trusted = network_->pool_trusted;
                ps.config = config_.pool;
                ps.admissions = admissions_;
                if (switcher_ && switcher_->freezing()) // frozen tasks sleep (state S), not stopped (T)
                    ps.is_stopped = [sw = switcher_.get()](pid_t pid) {
                        return threads_stopped(pid) || sw->frozen(pid);
                    };
                try {
                    pool_ = std::make_unique<rdma::Pool>(base_, ps, log_);
                    pool_->start();
                    if (switcher_) {
                        switcher_->set_hook(pool_.get());
                        pool_->set_switcher(switcher_.get());
                    }
                } catch (const std::exception &e) {
                    pool_.reset();
                    log_.error("rdma: communication contexts are off on this node: %s", e.what());
                }
            }
            if (!network_->cosched_socket.empty() && config_.cosched.enabled()) {
                cosched::LocalSetup cs;
                cs.socket_path = network_->cosched_socket;
                cs.stats_path = network_->cosched_socket.substr(0, network_->cosched_socket.rfind('/') + 1) +
                                "storm-cosched.stats";
                cs.config = config_.cosched;
                // Admits the jobs whose coscheduled contexts slurmstepd opened
                // on the pool (none while the pool is off).
                cs.verifier =
                    cosched::make_verifier(network_->step_lister, admissions_, config_.cosched.partitions);
                if (!network_->cosched_group.empty())
                    cs.enforcer.group = network_->cosched_group;
                try {
                    cosched_ = std::make_unique<cosched::Local>(base_, std::move(cs), log_);
                    cosched_->start();
                } catch (const std::exception &e) {
                    cosched_.reset();
                    log_.error("cosched: implicit coscheduling is off on this node: %s", e.what());
                }
            }
            engine_->on_signal(
                [this](const std::string &ev, uint64_t, const std::string &) { heartbeat_->on_signal(ev); });
            if (network_->authorizer) {
                uint32_t self = network_->self;
                std::string name =
                    self < network_->names.size() ? network_->names[self] : std::to_string(self);
                bcast_receiver_ = std::make_unique<bcast::Receiver>(
                    base_, *engine_, *network_->authorizer,
                    bcast::ReceiverConfig{self, name, network_->journal_dir, network_->bcast_gate_socket,
                                          network_->pool_trusted},
                    log_);
                bcast_receiver_->recover();
                bcast_service_ = std::make_unique<bcast::Service>(
                    *engine_, *network_->authorizer,
                    bcast::ServiceConfig{self, network_->names, config_.fanout}, log_);
                engine_->add_sink("bcast:", [this](const std::string &ev, uint64_t origin, uint64_t, uint64_t,
                                                   std::string_view data, bool sealed) {
                    return bcast_receiver_->on_chunk(ev, origin, data, sealed);
                });
                engine_->on_service_frames([this](net::Connection &c, const net::FrameHeader &h,
                                                  std::string_view p) { bcast_service_->on_frame(c, h, p); },
                                           [this](net::Connection &c) { bcast_service_->on_closed(c); });
            }
            engine_->listen();
        } catch (...) {
            stop();
            throw;
        }
    }
    std::promise<void> started;
    auto ready = started.get_future();
    try {
        thread_ = std::thread([this, &started] {
            name_thread("storm-agent");
            running_ = true;
            started.set_value();
            run();
        });
    } catch (...) {
        stop();
        throw;
    }
    ready.wait();
    if (network_)
        log_.info("node agent started (port %u, fanout %u, node %u of %zu, libevent %s backend %s)",
                  config_.port, config_.fanout, network_->self, network_->nodes.size(), event_get_version(),
                  event_base_get_method(base_));
    else
        log_.info("node agent started (port %u, fanout %u, libevent %s backend %s)", config_.port,
                  config_.fanout, event_get_version(), event_base_get_method(base_));
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
    bcast_service_.reset();
    bcast_receiver_.reset(); // removes what open broadcasts staged
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
