#include "switch_rdma/context_table.hpp"

#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <unistd.h>

#include "lib/common/files.hpp"

namespace storm::rdma {

namespace {

constexpr const char *kHeader = "storm-contexts 1";

// A decimal u32 with no sign, no leading zeros (except "0") and no spaces.
bool parse_u32(const std::string &s, uint32_t &out)
{
    if (s.empty() || s.size() > 10 || (s.size() > 1 && s[0] == '0'))
        return false;
    uint64_t v = 0;
    for (char c : s) {
        if (c < '0' || c > '9')
            return false;
        v = v * 10 + static_cast<uint64_t>(c - '0');
    }
    if (v > UINT32_MAX)
        return false;
    out = static_cast<uint32_t>(v);
    return true;
}

} // namespace

std::optional<uint32_t> ContextTable::allocate(uint32_t job_id, uint32_t step_id)
{
    uint32_t id = 0;
    for (const auto &e : held_) { // ascending: the first gap is the lowest free id
        if (e.first != id)
            break;
        ++id;
    }
    if (id >= capacity_)
        return std::nullopt;
    held_[id] = ContextHolder{job_id, step_id, true};
    return id;
}

bool ContextTable::release(uint32_t id, uint32_t job_id, uint32_t step_id)
{
    auto it = held_.find(id);
    if (it == held_.end() || it->second.job_id != job_id || it->second.step_id != step_id)
        return false;
    held_.erase(it);
    return true;
}

std::vector<uint32_t> ContextTable::release_job(uint32_t job_id)
{
    std::vector<uint32_t> out;
    for (auto it = held_.begin(); it != held_.end();) {
        if (it->second.job_id == job_id) {
            out.push_back(it->first);
            it = held_.erase(it);
        } else {
            ++it;
        }
    }
    return out;
}

ContextTable::Mark ContextTable::mark(uint32_t id, uint32_t job_id, uint32_t step_id)
{
    auto it = held_.find(id);
    ContextHolder h{job_id, step_id, true};
    if (it == held_.end()) {
        held_[id] = h;
        return Mark::added;
    }
    if (it->second == h) {
        it->second.confirmed = true;
        return Mark::confirmed;
    }
    if (!it->second.confirmed) {
        it->second = h;
        return Mark::replaced;
    }
    return Mark::conflict;
}

std::vector<std::pair<uint32_t, ContextHolder>>
ContextTable::sweep(const std::function<bool(uint32_t, uint32_t)> &gone)
{
    std::vector<std::pair<uint32_t, ContextHolder>> out;
    for (auto it = held_.begin(); it != held_.end();) {
        if (!it->second.confirmed && gone(it->second.job_id, it->second.step_id)) {
            out.emplace_back(*it);
            it = held_.erase(it);
        } else {
            it->second.confirmed = true;
            ++it;
        }
    }
    return out;
}

std::optional<ContextHolder> ContextTable::holder(uint32_t id) const
{
    auto it = held_.find(id);
    if (it == held_.end())
        return std::nullopt;
    return it->second;
}

bool ContextTable::has_unconfirmed() const noexcept
{
    for (const auto &e : held_)
        if (!e.second.confirmed)
            return true;
    return false;
}

std::string ContextTable::text() const
{
    std::string s = std::string(kHeader) + "\n";
    for (const auto &e : held_)
        s += std::to_string(e.first) + ' ' + std::to_string(e.second.job_id) + ' ' +
             std::to_string(e.second.step_id) + '\n';
    return s;
}

ContextTable ContextTable::parse(const std::string &text, const std::string &name, uint32_t capacity)
{
    ContextTable t(capacity);
    size_t line_no = 0, pos = 0;
    auto fail = [&](const std::string &why) {
        throw StateError(name + ":" + std::to_string(line_no) + ": " + why);
    };
    if (text.empty()) {
        line_no = 1;
        fail("empty file (expected \"" + std::string(kHeader) + "\")");
    }
    while (pos < text.size()) {
        size_t nl = text.find('\n', pos);
        ++line_no;
        if (nl == std::string::npos)
            fail("last line does not end with a newline (truncated file?)");
        std::string line = text.substr(pos, nl - pos);
        pos = nl + 1;
        if (line_no == 1) {
            if (line != kHeader)
                fail("expected \"" + std::string(kHeader) + "\", found \"" + line + "\"");
            continue;
        }
        // "<id> <job> <step>", single spaces.
        std::string f[3];
        size_t start = 0;
        for (int i = 0; i < 3; ++i) {
            size_t sp = i < 2 ? line.find(' ', start) : line.size();
            if (sp == std::string::npos)
                fail("expected \"<id> <job id> <step id>\", found \"" + line + "\"");
            f[i] = line.substr(start, sp - start);
            start = sp + 1;
        }
        uint32_t v[3];
        static const char *what[3] = {"context id", "job id", "step id"};
        for (int i = 0; i < 3; ++i)
            if (!parse_u32(f[i], v[i]))
                fail(std::string("bad ") + what[i] + " \"" + f[i] + "\" in \"" + line + "\"");
        if (t.held_.count(v[0]))
            fail("context " + f[0] + " listed twice");
        t.held_[v[0]] = ContextHolder{v[1], v[2], false};
    }
    return t;
}

void ContextTable::save(const std::string &dir) const
{
    std::string path = path_in(dir);
    if (!replace_file(path, text(), 0600))
        throw std::runtime_error("cannot write " + path + ": " + std::strerror(errno));
}

ContextTable ContextTable::load(const std::string &dir, uint32_t capacity)
{
    std::string path = path_in(dir);
    int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        if (errno == ENOENT)
            return ContextTable(capacity);
        throw StateError(path + ": cannot read: " + std::strerror(errno));
    }
    std::string text;
    char buf[4096];
    ssize_t n;
    while ((n = ::read(fd, buf, sizeof buf)) != 0) {
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0) {
            int e = errno;
            ::close(fd);
            throw StateError(path + ": cannot read: " + std::strerror(e));
        }
        text.append(buf, static_cast<size_t>(n));
    }
    ::close(fd);
    return parse(text, path, capacity);
}

} // namespace storm::rdma
