// The seeds of the fuzz targets' corpora: one valid encoding of each
// message a target decodes, made by the encoders themselves, so that a run
// starts from deep inside each decoder.  `tests/fuzz/build` builds it as
// OUTDIR/seeds; `seeds DIR` writes DIR/<target>/seed-<n> (kept in
// tests/fuzz/corpus/ with what runs found).
#include <arpa/inet.h>
#include <cstring>
#include <fstream>
#include <string>
#include <tuple>
#include <sys/stat.h>

#include "launch_bcast/gate.hpp"
#include "launch_bcast/protocol.hpp"
#include "lib/net/frame.hpp"
#include "lib/net/wire.hpp"
#include "sched_gang/protocol.hpp"
#include "lib/node/cosched_protocol.h"
#include "switch_rdma/context.hpp"
#include "switch_rdma/control.hpp"
#include "switch_rdma/msg/handshake.hpp"

using namespace storm;

namespace {

std::string dir;

void seed(const std::string &target, int n, uint8_t pick, const std::string &bytes, bool picked = true)
{
    std::string d = dir + "/" + target;
    mkdir(d.c_str(), 0755);
    std::ofstream out(d + "/seed-" + std::to_string(n), std::ios::binary);
    if (picked)
        out.put(static_cast<char>(pick));
    out << bytes;
}

} // namespace

int main(int argc, char **argv)
{
    if (argc != 2)
        return 2;
    dir = argv[1];
    mkdir(dir.c_str(), 0755);

    seed("fuzz_hello", 1, 0,
         "storm:v2:3:4294967295:0123456789abcdef0123456789abcdef:fedcba9876543210fedcba9876543210");
    {
        net::Writer w;
        w.bytes("fedcba9876543210fedcba9876543210");
        seed("fuzz_hello", 2, 1, w.data());
    }
    std::string f;
    net::encode_frame(f, net::MsgType::caw, 7, std::string("\0\0\0\3abc", 7));
    seed("fuzz_frame", 1, 0, f, false);

    bcast::OpenRequest o;
    o.cred = "credential";
    o.dest = "/tmp/dest/";
    o.fanout = 2;
    o.entries.resize(2);
    o.entries[0].path = "dir";
    o.entries[0].kind = bcast::Entry::directory;
    o.entries[0].mode = 0755;
    o.entries[1].path = "dir/file";
    o.entries[1].mode = 0644;
    o.entries[1].size = 12345;
    seed("fuzz_bcast", 1, 0, o.encode());
    bcast::Entry link;
    o.entries[0].path = ""; // valid as a whole this time
    link.path = "dir/link";
    link.kind = bcast::Entry::symlink;
    link.target = "../outside";
    o.entries.push_back(link);
    link.path = "dir/hard";
    link.kind = bcast::Entry::hardlink;
    link.target.clear();
    link.link = 1;
    o.entries.push_back(link);
    seed("fuzz_bcast", 6, 0, o.encode());
    bcast::Reply r;
    r.kind = bcast::Reply::failed;
    r.value = 3;
    r.message = "no space left on device";
    seed("fuzz_bcast", 2, 1, r.encode());
    net::Writer w;
    bcast::ChunkHeader h;
    h.entry = 1;
    h.offset = 4096;
    h.raw_len = 100;
    h.crc = 0xe3069283;
    h.codec = bcast::Codec::zlib;
    h.encode(w);
    seed("fuzz_bcast", 3, 2, w.data());
    // A chunk of each codec whose bytes inflate to its raw_len.
    for (auto [n, codec, fill] : {std::tuple{8, bcast::Codec::zstd, 's'}, std::tuple{9, bcast::Codec::lz4, 'l'}}) {
        std::string raw(100, fill), packed;
        bcast::compress(codec, raw, packed);
        net::Writer wc;
        bcast::ChunkHeader hc = h;
        hc.codec = codec;
        hc.encode(wc);
        seed("fuzz_bcast", n, 2, wc.data() + packed);
    }
    std::string pack;
    bcast::encode_record_header(pack, 1, 0, 5);
    pack += "hello";
    bcast::encode_record_header(pack, 3, 0, 64);
    pack += std::string(64, 'x');
    bcast::encode_record_header(pack, 5, 0, 3);
    pack += "abc";
    seed("fuzz_bcast", 7, 5, pack);
    seed("fuzz_bcast", 4, 3, "a/b/c");
    seed("fuzz_bcast", 5, 4, bcast::gate::format({1, 0xfedcba9876543210ull}));

    gang::Table t;
    t.epoch = 99;
    t.slots = 2;
    t.quantum_us = 10000;
    t.failsafe_ms = 5000;
    gang::TableJob j;
    j.job_id = 12;
    j.mask = 1;
    j.nodes = net::RangeSet::range(0, 4);
    t.jobs.push_back(j);
    j.job_id = 13;
    j.mask = 2;
    t.jobs.push_back(j);
    t.hands_off = {14};
    t.has_key = true;
    t.strobe_key[0] = 0x5a;
    seed("fuzz_gang", 1, 0, t.encode());
    gang::Strobe s;
    s.epoch = 99;
    s.slot = 1;
    s.seq = 5;
    s.sent_ns = 1700000000000000000ll;
    seed("fuzz_gang", 2, 1, s.encode());
    seed("fuzz_gang", 3, 2, gang::seal_strobe(s, t.strobe_key));

    rdma::Context c;
    c.id = 3;
    c.job_id = 4242;
    c.step_id = 7;
    c.uid = 1000;
    c.divisions = 2;
    c.port_base = 40000;
    c.ntasks = 4;
    c.nodes = {{inet_addr("10.0.0.1"), {0, 2}}, {inet_addr("10.0.0.2"), {1, 3}}};
    seed("fuzz_context", 1, 0, c.encode(), false);
    c.key = std::string(rdma::context_key_bytes, '\x5a');
    seed("fuzz_context", 2, 0, c.encode(), false); // version 4, with its key
    {
        // The handshake: a hello of fuzz_msg_hello's context that proves
        // its key over the target's challenge; a challenge; an answer.
        rdma::Context k;
        k.id = 3;
        k.job_id = 4242;
        k.step_id = 7;
        k.key = std::string(rdma::context_key_bytes, 'k');
        rdma::msg::Challenge ch{rdma::msg::hello_magic, rdma::msg::byte_order, {}};
        std::memset(ch.nonce, 0x5a, sizeof ch.nonce);
        rdma::msg::Hello h = rdma::msg::make_hello(k, 1, 0, 1024, ch);
        auto raw = [](const auto &m) { return std::string(reinterpret_cast<const char *>(&m), sizeof m); };
        seed("fuzz_msg_hello", 1, 0, raw(h));
        seed("fuzz_msg_hello", 2, 1, raw(ch));
        seed("fuzz_msg_hello", 3, 2, raw(rdma::msg::make_ack(k.key, ch, h)));
        h.magic = rdma::msg::hello_magic_v2;
        seed("fuzz_msg_hello", 4, 0, raw(h).substr(0, rdma::msg::old_hello_size));
    }
    seed("fuzz_control", 1, 0, rdma::control::open(c));
    seed("fuzz_control", 2, 0, rdma::control::close(7, 42, 0));
    seed("fuzz_control", 3, 0, rdma::control::attach(7, 42, 0, 3));
    seed("fuzz_control", 4, 0, rdma::control::epoch_message(rdma::control::Type::halted, 9));
    {
        unsigned char m[STORM_COSCHED_MSG_SIZE];
        storm_cosched_encode(m, STORM_COSCHED_REGISTER, 0, 42, 3, 0);
        seed("fuzz_control", 5, 1, std::string(reinterpret_cast<char *>(m), sizeof m));
    }
    seed("fuzz_control", 6, 3, bcast::gate::hold(42, 0, {0x0123456789abcdefull, 7}));

    seed("fuzz_settings", 1, 0,
         "storm_agent_port=6830,storm_fanout=8,storm_mcast=239.255.77.1:6831,storm_mcast_mtu=1500,"
         "storm_gang_stop=signal,storm_cosched_partitions=work,storm_cosched_slice=2s");
    seed("fuzz_settings", 2, 1,
         "bf_interval=1,storm_gang_quantum=10ms,storm_gang_failsafe=2s,storm_gang_mpl=2");

    // Command lines: NUL between the arguments.
    using namespace std::string_literals;
    seed("fuzz_bcast_args", 1, 0,
         "-f\0-p\0--compress=zlib\0-s\0"
         "64k\0--timeout=30\0-j\0"
         "42.3\0-F\0"
         "4\0--window=8m\0"
         "--send-libs=yes\0--exclude=/usr/lib\0--progress\0-v\0/tmp/a.out\0a.out"s);
    seed("fuzz_bcast_args", 2, 0, "-C\0--no-progress\0--send-libs\0src\0/tmp/dst"s);
    seed("fuzz_bcast_args", 3, 0, "--help"s);
    seed("fuzz_bcast_args", 4, 1, "4294967294.0");
    seed("fuzz_bcast_args", 5, 0, "--libs-from=/tmp/dlopen.list\0--exclude=/usr\0/usr/bin/python3\0/tmp/py"s);
    seed("fuzz_bcast_args", 6, 0, "-f\0--venv-relocate\0venv\0/tmp/venv"s);
    seed("fuzz_bcast_args", 7, 0,
         "--conda-unpack\0--unpack=./bin/x\0--send-libs=no\0--libs-from=l\0e\0/tmp/e"s);
    seed("fuzz_bcast_args", 9, 2, "# dlopen()ed\n/usr/lib/libbz2.so\n\nrelative.so\n");
    seed("fuzz_bcast_args", 8, 0, "--unpack=sh -c 'exit 0'\0env\0/tmp/env"s);
    seed("fuzz_gang_args", 1, 0, "nodes\0-n\0vn[1-8]"s, false);
    seed("fuzz_gang_args", 2, 0, "status", false);
    seed("fuzz_gang_args", 3, 0, "nodes\0-n\0all"s, false);

    // Multicast: a chunk of 2000 bytes in its two segments (32-byte header,
    // lib/net/mcast.cpp; 1440 bytes each at MTU 1500), as two datagrams,
    // then as one GSO send; records {u8 flags, u16 length, u16 gso, bytes}.
    {
        auto segment = [](uint16_t seg, size_t len) {
            net::Writer w;
            w.u32(0x53544d43);
            w.u32(2);
            w.u64(7);
            w.u64(0);
            w.u32(2000);
            w.u16(seg);
            w.u16(1440);
            return w.take() + std::string(len, static_cast<char>('a' + seg));
        };
        auto record = [](uint8_t flags, const std::string &bytes, uint16_t gso) {
            net::Writer w;
            w.u8(flags);
            w.u16(static_cast<uint16_t>(bytes.size()));
            w.u16(gso);
            return w.take() + bytes;
        };
        std::string s0 = segment(0, 1440), s1 = segment(1, 560);
        seed("fuzz_mcast", 1, 0, record(0, s0, 0) + record(0, s1, 0), false);
        seed("fuzz_mcast", 2, 0, record(1, s0 + s1, static_cast<uint16_t>(s0.size())), false);
    }
    return 0;
}
