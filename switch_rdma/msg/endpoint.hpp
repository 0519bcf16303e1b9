// One task's end of a communication context: the state behind the C API of
// storm_msg.h (one Endpoint per process, created by storm_msg_init()).
//
// Threads:
//  - application threads call send/recv/barrier/finalize.  They write
//    packets into the send ring and take packets from the receive ring in
//    the task's share of the window, only while QueueHeader::resident is 1
//    (else they FUTEX_WAIT on it), and keep arrived messages in private
//    memory until received.  send_mu_ serialises senders (a message's
//    packets stay contiguous), recv_mu_ the receive ring and the messages.
//  - the progress thread (the "NIC") owns the sockets, the control
//    channel, the Credits and the Flush: it injects the send ring's packets
//    in order when it holds a credit of their destination, stores arriving
//    packets in the receive ring, returns credits, runs halt / release, and
//    keeps the coscheduling hooks (cosched.hpp): the status byte of every
//    frame it queues, the requests on arrivals, the agent's status pushes.
// They wake each other with a futex word (app_seq_) and an eventfd.
// Failure (fail()) is final: every later call returns -1 with its reason.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "switch_rdma/context.hpp"
#include "switch_rdma/control.hpp"
#include "switch_rdma/layout.hpp"
#include "switch_rdma/msg/cosched.hpp"
#include "switch_rdma/msg/credits.hpp"
#include "switch_rdma/msg/flush.hpp"
#include "switch_rdma/msg/frames.hpp"

namespace storm::rdma::msg {

// A failure of a call, already described (the C API's -1 + errno).
class MsgError : public std::runtime_error {
public:
    MsgError(int err, const std::string &what) : std::runtime_error(what), err_(err) {}
    int err() const noexcept { return err_; }

private:
    int err_;
};

struct Stats {
    std::atomic<uint64_t> packets_sent{0}, packets_received{0}, messages_sent{0}, messages_received{0},
        credit_stalls{0}, halts{0}, releases{0}, resident_waits{0}, credits_missing{0};
};

// Tags at and above this are the library's own (barrier).
constexpr uint32_t internal_tags = 0x80000000u;
constexpr uint32_t barrier_tag = internal_tags + 1;

class Endpoint {
public:
    // Attaches with the environment (STORM_CTX, STORM_POOL_SOCKET,
    // SLURM_PROCID, STORM_MSG_TIMEOUT) and connects to every peer; throws
    // MsgError describing what failed.  First registers with the node's
    // local scheduler when STORM_COSCHED_SOCKET is set (cosched.hpp: never
    // a failure of the call).
    Endpoint();
    ~Endpoint();
    Endpoint(const Endpoint &) = delete;
    Endpoint &operator=(const Endpoint &) = delete;

    uint32_t rank() const noexcept { return rank_; }
    uint32_t size() const noexcept { return ntasks_; }
    void send(uint32_t dst, uint32_t tag, const void *buf, size_t len);
    // Returns the length; `internal` lets it match the library's tags.
    size_t recv(int src, int64_t tag, void *buf, size_t cap, uint32_t *out_src, uint32_t *out_tag,
                bool internal = false);
    // Length of the first matching message that arrived, or -1.
    int64_t probe(int src, int64_t tag, uint32_t *out_src, uint32_t *out_tag);
    void barrier();
    // Collective end (see storm_msg_finalize); throws MsgError if it could
    // not complete cleanly.  The endpoint is closed either way.
    void finalize();
    const Stats &stats() const noexcept { return stats_; }
    const Cosched &cosched() const noexcept { return *cosched_; }
    uint32_t credits() const noexcept { return att_.credits; }

private:
    struct Message {
        uint32_t src, tag;
        std::string data;
    };
    struct Partial {
        bool active = false;
        uint32_t tag = 0, msg_len = 0;
        std::string data;
    };
    struct Peer {
        int fd = -1;
        std::string in, out;
        size_t out_off = 0;
        bool bye = false, fin = false, closed = false;
    };

    // set-up
    void attach(const std::string &socket_path);
    void check_header();
    void connect_peers();
    void close_all() noexcept;

    // application side
    bool resident() const noexcept { return q_->resident.load(std::memory_order_acquire) == 1; }
    void wait_resident();
    void wait_app(uint32_t seen, bool for_resident);
    void check_failed();
    void drain(); // recv_mu_ held
    void write_packet(uint32_t dst, uint32_t tag, const uint8_t *data, uint32_t len, uint32_t msg_len,
                      uint32_t flags);
    void wake_progress() noexcept;
    std::deque<Message>::iterator match(int src, int64_t tag, bool internal);

    // progress thread (progress.cpp)
    void progress_main() noexcept;
    void progress_step();
    bool progress_has_work();
    void inject();
    void take_consumed(bool all);
    void read_control();
    void read_peer(uint32_t p);
    void deliver(uint32_t p, const Frame &f, const PacketHeader &h, const char *data);
    void flush_out(uint32_t p);
    void queue_frame(uint32_t p, uint8_t type, uint64_t value, uint32_t refill = 0);
    void queue_marks(uint8_t type, uint64_t epoch);
    void answer(Flush::Answer a);
    void send_halted();
    void control_send(const std::string &m);
    void peer_closed(uint32_t p, const std::string &why);
    void abort_peers(const std::string &reason) noexcept;
    void check_timeouts();
    void finalize_steps();

    void fail(const std::string &reason) noexcept;
    void wake_app() noexcept;

    uint8_t *send_slot_at(uint64_t i) const noexcept
    {
        return reinterpret_cast<uint8_t *>(q_) + sizeof(QueueHeader) +
               (i % att_.send_slots) * att_.packet_size;
    }
    uint8_t *recv_slot_at(uint64_t i) const noexcept
    {
        return reinterpret_cast<uint8_t *>(q_) + sizeof(QueueHeader) +
               (uint64_t{att_.send_slots} + i % att_.recv_slots) * att_.packet_size;
    }

    Context ctx_;
    uint32_t rank_ = 0, ntasks_ = 0, local_ = 0;
    int timeout_s_ = 30;
    int ctl_fd_ = -1;
    control::Attached att_;
    void *map_ = nullptr;
    size_t map_len_ = 0;
    QueueHeader *q_ = nullptr;
    uint32_t payload_ = 0; // message bytes per packet
    std::vector<Peer> peers_;
    int prog_efd_ = -1;
    std::thread progress_;
    Stats stats_;
    std::unique_ptr<Cosched> cosched_; // set first in the constructor, never null after

    // wake-ups
    std::atomic<uint32_t> app_seq_{0};
    std::atomic<uint32_t> app_waiters_{0};
    std::atomic<bool> prog_sleeping_{false};

    // failure
    std::atomic<bool> failed_{false};
    std::mutex fail_mu_;
    std::string fail_reason_;

    // application side
    std::mutex send_mu_, recv_mu_;
    std::vector<uint64_t> seq_to_;   // send_mu_: next packet seq per destination
    std::vector<uint64_t> seq_from_; // recv_mu_: expected packet seq per source
    std::vector<Partial> partial_;   // recv_mu_
    std::deque<Message> messages_;   // recv_mu_: arrived, not received
    std::vector<uint64_t> notified_; // recv_mu_: consumed counts the progress thread was told of
    std::unique_ptr<std::atomic<uint64_t>[]> consumed_; // per source, written by the application
    std::atomic<bool> finalizing_{false};
    std::atomic<bool> done_{false}; // the progress thread finished finalize (or failed)

    // progress thread only
    std::unique_ptr<Credits> credits_;
    std::unique_ptr<Flush> flush_;
    std::vector<uint64_t> consumed_seen_;
    bool stalled_ = false;
    // A halted{epoch} answer waiting for this task's own halt marks to be
    // written: the agent stops the task once it answers, and a mark still
    // in `out` then would leave the peers waiting for it until the job
    // runs again (0: none).
    uint64_t halted_unsent_ = 0;
    bool bye_sent_ = false, fin_sent_ = false;
    std::chrono::steady_clock::time_point wait_since_, fin_deadline_;
    bool fin_deadline_set_ = false;
};

} // namespace storm::rdma::msg
