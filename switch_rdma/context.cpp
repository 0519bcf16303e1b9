#include "switch_rdma/context.hpp"

#include <algorithm>
#include <arpa/inet.h>
#include <cstring>
#include <set>
#include <stdexcept>

#include "lib/net/wire.hpp"

namespace storm::rdma {

const char *mode_name(PoolMode m) noexcept { return m == PoolMode::swapped ? "swapped" : "divided"; }

namespace {

// Form: "4;<id>;<job>;<step>;<uid>;<key>;<d|s>;<c|->;<n>;<port>;<ntasks>;<run>/<run>..."
// with <key> = the key's bytes in lowercase hex, <c|-> = coscheduled or not, <run> = "<a.b.c.d>=<ranks>" (one
// node) or "<a.b.c.d>*<count>^<step>=<ranks>": <count> nodes (2 or more) of consecutive addresses from
// a.b.c.d, node j of the run holding <ranks> each plus j * <step>.  <ranks>: "r" or "lo-hi" items joined by
// ',', in local order.  Version 3 had no <key>, version 2 single nodes only, version 1 no <c|->.
constexpr char kVersion = context_format;
constexpr char kVersion3 = '3';
constexpr char kVersion2 = '2';
constexpr const char *kHex = "0123456789abcdef";
constexpr size_t kMaxNodes = 65536;

uint32_t host_addr(in_addr_t a) { return ntohl(a); }

// The step between the ranks of nodes a and b, if b's are a's each plus
// one step of at least 1 (0 otherwise).
uint64_t rank_step(const ContextNode &a, const ContextNode &b)
{
    if (a.ranks.size() != b.ranks.size() || a.ranks.empty() || b.ranks[0] <= a.ranks[0])
        return 0;
    uint64_t d = b.ranks[0] - a.ranks[0];
    for (size_t l = 1; l < a.ranks.size(); ++l)
        if (b.ranks[l] < a.ranks[l] || b.ranks[l] - a.ranks[l] != d)
            return 0;
    return d;
}

void append_ranks(std::string &s, const std::vector<uint32_t> &r)
{
    for (size_t i = 0; i < r.size();) {
        size_t j = i;
        while (j + 1 < r.size() && r[j + 1] == r[j] + 1)
            ++j;
        if (i)
            s += ',';
        s += std::to_string(r[i]);
        if (j > i)
            s += '-' + std::to_string(r[j]);
        i = j + 1;
    }
}

class Parser {
public:
    explicit Parser(std::string_view t) : t_(t) {}
    uint32_t number(const char *what)
    {
        size_t start = pos_;
        uint64_t v = 0;
        while (pos_ < t_.size() && t_[pos_] >= '0' && t_[pos_] <= '9') {
            v = v * 10 + static_cast<uint64_t>(t_[pos_] - '0');
            if (v > UINT32_MAX)
                fail(std::string(what) + " out of range");
            ++pos_;
        }
        if (start == pos_)
            fail(std::string("expected ") + what);
        return static_cast<uint32_t>(v);
    }
    void expect(char c)
    {
        if (pos_ >= t_.size() || t_[pos_] != c)
            fail(std::string("expected '") + c + "'");
        ++pos_;
    }
    bool peek(char c) const { return pos_ < t_.size() && t_[pos_] == c; }
    bool done() const { return pos_ == t_.size(); }
    char take()
    {
        if (done())
            fail("truncated");
        return t_[pos_++];
    }
    // The text up to the first of `stops` (or the end).
    std::string until(std::string_view stops)
    {
        size_t start = pos_;
        while (pos_ < t_.size() && stops.find(t_[pos_]) == std::string_view::npos)
            ++pos_;
        return std::string(t_.substr(start, pos_ - start));
    }
    [[noreturn]] void fail(const std::string &why) const
    {
        throw net::DecodeError("communication context, offset " + std::to_string(pos_) + ": " + why);
    }

private:
    std::string_view t_;
    size_t pos_ = 0;
};

} // namespace

std::pair<uint32_t, uint32_t> Context::locate(uint32_t rank) const
{
    for (uint32_t n = 0; n < nodes.size(); ++n)
        for (uint32_t l = 0; l < nodes[n].ranks.size(); ++l)
            if (nodes[n].ranks[l] == rank)
                return {n, l};
    throw std::out_of_range("rank " + std::to_string(rank) + " is not in context " + std::to_string(id));
}

std::string Context::encode() const
{
    std::string s;
    s += key.empty() ? kVersion3 : kVersion;
    for (uint32_t v : {id, job_id, step_id, uid})
        s += ';' + std::to_string(v);
    s += ';';
    if (!key.empty()) {
        for (unsigned char b : key) {
            s += kHex[b >> 4];
            s += kHex[b & 15];
        }
        s += ';';
    }
    s += static_cast<char>(mode);
    s += ';';
    s += cosched ? 'c' : '-';
    for (uint32_t v : {divisions, port_base, ntasks})
        s += ';' + std::to_string(v);
    s += ';';
    for (size_t n = 0; n < nodes.size();) {
        // the longest run from node n: consecutive addresses, one rank step
        size_t end = n + 1;
        uint64_t step = end < nodes.size() ? rank_step(nodes[n], nodes[end]) : 0;
        if (step)
            while (end < nodes.size() && host_addr(nodes[end].addr) == host_addr(nodes[n].addr) + (end - n) &&
                   rank_step(nodes[end - 1], nodes[end]) == step)
                ++end;
        if (end - n < 2)
            end = n + 1;
        char a[INET_ADDRSTRLEN];
        in_addr ia{};
        ia.s_addr = nodes[n].addr;
        inet_ntop(AF_INET, &ia, a, sizeof a);
        if (n)
            s += '/';
        s += a;
        if (end - n >= 2)
            s += '*' + std::to_string(end - n) + '^' + std::to_string(step);
        s += '=';
        append_ranks(s, nodes[n].ranks);
        n = end;
    }
    return s;
}

Context Context::decode(std::string_view text)
{
    Parser p(text);
    char version = p.take();
    if (version != kVersion && version != kVersion3 && version != kVersion2) {
        // Old and new Storm must not be mixed: slurmctld, slurmd and
        // libstormmsg read the forms of their own version only.
        if (version >= '1' && version <= '9' && (p.done() || p.peek(';')))
            p.fail(std::string("format version ") + version + ", this Storm reads versions " + kVersion2 +
                   " to " + kVersion + " only (slurmctld, slurmd and libstormmsg must be the same Storm)");
        p.fail("unknown version");
    }
    Context c;
    p.expect(';');
    c.id = p.number("context id");
    p.expect(';');
    c.job_id = p.number("job id");
    p.expect(';');
    c.step_id = p.number("step id");
    p.expect(';');
    c.uid = p.number("uid");
    p.expect(';');
    if (version == kVersion) {
        // The key's digits are never quoted in an error: it is a secret.
        std::string hex = p.until(";");
        if (hex.size() != 2 * context_key_bytes)
            p.fail("a key of " + std::to_string(hex.size()) + " characters (" +
                   std::to_string(2 * context_key_bytes) + " lowercase hex digits expected)");
        for (size_t i = 0; i < hex.size(); i += 2) {
            const char *hi = std::strchr(kHex, hex[i]), *lo = std::strchr(kHex, hex[i + 1]);
            if (!hex[i] || !hex[i + 1] || !hi || !lo)
                p.fail("a key that is not lowercase hex");
            c.key += static_cast<char>((hi - kHex) << 4 | (lo - kHex));
        }
        p.expect(';');
    }
    char m = p.take();
    if (m != 'd' && m != 's')
        p.fail("unknown pool mode");
    c.mode = static_cast<PoolMode>(m);
    p.expect(';');
    char co = p.take();
    if (co != 'c' && co != '-')
        p.fail("bad coscheduling flag (expected 'c' or '-')");
    c.cosched = co == 'c';
    p.expect(';');
    c.divisions = p.number("divisions");
    p.expect(';');
    c.port_base = p.number("port");
    p.expect(';');
    c.ntasks = p.number("task count");
    p.expect(';');
    uint64_t ranks_seen = 0;
    while (!p.done()) {
        if (!c.nodes.empty())
            p.expect('/');
        ContextNode node;
        std::string addr = p.until(version == kVersion2 ? "=" : "=*");
        in_addr ia{};
        if (inet_pton(AF_INET, addr.c_str(), &ia) != 1)
            p.fail("bad node address \"" + addr + "\"");
        node.addr = ia.s_addr;
        uint32_t count = 1, step = 0;
        if (version != kVersion2 && p.peek('*')) {
            p.expect('*');
            count = p.number("run length");
            p.expect('^');
            step = p.number("rank step");
            if (count < 2 || step < 1)
                p.fail("a run needs 2 or more nodes and a rank step of 1 or more");
            if (uint64_t{host_addr(node.addr)} + count - 1 > UINT32_MAX)
                p.fail("a run of nodes past the last address");
        }
        if (count > kMaxNodes - c.nodes.size())
            p.fail("too many nodes");
        p.expect('=');
        do {
            if (!node.ranks.empty())
                p.expect(',');
            uint32_t lo = p.number("rank"), hi = lo;
            if (p.peek('-')) {
                p.expect('-');
                hi = p.number("rank");
                if (hi < lo)
                    p.fail("decreasing rank range");
            }
            if (hi - lo >= max_local_tasks)
                p.fail("too many ranks on one node");
            for (uint32_t r = lo; r <= hi; ++r)
                node.ranks.push_back(r);
            if (node.ranks.size() > max_local_tasks)
                p.fail("too many ranks on one node");
        } while (p.peek(','));
        // every rank is listed once (validate): a run that would list more
        // ranks than the step has tasks is refused before it is expanded
        // (single nodes are bounded by kMaxNodes and max_local_tasks)
        ranks_seen += uint64_t{count} * node.ranks.size();
        if (count > 1 && ranks_seen > c.ntasks)
            p.fail("more ranks than the step's " + std::to_string(c.ntasks) + " tasks");
        if (uint64_t{*std::max_element(node.ranks.begin(), node.ranks.end())} + uint64_t{count - 1} * step >
            UINT32_MAX)
            p.fail("rank out of range");
        for (uint32_t j = 0; j < count; ++j) {
            ContextNode n{htonl(host_addr(node.addr) + j), node.ranks};
            for (auto &r : n.ranks)
                r += j * step;
            c.nodes.push_back(std::move(n));
        }
    }
    try {
        c.validate();
    } catch (const std::invalid_argument &e) {
        throw net::DecodeError(e.what());
    }
    return c;
}

void Context::validate() const
{
    auto bad = [&](const std::string &why) {
        throw std::invalid_argument("communication context " + std::to_string(id) + " (step " +
                                    std::to_string(job_id) + "." + std::to_string(step_id) + "): " + why);
    };
    if (!key.empty() && key.size() != context_key_bytes)
        bad("a key of " + std::to_string(key.size()) + " bytes (" + std::to_string(context_key_bytes) +
            " expected)");
    if (nodes.empty())
        bad("no nodes");
    if (divisions == 0 || (mode == PoolMode::swapped && divisions != 1))
        bad("bad division count " + std::to_string(divisions));
    uint64_t last_port = uint64_t{port_base} + uint64_t{id + 1} * max_local_tasks - 1;
    if (port_base < 1024 || last_port > 65535)
        bad("ports " + std::to_string(port_base) + ".." + std::to_string(last_port) + " out of range");
    std::set<uint32_t> seen;
    for (const auto &n : nodes) {
        if (n.ranks.empty() || n.ranks.size() > max_local_tasks)
            bad("a node with " + std::to_string(n.ranks.size()) + " tasks (1 to " +
                std::to_string(max_local_tasks) + " allowed)");
        for (uint32_t r : n.ranks)
            if (r >= ntasks || !seen.insert(r).second)
                bad("rank " + std::to_string(r) + " is out of range or listed twice");
    }
    if (seen.size() != ntasks)
        bad(std::to_string(ntasks - seen.size()) + " ranks have no node");
}

} // namespace storm::rdma
