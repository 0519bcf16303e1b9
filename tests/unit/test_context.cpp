// Unit tests of a step's communication context (switch_rdma/context.*),
// the pool's credits (pool_config.hpp), slurmctld's choice of mode and
// refusals (step_context.*) and the node agent's control messages
// (control.*).
#include "tests/unit/cmocka.hpp"

#include <arpa/inet.h>
#include <string>
#include <sys/socket.h>
#include <sys/un.h>
#include <thread>
#include <unistd.h>

#include "lib/net/wire.hpp"
#include "switch_rdma/context.hpp"
#include "switch_rdma/control.hpp"
#include "switch_rdma/pool_config.hpp"
#include "switch_rdma/step_context.hpp"
#include "tests/unit/helpers.hpp"

using namespace storm::rdma;
using storm::net::DecodeError;
using storm::net::Reader;
using test_helpers::contains;

namespace {

in_addr_t ip(const char *s)
{
    in_addr a{};
    assert_int_equal(inet_pton(AF_INET, s, &a), 1);
    return a.s_addr;
}

std::string decode_error(const std::string &text)
{
    return test_helpers::error_of<DecodeError>([&] { Context::decode(text); });
}

// Ranks 0..5 dealt cyclically over two nodes, and a third node with a
// contiguous block.
Context sample()
{
    Context c;
    c.id = 3;
    c.job_id = 4242;
    c.step_id = 7;
    c.uid = 1000;
    c.mode = PoolMode::divided;
    c.divisions = 2;
    c.port_base = 40000;
    c.ntasks = 10;
    c.nodes = {{ip("10.0.0.1"), {0, 2, 4}}, {ip("10.0.0.2"), {1, 3, 5}}, {ip("192.168.7.200"), {6, 7, 8, 9}}};
    return c;
}

void assert_same(const Context &a, const Context &b)
{
    assert_int_equal(a.id, b.id);
    assert_int_equal(a.job_id, b.job_id);
    assert_int_equal(a.step_id, b.step_id);
    assert_int_equal(a.uid, b.uid);
    assert_true(a.key == b.key);
    assert_true(a.mode == b.mode);
    assert_int_equal(a.cosched, b.cosched);
    assert_int_equal(a.divisions, b.divisions);
    assert_int_equal(a.port_base, b.port_base);
    assert_int_equal(a.ntasks, b.ntasks);
    assert_int_equal(a.nodes.size(), b.nodes.size());
    for (size_t i = 0; i < a.nodes.size(); ++i) {
        assert_int_equal(a.nodes[i].addr, b.nodes[i].addr);
        assert_true(a.nodes[i].ranks == b.nodes[i].ranks);
    }
}

// Version 4 carries the key, in lowercase hex after the uid.
void test_key_round_trip(void **)
{
    Context c = sample();
    for (size_t i = 0; i < context_key_bytes; ++i)
        c.key += static_cast<char>(i * 9 + 1); // 01 0a 13 ... f0 f9: every digit and both cases of a nibble
    std::string text = c.encode();
    const std::string hex = "010a131c252e37404952"
                            "5b646d767f88919aa3ac"
                            "b5bec7d0d9e2ebf4fd06"
                            "0f18";
    assert_string_equal(
        text.c_str(),
        ("4;3;4242;7;1000;" + hex + ";d;-;2;40000;10;10.0.0.1*2^1=0,2,4/192.168.7.200=6-9").c_str());
    Context d = Context::decode(text);
    assert_int_equal(d.key.size(), context_key_bytes);
    assert_same(d, c);
    assert_true(d.encode() == text);
    c.validate();

    // A malformed key is refused without quoting it (it is a secret).
    const std::string tail = ";d;-;2;40000;10;10.0.0.1*2^1=0,2,4/192.168.7.200=6-9";
    auto with_key = [&](const std::string &k) { return decode_error("4;3;4242;7;1000;" + k + tail); };
    std::string e = with_key(hex.substr(0, 62));
    assert_true(contains(e, "a key of 62 characters (64 lowercase hex digits expected)"));
    assert_false(contains(e, hex.substr(0, 62)));
    assert_true(contains(with_key(hex + "00"), "a key of 66 characters"));
    assert_true(contains(with_key(""), "a key of 0 characters"));
    std::string upper = hex;
    upper[3] = 'A';
    e = with_key(upper);
    assert_true(contains(e, "a key that is not lowercase hex"));
    assert_false(contains(e, upper));
    assert_true(contains(with_key(hex.substr(0, 63) + "g"), "not lowercase hex"));
    assert_true(contains(with_key(hex.substr(0, 63) + std::string(1, '\0')), "not lowercase hex"));
    // Version 4 without its key: the mode is where the key should be.
    assert_true(contains(decode_error("4;3;4242;7;1000" + tail), "a key of 1 characters"));

    // Version 3 (no key) is still read, and a keyless context encodes as
    // version 3 again.
    Context k = Context::decode("3;3;4242;7;1000;d;-;2;40000;10;10.0.0.1*2^1=0,2,4/192.168.7.200=6-9");
    assert_true(k.key.empty());
    assert_true(k.encode()[0] == '3');
    assert_true(Context::decode("2;3;4242;7;1000;d;-;2;40000;6;10.0.0.1=0,2,4/10.0.0.2=1,3,5").key.empty());

    // validate(): a key is empty or of context_key_bytes.
    c.key.pop_back();
    assert_true(contains(test_helpers::error_of<std::invalid_argument>([&] { c.validate(); }),
                         "a key of 31 bytes (32 expected)"));
}

void test_encode_decode_round_trip(void **)
{
    Context c = sample();
    std::string text = c.encode();
    assert_string_equal(text.c_str(), "3;3;4242;7;1000;d;-;2;40000;10;10.0.0.1*2^1=0,2,4/192.168.7.200=6-9");
    assert_same(Context::decode(text), c);
    assert_false(Context::decode(text).cosched);
    // Coscheduled (slurmctld's word, which the node agent trusts).
    c.cosched = true;
    text = c.encode();
    assert_string_equal(text.c_str(), "3;3;4242;7;1000;d;c;2;40000;10;10.0.0.1*2^1=0,2,4/192.168.7.200=6-9");
    assert_true(Context::decode(text).cosched);
    assert_same(Context::decode(text), c);

    // One node, swapped, ranks out of order and in runs.
    Context s;
    s.id = 63;
    s.job_id = 1;
    s.uid = 0;
    s.mode = PoolMode::swapped;
    s.divisions = 1;
    s.port_base = 40000;
    s.ntasks = 8;
    s.nodes = {{ip("127.0.0.1"), {4, 5, 6, 0, 1, 7, 2, 3}}};
    std::string t = s.encode();
    assert_string_equal(t.c_str(), "3;63;1;0;0;s;-;1;40000;8;127.0.0.1=4-6,0-1,7,2-3");
    assert_same(Context::decode(t), s);

    // max_local_tasks on one node, and locate().
    Context m = s;
    m.ntasks = max_local_tasks * 2;
    m.nodes = {{ip("10.1.0.1"), {}}, {ip("10.1.0.2"), {}}};
    for (uint32_t r = 0; r < m.ntasks; ++r)
        m.nodes[r % 2].ranks.push_back(r);
    assert_same(Context::decode(m.encode()), m);
    auto where = m.locate(9);
    assert_int_equal(where.first, 1);
    assert_int_equal(where.second, 4);
    assert_int_equal(m.port_for(4), 40000 + 63 * 64 + 4);
    assert_true(contains(test_helpers::error_of<std::out_of_range>([&] { m.locate(128); }), "rank 128"));
}

// Runs of nodes: a step on thousands of nodes of consecutive addresses
// encodes in a few dozen bytes, whatever N (what Slurm carries through
// every hop of its launch), and decodes to every node.
Context wide(uint32_t n, uint32_t per_node, bool cyclic)
{
    Context c = sample();
    c.ntasks = n * per_node;
    c.nodes.clear();
    uint32_t base = ntohl(ip("10.8.0.1"));
    for (uint32_t j = 0; j < n; ++j) {
        ContextNode node{htonl(base + j), {}};
        for (uint32_t l = 0; l < per_node; ++l)
            node.ranks.push_back(cyclic ? j + l * n : j * per_node + l);
        c.nodes.push_back(std::move(node));
    }
    return c;
}

void test_runs_of_nodes(void **)
{
    for (uint32_t n : {2u, 64u, 1000u, 16384u}) {
        Context block = wide(n, 4, false), cyc = wide(n, 3, true);
        std::string b = block.encode(), y = cyc.encode();
        assert_true(contains(b, "10.8.0.1*" + std::to_string(n) + "^4=0-3"));
        assert_true(b.size() < 60);
        assert_true(contains(y, "10.8.0.1*" + std::to_string(n) + "^1=0," + std::to_string(n) + "," +
                                    std::to_string(2 * n)));
        assert_same(Context::decode(b), block);
        assert_same(Context::decode(y), cyc);
    }
    // A gap in the addresses, or a node breaking the rank pattern, ends a run.
    Context g = wide(6, 2, false);
    g.nodes[3].addr = ip("10.9.0.1");
    assert_true(contains(g.encode(), ";10.8.0.1*3^2=0-1/10.9.0.1=6-7/10.8.0.5*2^2=8-9"));
    assert_same(Context::decode(g.encode()), g);
    Context p = wide(4, 2, false);
    std::swap(p.nodes[2].ranks, p.nodes[3].ranks);
    assert_true(contains(p.encode(), ";10.8.0.1*2^2=0-1/10.8.0.3=6-7/10.8.0.4=4-5"));
    assert_same(Context::decode(p.encode()), p);

    // Malformed runs.
    const std::string head = "3;3;4242;7;1000;d;-;2;40000;8;";
    assert_int_equal(Context::decode(head + "10.0.0.1*4^2=0-1").nodes.size(), 4);
    assert_true(contains(decode_error(head + "10.0.0.1*1^2=0-1"), "2 or more nodes"));
    assert_true(contains(decode_error(head + "10.0.0.1*4^0=0-1"), "rank step of 1 or more"));
    assert_true(contains(decode_error(head + "10.0.0.1*4=0-1"), "expected '^'"));
    assert_true(contains(decode_error(head + "10.0.0.1*^2=0-1"), "expected run length"));
    assert_true(contains(decode_error(head + "255.255.255.254*4^2=0-1"), "past the last address"));
    assert_true(contains(decode_error(head + "10.0.0.1*5^2=0-1"), "more ranks than the step's 8"));
    assert_true(contains(decode_error(head + "10.0.0.1*4^1=0-1"), "listed twice"));
    assert_true(contains(decode_error(head + "10.0.0.1*65537^1=0"), "too many nodes"));
    assert_true(contains(decode_error("3;3;4242;7;1000;d;-;2;40000;4294967295;10.0.0.1*2^4294967295=1"),
                         "rank out of range"));
    // Version 2 has no runs.
    assert_true(contains(decode_error("2;3;4242;7;1000;d;-;2;40000;8;10.0.0.1*4^2=0-1"), "bad node address"));
}

void test_decode_rejects(void **)
{
    const std::string ok = "2;3;4242;7;1000;d;-;2;40000;6;10.0.0.1=0,2,4/10.0.0.2=1,3,5";
    Context::decode(ok);
    assert_true(contains(decode_error(""), "truncated"));
    // Another format version: old and new Storm do not mix, and say so.
    std::string e = decode_error("1;3;4242;7;1000;d;2;40000;6;10.0.0.1=0-5");
    assert_true(contains(e, "format version 1, this Storm reads versions 2 to 4 only"));
    assert_true(contains(decode_error("5;3;4242;7;1000;d;-;2;40000;6;10.0.0.1=0-5"), "format version 5"));
    // Version 2 (single nodes only) is still read.
    assert_int_equal(Context::decode(ok).nodes.size(), 2);
    assert_true(contains(decode_error("x;3;4242;7;1000;d;-;2;40000;6;10.0.0.1=0-5"), "unknown version"));
    assert_true(contains(decode_error("21;3;4242;7;1000;d;-;2;40000;6;10.0.0.1=0-5"), "expected ';'"));
    // The coscheduling flag: 'c' or '-', exactly one character; a version
    // 1 body under version 2 has none.
    assert_true(contains(decode_error("2;3;4242;7;1000;d;2;40000;6;10.0.0.1=0-5"), "bad coscheduling flag"));
    assert_true(
        contains(decode_error("2;3;4242;7;1000;d;x;2;40000;6;10.0.0.1=0-5"), "bad coscheduling flag"));
    assert_true(
        contains(decode_error("2;3;4242;7;1000;d;C;2;40000;6;10.0.0.1=0-5"), "bad coscheduling flag"));
    assert_true(contains(decode_error("2;3;4242;7;1000;d;;2;40000;6;10.0.0.1=0-5"), "bad coscheduling flag"));
    assert_true(contains(decode_error("2;3;4242;7;1000;d;cc;2;40000;6;10.0.0.1=0-5"), "expected ';'"));
    assert_true(contains(decode_error("2;3;4242;7;1000;d;"), "truncated"));
    assert_true(Context::decode("2;3;4242;7;1000;s;c;1;40000;6;10.0.0.1=0-5").cosched);
    assert_true(contains(decode_error("2;3;4242;7;1000;x;-;2;40000;6;10.0.0.1=0-5"), "unknown pool mode"));
    assert_true(contains(decode_error("2;3;4242;7;1000;;-;2;40000;6;10.0.0.1=0-5"), "unknown pool mode"));
    assert_true(contains(decode_error("2;3;4242;7;1000;d;-;2;40000;6;10.0.0.256=0-5"), "bad node address"));
    assert_true(contains(decode_error("2;3;4242;7;1000;d;-;2;40000;6;node1=0-5"), "bad node address"));
    assert_true(contains(decode_error("2;3;4242;7;1000;d;-;2;40000;6;::1=0-5"), "bad node address"));
    assert_true(contains(decode_error("2;3;4242;7;1000;d;-;2;40000;6;"), "no nodes"));
    // Duplicate and missing ranks.
    assert_true(
        contains(decode_error("2;3;4242;7;1000;d;-;2;40000;6;10.0.0.1=0-3/10.0.0.2=3-5"), "listed twice"));
    assert_true(contains(decode_error("2;3;4242;7;1000;d;-;2;40000;6;10.0.0.1=0,0,1-4"), "listed twice"));
    assert_true(contains(decode_error("2;3;4242;7;1000;d;-;2;40000;6;10.0.0.1=0-4"), "1 ranks have no node"));
    assert_true(contains(decode_error("2;3;4242;7;1000;d;-;2;40000;6;10.0.0.1=0-6"), "out of range"));
    assert_true(contains(decode_error("2;3;4242;7;1000;d;-;2;40000;6;10.0.0.1=0-4,6"), "out of range"));
    assert_true(contains(decode_error("2;3;4242;7;1000;d;-;2;40000;6;10.0.0.1=3-1"), "decreasing"));
    // Too many ranks per node, in one range or in several.
    assert_true(contains(decode_error("2;3;4242;7;1000;d;-;2;40000;65;10.0.0.1=0-64"), "too many ranks"));
    assert_true(
        contains(decode_error("2;3;4242;7;1000;d;-;2;40000;65;10.0.0.1=0-31,32-63,64"), "too many ranks"));
    // Ports out of range: below 1024, or the id's block past 65535.
    assert_true(contains(decode_error("2;3;4242;7;1000;d;-;2;80;6;10.0.0.1=0-5"), "out of range"));
    assert_true(contains(decode_error("2;3;4242;7;1000;d;-;2;65400;6;10.0.0.1=0-5"), "out of range"));
    assert_true(
        contains(decode_error("2;3;4242;7;1000;d;-;2;4294967296;6;10.0.0.1=0-5"), "port out of range"));
    // Divisions.
    assert_true(contains(decode_error("2;3;4242;7;1000;d;-;0;40000;6;10.0.0.1=0-5"), "division count"));
    assert_true(contains(decode_error("2;3;4242;7;1000;s;-;2;40000;6;10.0.0.1=0-5"), "division count"));
    // Trailing junk and truncation.
    assert_true(contains(decode_error(ok + "x"), "expected"));
    assert_true(contains(decode_error(ok + ";"), "expected"));
    assert_true(contains(decode_error(ok + "/"), "bad node address"));
    assert_true(contains(decode_error(ok + ","), "expected rank"));
    assert_true(contains(decode_error("2;3;4242;7;1000;d;-;2;40000"), "expected ';'"));
    assert_true(contains(decode_error("2;3;4242;-7;1000;d;-;2;40000;6;10.0.0.1=0-5"), "expected step id"));
    assert_true(contains(decode_error("2;3;4242;7;1000;d;-;2;40000;6;10.0.0.1="), "expected rank"));
}

void test_validate(void **)
{
    Context c = sample();
    c.validate();
    auto invalid = [](Context x) {
        return test_helpers::error_of<std::invalid_argument>([&] { x.validate(); });
    };
    Context d = c;
    d.nodes.clear();
    assert_true(contains(invalid(d), "no nodes"));
    d = c;
    d.mode = PoolMode::swapped;
    assert_true(contains(invalid(d), "bad division count 2"));
    d.divisions = 1;
    d.validate();
    d = c;
    d.nodes[2].ranks.clear();
    assert_true(contains(invalid(d), "a node with 0 tasks"));
    d = c;
    d.nodes[2].ranks.push_back(2);
    assert_true(contains(invalid(d), "rank 2 is out of range or listed twice"));
    d = c;
    d.ntasks = 11;
    assert_true(contains(invalid(d), "1 ranks have no node"));
    d = c;
    d.id = (65536 - 40000) / max_local_tasks; // its block ends past 65535
    assert_true(contains(invalid(d), "out of range"));
    d.id -= 1;
    d.validate();
    assert_true(invalid(c).empty());
}

void test_task_share_credits(void **)
{
    assert_int_equal(sizeof(QueueHeader), 384);
    PoolConfig p; // 1 MiB, 4 KiB packets
    // One task alone on its node, divided into n: credits = recv / n.
    struct {
        uint32_t n, send, recv, credits;
    } divided[] = {{1, 63, 192, 192}, {2, 31, 96, 48}, {4, 15, 48, 12}, {8, 7, 24, 3}};
    for (auto &d : divided) {
        TaskShare s = task_share(p, PoolMode::divided, d.n, 1, 1);
        assert_int_equal(s.bytes, p.pool_size / d.n);
        assert_int_equal(s.send_slots, d.send);
        assert_int_equal(s.recv_slots, d.recv);
        assert_int_equal(s.credits, d.credits);
    }
    // 2 of 4 tasks on the node: divided n=2 vs swapped.
    TaskShare s = task_share(p, PoolMode::divided, 2, 2, 4);
    assert_int_equal(s.bytes, 262144);
    assert_int_equal(s.recv_slots, 48);
    assert_int_equal(s.credits, 48 / (4 * 2));
    s = task_share(p, PoolMode::swapped, 1, 2, 4);
    assert_int_equal(s.bytes, 524288);
    assert_int_equal(s.recv_slots, 96);
    assert_int_equal(s.credits, 96 / 4);
    // Swapped: the whole pool, whatever the division count.
    s = task_share(p, PoolMode::swapped, 1, 1, 1);
    assert_int_equal(s.credits, 192);
    // Too small a pool: no credit.
    PoolConfig small;
    small.pool_size = 64 * 1024;
    assert_int_equal(task_share(small, PoolMode::divided, 8, 64, 64).credits, 0);
    assert_int_equal(task_share(small, PoolMode::swapped, 1, 64, 64).credits, 0);
    assert_true(task_share(small, PoolMode::swapped, 1, 1, 2).credits > 0);
}

StepShape shape(uint32_t nnodes, uint32_t per_node)
{
    StepShape s;
    s.job_id = 12;
    s.step_id = 3;
    s.uid = 1001;
    s.ntasks = nnodes * per_node;
    for (uint32_t n = 0; n < nnodes; ++n) {
        ContextNode node;
        node.addr = htonl(0x0a000001 + n);
        for (uint32_t l = 0; l < per_node; ++l)
            node.ranks.push_back(n * per_node + l);
        s.nodes.push_back(node);
        s.node_names.push_back("n" + std::to_string(n));
    }
    return s;
}

void test_step_context(void **)
{
    PoolConfig p;
    StepShape s = shape(2, 2);
    // No FORCE: divided, n = 1.
    Context c = make_context(p, s);
    assert_true(c.mode == PoolMode::divided);
    assert_int_equal(c.divisions, 1);
    assert_int_equal(c.port_base, 40000);
    assert_int_equal(c.ntasks, 4);
    assert_int_equal(c.uid, 1001);
    assert_false(c.cosched);
    // A key of its own: random, never all zero, never another step's.
    assert_int_equal(c.key.size(), context_key_bytes);
    assert_true(c.key != std::string(context_key_bytes, '\0'));
    assert_true(make_context(p, s).key != c.key);
    assert_true(Context::decode(c.encode()).key == c.key);
    // A coscheduled partition's step: the flag, whatever the mode.
    s.cosched = true;
    assert_true(make_context(p, s).cosched);
    s.cosched = false;
    // FORCE:4 without gang scheduling: divided, n = 4.
    s.force_n = 4;
    c = make_context(p, s);
    assert_true(c.mode == PoolMode::divided);
    assert_int_equal(c.divisions, 4);
    // Gang-scheduled: swapped, n = 1, unless storm_pool_mode=divided.
    s.gang = true;
    c = make_context(p, s);
    assert_true(c.mode == PoolMode::swapped);
    assert_int_equal(c.divisions, 1);
    p.force_divided = true;
    c = make_context(p, s);
    assert_true(c.mode == PoolMode::divided);
    assert_int_equal(c.divisions, 4);

    // Too many tasks on a node.
    PoolConfig big;
    big.pool_size = 1ull << 30;
    auto refusal = [&](const PoolConfig &pc, const StepShape &st) {
        try {
            make_context(pc, st);
        } catch (const StepRefused &e) {
            assert_false(e.busy());
            return std::string(e.what());
        }
        return std::string();
    };
    std::string e = refusal(big, shape(1, 65));
    assert_true(contains(e, "65 tasks on node n0, more than the 64"));
    assert_true(refusal(big, shape(1, 64)).empty());

    // No credit does not refuse the step; the reason names the pool, the
    // tasks, the mode and n (what tasks get at attach).
    PoolConfig small;
    small.pool_size = 64 * 1024;
    StepShape t = shape(4, 16);
    t.force_n = 8;
    assert_true(refusal(small, t).empty());
    TaskShare sh = task_share(small, PoolMode::divided, 8, 16, 64);
    e = no_credit_reason(small, PoolMode::divided, 8, 16, 64, sh);
    assert_true(contains(e,
                         "the pool of 65536 bytes leaves no credit for 64 tasks (16 on this node) in divided "
                         "mode with n=8: raise storm_pool_size"));
    assert_true(contains(e, "OverSubscribe=FORCE:8"));
    assert_true(no_credit_reason(PoolConfig{}, PoolMode::swapped, 1, 1, 2,
                                 task_share(PoolConfig{}, PoolMode::swapped, 1, 1, 2))
                    .empty());

    // Exhaustion is "busy": srun retries.
    StepRefused x = contexts_exhausted(64);
    assert_true(x.busy());
    assert_true(contains(x.what(), "all 64 contexts are in use (storm_ctx_max)"));
}

// Decodes a control message's header and checks its type.
Reader open_message(const std::string &m, control::Type t)
{
    Reader r(m);
    assert_true(control::header(r).type == t);
    return r;
}

void test_control_round_trips(void **)
{
    Context c = sample();
    std::string m = control::open(c);
    Reader r = open_message(m, control::Type::open);
    assert_same(control::read_open(r), c);
    c.cosched = true; // what slurmstepd tells the agent about the job
    m = control::open(c);
    r = open_message(m, control::Type::open);
    assert_true(control::read_open(r).cosched);

    m = control::close(3, 4242, 7);
    r = open_message(m, control::Type::close);
    auto ids = control::read_close(r);
    assert_int_equal(ids.id, 3);
    assert_int_equal(ids.job, 4242);
    assert_int_equal(ids.step, 7);

    m = control::attach(3, 4242, 7, 9);
    r = open_message(m, control::Type::attach);
    ids = control::read_attach(r);
    assert_int_equal(ids.rank, 9);

    control::Attached a;
    a.mode = PoolMode::swapped;
    a.offset = 1ull << 33;
    a.bytes = 524288;
    a.packet_size = 4096;
    a.send_slots = 31;
    a.recv_slots = 96;
    a.credits = 24;
    a.epoch = 0x123456789abcull;
    a.resident = true;
    m = control::attached(a);
    r = open_message(m, control::Type::attached);
    auto b = control::read_attached(r);
    assert_true(b.mode == a.mode);
    assert_int_equal(b.offset, a.offset);
    assert_int_equal(b.bytes, a.bytes);
    assert_int_equal(b.credits, a.credits);
    assert_int_equal(b.epoch, a.epoch);
    assert_true(b.resident);

    m = control::ok(); // the Reader reads `m` in place: keep it alive
    r = open_message(m, control::Type::ok);
    r.finish();
    m = control::error("no pool");
    r = open_message(m, control::Type::error);
    assert_string_equal(control::read_reason(r).c_str(), "no pool");
    m = control::failed("peer 3 died");
    r = open_message(m, control::Type::failed);
    assert_string_equal(control::read_reason(r).c_str(), "peer 3 died");
    for (auto t :
         {control::Type::halt, control::Type::halted, control::Type::release, control::Type::ready}) {
        m = control::epoch_message(t, 77);
        r = open_message(m, t);
        assert_int_equal(control::read_epoch(r), 77);
    }
}

void test_control_rejects(void **)
{
    auto header_error = [](std::string m) {
        return test_helpers::error_of<DecodeError>([&] {
            Reader r(m);
            control::header(r);
        });
    };
    std::string m = control::close(1, 2, 3);
    std::string v = m;
    v[0] = 2;
    assert_true(contains(header_error(v), "version 2"));
    std::string t = m;
    t[1] = 'Z';
    assert_true(contains(header_error(t), "unknown control message type"));
    assert_true(contains(header_error(""), "truncated"));
    assert_true(contains(header_error(std::string(1, static_cast<char>(control::version))), "truncated"));

    auto body_error = [](std::string msg, auto read) {
        return test_helpers::error_of<DecodeError>([&] {
            Reader r(msg);
            control::header(r);
            read(r);
        });
    };
    auto rc = [](Reader &r) { control::read_close(r); };
    assert_true(contains(body_error(m.substr(0, m.size() - 1), rc), "truncated"));
    assert_true(contains(body_error(m + "x", rc), "trailing"));
    std::string o = control::open(sample());
    auto ro = [](Reader &r) { control::read_open(r); };
    assert_true(contains(body_error(o.substr(0, o.size() - 3), ro), "truncated"));
    assert_true(contains(body_error(o + "x", ro), "trailing"));
    // A malformed context inside a well-formed message.
    Context bad = sample();
    bad.ntasks = 11;
    assert_true(contains(body_error(control::open(bad), ro), "ranks have no node"));
    control::Attached a;
    std::string at = control::attached(a);
    at[2] = 'q';
    assert_true(contains(body_error(at, [](Reader &r) { control::read_attached(r); }), "unknown pool mode"));
    auto ep = [](Reader &r) { control::read_epoch(r); };
    std::string e = control::epoch_message(control::Type::halt, 5);
    assert_true(contains(body_error(e.substr(0, 5), ep), "truncated"));
}

// A one-shot agent on a SOCK_SEQPACKET socket that answers `answer`.
struct FakeAgent {
    std::string path;
    int fd = -1;
    std::thread th;
    std::string got;
    FakeAgent(const std::string &answer)
    {
        char dir[] = "/tmp/storm-ctl-XXXXXX";
        assert_non_null(mkdtemp(dir));
        path = std::string(dir) + "/" + control::socket_name;
        fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
        sockaddr_un sa{};
        sa.sun_family = AF_UNIX;
        std::snprintf(sa.sun_path, sizeof sa.sun_path, "%s", path.c_str());
        assert_int_equal(bind(fd, reinterpret_cast<sockaddr *>(&sa), sizeof sa), 0);
        assert_int_equal(listen(fd, 1), 0);
        th = std::thread([this, answer] {
            int c = accept(fd, nullptr, nullptr);
            if (c < 0)
                return;
            char buf[65536];
            ssize_t n = recv(c, buf, sizeof buf, 0);
            if (n > 0)
                got.assign(buf, static_cast<size_t>(n));
            if (!answer.empty())
                send(c, answer.data(), answer.size(), MSG_NOSIGNAL);
            close(c);
        });
    }
    ~FakeAgent()
    {
        if (th.joinable())
            th.join();
        close(fd);
        unlink(path.c_str());
        rmdir(path.substr(0, path.rfind('/')).c_str());
    }
};

void test_control_request(void **)
{
    {
        FakeAgent agent(control::ok());
        control::request(agent.path, control::close(1, 2, 3));
        agent.th.join(); // `got` is written by the agent's thread
        assert_true(agent.got == control::close(1, 2, 3));
    }
    {
        FakeAgent agent(control::error("context 3 is open already"));
        std::string e = test_helpers::error_of<std::runtime_error>(
            [&] { control::request(agent.path, control::open(sample())); });
        assert_string_equal(e.c_str(), "context 3 is open already");
    }
    {
        FakeAgent agent("");
        std::string e = test_helpers::error_of<std::runtime_error>(
            [&] { control::request(agent.path, control::close(1, 2, 3)); });
        assert_true(contains(e, "closed the connection without an answer"));
    }
    // No agent: AgentUnreachable.
    std::string e = test_helpers::error_of<control::AgentUnreachable>(
        [] { control::request("/nonexistent/storm-pool.sock", control::close(1, 2, 3)); });
    assert_true(contains(e, "cannot reach the node agent at /nonexistent/storm-pool.sock"));
}

} // namespace

int main()
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_encode_decode_round_trip),
        cmocka_unit_test(test_key_round_trip),
        cmocka_unit_test(test_decode_rejects),
        cmocka_unit_test(test_runs_of_nodes),
        cmocka_unit_test(test_validate),
        cmocka_unit_test(test_task_share_credits),
        cmocka_unit_test(test_step_context),
        cmocka_unit_test(test_control_round_trips),
        cmocka_unit_test(test_control_rejects),
        cmocka_unit_test(test_control_request),
    };
    return cmocka_run_group_tests_name("context", tests, nullptr, nullptr);
}
