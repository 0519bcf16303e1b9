// What the machine manager (slurmctld) sends the node agents, as
// XFER-AND-SIGNAL events:
//
//   "gang:table"   Table   when the matrix changes (and again to nodes that
//                          missed it): every gang-scheduled job, its nodes
//                          and the slots it runs in; the jobs Slurm itself
//                          suspended (hands off); the fail-safe time.
//   "gang:strobe"  Strobe  every quantum: the slot to run now.
//
// With multicast (SwitchParameters storm_mcast=GROUP:PORT) the manager
// also sends every strobe as one UDP datagram to GROUP:PORT+1, sealed
// (seal_strobe: AES-128-GCM, the strobe's sequence number as nonce) under
// a key drawn afresh for each table and carried in it over the
// authenticated tree; only strobes about every 100 ms then also go down
// the tree (answered).  A node applies a strobe once, by whichever path
// brings it first (sequence numbers only increase within a table), so a
// replayed datagram is ignored as an old one.
//
// A strobe names the table's epoch; a node applies only strobes of the
// table it holds, so a strobe can never act on a stale table.  Epochs start
// from the manager's start time, so a restarted manager never reuses one.
//
// Contract: decode() throws net::DecodeError on anything malformed (wrong
// magic or version, a slot beyond the table, too many jobs, trailing bytes).
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "lib/net/mcast.hpp"
#include "lib/net/rangeset.hpp"

namespace storm::gang {

inline const std::string kTableEvent = "gang:table";
inline const std::string kStrobeEvent = "gang:strobe";

using StrobeKey = std::array<unsigned char, 16>;

struct TableJob {
    uint32_t job_id = 0;
    uint64_t mask = 0; // slots the job runs in
    net::RangeSet nodes;
    bool operator==(const TableJob &o) const
    {
        return job_id == o.job_id && mask == o.mask && nodes == o.nodes;
    }
};

struct Table {
    static constexpr uint32_t kMaxJobs = 1u << 20;
    uint64_t epoch = 0;
    uint16_t slots = 0;
    uint32_t quantum_us = 0;
    uint32_t failsafe_ms = 0; // a node continues every job after this long without a strobe
    std::vector<TableJob> jobs;
    std::vector<uint32_t> hands_off; // jobs suspended by Slurm: never stopped or continued
    bool has_key = false;            // strobes also come by multicast, sealed under strobe_key
    StrobeKey strobe_key{};

    std::string encode() const;
    static Table decode(std::string_view data);
};

struct Strobe {
    uint64_t epoch = 0;
    uint16_t slot = 0;
    uint64_t seq = 0;
    int64_t sent_ns = 0; // CLOCK_REALTIME at issue

    std::string encode() const;
    static Strobe decode(std::string_view data);
};

// Where strobes go by multicast: storm_mcast's PORT+1.  Throws
// std::invalid_argument for PORT 65535 (the settings refuse it already).
uint16_t strobe_port(const net::McastConfig &mcast);

// The multicast form of a strobe (see above).  seal_strobe throws
// std::runtime_error if the cipher fails; strobe_datagram_epoch (the
// table whose key to open it with) and open_strobe throw net::DecodeError
// on anything else than a strobe datagram sealed under `key`.
std::string seal_strobe(const Strobe &s, const StrobeKey &key);
uint64_t strobe_datagram_epoch(std::string_view datagram);
Strobe open_strobe(std::string_view datagram, const StrobeKey &key);

int64_t realtime_ns();

} // namespace storm::gang
