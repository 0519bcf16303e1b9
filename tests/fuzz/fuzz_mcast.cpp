// Fuzz target: the multicast group's chunk datagrams (lib/net/mcast.hpp)
// as a node agent receives them.  Anyone on the network can send them, and
// the agent puts their segments together into chunk buffers before any
// seal is checked, so this is the decoder a forger reaches first.
//
// Each run opens a fresh net::Mcast (the agent's receiver: its socket, GRO,
// in-place receive) in a network namespace of the target's own, sends the
// input's datagrams to the group through the loopback, and drains them.
// Input: records of {u8 flags, u16 length, u16 gso, bytes}: gso > 0 sends
// the bytes in one system call cut into gso-byte datagrams (UDP GSO, which
// the receiver may get coalesced), else one datagram.  After the drain:
// held chunks and bytes never exceed the configured bounds; every complete
// chunk is taken under a seal and length from the input's end, and none
// opens (only a seal made with the chunk's bytes does); then the incomplete
// ones expire.
//
// Needs root (unshare(CLONE_NEWNET)); without it each run returns at once
// (a line at start says so).
#include <algorithm>
#include <arpa/inet.h>
#include <cstring>
#include <event2/event.h>
#include <net/if.h>
#include <netinet/in.h>
#include <netinet/udp.h>
#include <sched.h>
#include <set>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include "lib/net/mcast.hpp"
#include "lib/net/mcast_socket.hpp"
#include "tests/fuzz/fuzz.hpp"
#include "tests/unit/private_network.hpp"

#ifndef UDP_SEGMENT
#define UDP_SEGMENT 103
#endif

using namespace storm;

namespace {

bool g_ok = false;
event_base *g_base = nullptr;
int g_tx = -1;
constexpr uint16_t kPort = 47911;
const char *kGroup = "239.255.77.9";

using test_helpers::private_network;

void send_record(const std::string_view bytes, uint16_t gso)
{
    sockaddr_in to{};
    to.sin_family = AF_INET;
    to.sin_port = htons(kPort);
    inet_pton(AF_INET, kGroup, &to.sin_addr);
    iovec iov{const_cast<char *>(bytes.data()), bytes.size()};
    msghdr m{};
    m.msg_name = &to;
    m.msg_namelen = sizeof to;
    m.msg_iov = &iov;
    m.msg_iovlen = 1;
    alignas(cmsghdr) char ctl[CMSG_SPACE(sizeof(uint16_t))] = {};
    if (gso) {
        m.msg_control = ctl;
        m.msg_controllen = sizeof ctl;
        cmsghdr *c = CMSG_FIRSTHDR(&m);
        c->cmsg_level = SOL_UDP;
        c->cmsg_type = UDP_SEGMENT;
        c->cmsg_len = CMSG_LEN(sizeof gso);
        std::memcpy(CMSG_DATA(c), &gso, sizeof gso);
    }
    (void)sendmsg(g_tx, &m, MSG_DONTWAIT); // a record the kernel refuses is just not sent
}

} // namespace

extern "C" int LLVMFuzzerInitialize(int *, char ***)
{
    g_ok = private_network();
    if (!g_ok) {
        std::fprintf(stderr, "fuzz_mcast: needs root (a network namespace of its own): every run is empty\n");
        return 0;
    }
    g_base = event_base_new();
    g_tx = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    in_addr lo{htonl(INADDR_LOOPBACK)};
    setsockopt(g_tx, IPPROTO_IP, IP_MULTICAST_IF, &lo, sizeof lo);
    return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!g_ok)
        return 0;
    net::McastConfig cfg;
    inet_pton(AF_INET, kGroup, &cfg.group);
    cfg.port = kPort;
    cfg.iface.s_addr = htonl(INADDR_LOOPBACK);
    cfg.loop = true;
    cfg.mtu = 1500;
    cfg.max_pending = 8u << 20; // 8 chunk buffers of the usual size at least
    cfg.max_pending_chunks = 6;
    std::set<std::pair<uint64_t, uint64_t>> complete;
    std::string_view in = fuzz::bytes(data, size);
    net::ChunkSeal seal{};
    {
        net::Mcast mc(g_base, cfg, 1, Logger("fuzz_mcast"));
        mc.on_complete([&](uint64_t origin, uint64_t offset) { complete.insert({origin, offset}); });
        int records = 0;
        while (in.size() >= 5 && records++ < 64) {
            uint8_t flags = static_cast<uint8_t>(in[0]);
            size_t len = (static_cast<uint8_t>(in[1]) << 8) | static_cast<uint8_t>(in[2]);
            uint16_t gso =
                static_cast<uint16_t>((static_cast<uint8_t>(in[3]) << 8) | static_cast<uint8_t>(in[4]));
            in.remove_prefix(5);
            len = std::min({len, in.size(), net::kMaxDatagram});
            send_record(in.substr(0, len), (flags & 1) ? gso : 0);
            in.remove_prefix(len);
            if (flags & 2)
                mc.drain(); // what came so far, as a wakeup would
        }
        uint32_t want = 0; // the length the chunk's announcement would give
        if (in.size() >= sizeof seal + 4) {
            std::memcpy(&seal, in.data(), sizeof seal);
            std::memcpy(&want, in.data() + sizeof seal, 4);
        }
        mc.drain();
        FUZZ_REQUIRE(mc.pending_chunks() <= cfg.max_pending_chunks);
        FUZZ_REQUIRE(mc.pending_bytes() <= cfg.max_pending);
        for (const auto &[origin, offset] : complete)
            if (mc.complete(origin, offset))                                  // not dropped since, for room
                FUZZ_REQUIRE(mc.take(origin, offset, want, seal) == nullptr); // forged: the seal fails
        mc.expire(std::chrono::seconds(0));
        FUZZ_REQUIRE(mc.pending_bytes() <= cfg.max_pending);
    }
    return 0;
}
