#include "sched_gang/protocol.hpp"

#include <algorithm>
#include <ctime>
#include <stdexcept>

#include "lib/net/mcast.hpp"
#include "lib/net/wire.hpp"

namespace storm::gang {

namespace {
constexpr uint32_t kTableMagic = 0x53474e54;    // "SGNT"
constexpr uint32_t kStrobeMagic = 0x5347534e;   // "SGSN"
constexpr uint8_t kVersion = 2;                 // 2: the table carries the strobe key
constexpr uint32_t kDatagramMagic = 0x53474d43; // "SGMC"
constexpr size_t kDatagramHeader = 13;          // magic, version, epoch

void header(net::Reader &r, uint32_t magic, const char *what)
{
    if (r.u32() != magic)
        throw net::DecodeError(std::string(what) + ": bad magic");
    uint8_t v = r.u8();
    if (v != kVersion)
        throw net::DecodeError(std::string(what) + ": version " + std::to_string(v) + ", expected " +
                               std::to_string(kVersion));
}
} // namespace

std::string Table::encode() const
{
    net::Writer w;
    w.u32(kTableMagic);
    w.u8(kVersion);
    w.u64(epoch);
    w.u16(slots);
    w.u32(quantum_us);
    w.u32(failsafe_ms);
    w.u32(static_cast<uint32_t>(jobs.size()));
    for (const auto &j : jobs) {
        w.u32(j.job_id);
        w.u64(j.mask);
        j.nodes.encode(w);
    }
    w.u32(static_cast<uint32_t>(hands_off.size()));
    for (uint32_t j : hands_off)
        w.u32(j);
    w.u8(has_key ? 1 : 0);
    if (has_key)
        w.raw(strobe_key.data(), strobe_key.size());
    return w.take();
}

Table Table::decode(std::string_view data)
{
    net::Reader r(data);
    header(r, kTableMagic, "gang table");
    Table t;
    t.epoch = r.u64();
    t.slots = r.u16();
    if (t.slots > 64)
        throw net::DecodeError("gang table: " + std::to_string(t.slots) + " slots, at most 64");
    t.quantum_us = r.u32();
    t.failsafe_ms = r.u32();
    if (t.failsafe_ms == 0)
        throw net::DecodeError("gang table: fail-safe time 0");
    uint32_t n = r.u32();
    if (n > kMaxJobs || n > r.remaining() / 12)
        throw net::DecodeError("gang table: " + std::to_string(n) + " jobs do not fit the message");
    t.jobs.reserve(n);
    for (uint32_t i = 0; i < n; ++i) {
        TableJob j;
        j.job_id = r.u32();
        j.mask = r.u64();
        j.nodes = net::RangeSet::decode(r);
        t.jobs.push_back(std::move(j));
    }
    uint32_t h = r.u32();
    if (h > kMaxJobs || h > r.remaining() / 4)
        throw net::DecodeError("gang table: " + std::to_string(h) + " suspended jobs do not fit the message");
    for (uint32_t i = 0; i < h; ++i)
        t.hands_off.push_back(r.u32());
    uint8_t k = r.u8();
    if (k > 1)
        throw net::DecodeError("gang table: key flag " + std::to_string(k));
    t.has_key = k == 1;
    if (t.has_key) {
        auto key = r.raw(t.strobe_key.size());
        std::copy(key.begin(), key.end(), t.strobe_key.begin());
    }
    r.finish();
    return t;
}

std::string Strobe::encode() const
{
    net::Writer w;
    w.u32(kStrobeMagic);
    w.u8(kVersion);
    w.u64(epoch);
    w.u16(slot);
    w.u64(seq);
    w.u64(static_cast<uint64_t>(sent_ns));
    return w.take();
}

Strobe Strobe::decode(std::string_view data)
{
    net::Reader r(data);
    header(r, kStrobeMagic, "gang strobe");
    Strobe s;
    s.epoch = r.u64();
    s.slot = r.u16();
    if (s.slot >= 64)
        throw net::DecodeError("gang strobe: slot " + std::to_string(s.slot) + " beyond 63");
    s.seq = r.u64();
    s.sent_ns = static_cast<int64_t>(r.u64());
    r.finish();
    return s;
}

uint16_t strobe_port(const net::McastConfig &mcast)
{
    if (mcast.port == 65535)
        throw std::invalid_argument("the strobe port would be 65536");
    return static_cast<uint16_t>(mcast.port + 1);
}

std::string seal_strobe(const Strobe &s, const StrobeKey &key)
{
    net::Writer w;
    w.u32(kDatagramMagic);
    w.u8(kVersion);
    w.u64(s.epoch);
    // The sequence number is the nonce: the manager never repeats one under
    // a table's key (keys are drawn afresh with each table).
    return net::seal_datagram(key.data(), s.seq, w.take(), s.encode());
}

uint64_t strobe_datagram_epoch(std::string_view d)
{
    if (d.size() < kDatagramHeader)
        throw net::DecodeError("gang strobe datagram: " + std::to_string(d.size()) + " bytes");
    net::Reader r(d.data(), kDatagramHeader);
    if (r.u32() != kDatagramMagic)
        throw net::DecodeError("gang strobe datagram: bad magic");
    uint8_t v = r.u8();
    if (v != kVersion)
        throw net::DecodeError("gang strobe datagram: version " + std::to_string(v) + ", expected " +
                               std::to_string(kVersion));
    return r.u64();
}

Strobe open_strobe(std::string_view d, const StrobeKey &key)
{
    uint64_t epoch = strobe_datagram_epoch(d), nonce = 0;
    std::string body;
    if (!net::open_datagram(key.data(), d, kDatagramHeader, nonce, body))
        throw net::DecodeError("gang strobe datagram: does not match the table's key (forged or corrupt)");
    Strobe s = Strobe::decode(body);
    if (s.epoch != epoch || s.seq != nonce)
        throw net::DecodeError("gang strobe datagram: its header does not match its strobe");
    return s;
}

int64_t realtime_ns()
{
    timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return int64_t(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

} // namespace storm::gang
