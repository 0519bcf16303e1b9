#include "lib/common/params.hpp"

#include <cerrno>
#include <cstdlib>

namespace storm {
namespace {

std::string trim(std::string_view s)
{
    size_t b = 0, e = s.size();
    while (b < e && (s[b] == ' ' || s[b] == '\t'))
        ++b;
    while (e > b && (s[e - 1] == ' ' || s[e - 1] == '\t'))
        --e;
    return std::string(s.substr(b, e - b));
}

// Parses a decimal unsigned integer that fills the whole string.
bool parse_u64(const std::string &s, uint64_t &out)
{
    if (s.empty() || s[0] < '0' || s[0] > '9')
        return false;
    errno = 0;
    char *end = nullptr;
    unsigned long long v = std::strtoull(s.c_str(), &end, 10);
    if (errno || *end)
        return false;
    out = v;
    return true;
}

// Parses a decimal integer, perhaps negative, that fills the whole string.
bool parse_i64(const std::string &s, int64_t &out)
{
    bool negative = !s.empty() && s[0] == '-';
    uint64_t magnitude = 0;
    if (!parse_u64(negative ? s.substr(1) : s, magnitude) || magnitude > static_cast<uint64_t>(INT64_MAX))
        return false;
    out = negative ? -static_cast<int64_t>(magnitude) : static_cast<int64_t>(magnitude);
    return true;
}

} // namespace

ParamList::ParamList(const char *text, std::string setting, std::string prefix)
    : setting_(std::move(setting)), prefix_(std::move(prefix))
{
    if (!text || trim(text).empty())
        return;
    std::string_view rest(text);
    while (true) {
        size_t comma = rest.find(',');
        std::string item = trim(rest.substr(0, comma));
        if (item.empty())
            throw ConfigError(setting_ + ": empty item in \"" + text + "\"");
        size_t eq = item.find('=');
        std::string key = trim(item.substr(0, eq));
        if (key.empty())
            throw ConfigError(setting_ + ": item \"" + item + "\" has no key");
        if (key.compare(0, prefix_.size(), prefix_) == 0) {
            Item it;
            if (eq != std::string::npos) {
                it.value = trim(item.substr(eq + 1));
                it.has_value = true;
            }
            if (!items_.emplace(key, it).second)
                throw ConfigError(setting_ + ": " + key + " is given more than once");
        }
        if (comma == std::string_view::npos)
            break;
        rest.remove_prefix(comma + 1);
    }
}

ParamList::Item *ParamList::find(const std::string &key)
{
    asked_.push_back(key);
    auto it = items_.find(key);
    if (it == items_.end())
        return nullptr;
    it->second.taken = true;
    return &it->second;
}

void ParamList::bad_value(const std::string &key, const Item &item, const std::string &allowed) const
{
    throw ConfigError(setting_ + ": invalid value \"" + item.value + "\" for " + key +
                      " (allowed: " + allowed + ")");
}

template <typename T>
T ParamList::take_integer(const std::string &key, T min, T max, T def,
                          bool (*parse)(const std::string &, T &))
{
    Item *it = find(key);
    if (!it)
        return def;
    T v = 0;
    if (!it->has_value || !parse(it->value, v) || v < min || v > max)
        bad_value(key, *it, "an integer from " + std::to_string(min) + " to " + std::to_string(max));
    return v;
}

uint64_t ParamList::take_uint(const std::string &key, uint64_t min, uint64_t max, uint64_t def)
{
    return take_integer(key, min, max, def, parse_u64);
}

int64_t ParamList::take_int(const std::string &key, int64_t min, int64_t max, int64_t def)
{
    return take_integer(key, min, max, def, parse_i64);
}

uint64_t ParamList::take_duration_us(const std::string &key, uint64_t min_us, uint64_t max_us,
                                     uint64_t def_us)
{
    Item *it = find(key);
    if (!it)
        return def_us;
    std::string allowed = "a duration from " + format_duration_us(min_us) + " to " +
                          format_duration_us(max_us) + " with a unit: us, ms, s or min";
    if (!it->has_value)
        bad_value(key, *it, allowed);
    const std::string &s = it->value;
    size_t digits = 0;
    while (digits < s.size() && s[digits] >= '0' && s[digits] <= '9')
        ++digits;
    uint64_t n = 0, mult = 0;
    std::string unit = s.substr(digits);
    if (unit == "us")
        mult = 1;
    else if (unit == "ms")
        mult = 1000;
    else if (unit == "s")
        mult = 1000000;
    else if (unit == "min")
        mult = 60000000;
    else if (unit.empty() && digits > 0 && s.find_first_not_of('0') == std::string::npos)
        mult = 1; // zero needs no unit
    if (!mult || !parse_u64(s.substr(0, digits), n) || n > UINT64_MAX / mult)
        bad_value(key, *it, allowed);
    uint64_t us = n * mult;
    if (us < min_us || us > max_us)
        bad_value(key, *it, allowed);
    return us;
}

bool ParamList::take_bool(const std::string &key, bool def)
{
    Item *it = find(key);
    if (!it)
        return def;
    if (!it->has_value)
        return true;
    const std::string &v = it->value;
    if (v == "yes" || v == "1" || v == "true")
        return true;
    if (v == "no" || v == "0" || v == "false")
        return false;
    bad_value(key, *it, "yes, no, true, false, 1 or 0");
}

std::string ParamList::take_choice(const std::string &key, const std::vector<std::string> &choices,
                                   const std::string &def)
{
    Item *it = find(key);
    if (!it)
        return def;
    std::string allowed;
    for (const auto &c : choices) {
        if (it->has_value && it->value == c)
            return c;
        allowed += (allowed.empty() ? "" : " or ") + c;
    }
    bad_value(key, *it, allowed);
}

std::string ParamList::take_string(const std::string &key, const std::string &allowed, const std::string &def)
{
    Item *it = find(key);
    if (!it)
        return def;
    if (!it->has_value || it->value.empty())
        bad_value(key, *it, allowed);
    return it->value;
}

void ParamList::reject_unknown() const
{
    std::string unknown;
    for (const auto &kv : items_)
        if (!kv.second.taken)
            unknown += (unknown.empty() ? "" : ", ") + kv.first;
    if (unknown.empty())
        return;
    std::string allowed;
    for (const auto &k : asked_)
        if (allowed.find(k) == std::string::npos)
            allowed += (allowed.empty() ? "" : ", ") + k;
    throw ConfigError(setting_ + ": unknown key" + (unknown.find(',') != std::string::npos ? "s " : " ") +
                      unknown + " (known: " + (allowed.empty() ? "none" : allowed) + ")");
}

std::string format_duration_us(uint64_t us)
{
    if (us >= 60000000 && us % 60000000 == 0)
        return std::to_string(us / 60000000) + "min";
    if (us >= 1000000 && us % 1000000 == 0)
        return std::to_string(us / 1000000) + "s";
    if (us >= 1000 && us % 1000 == 0)
        return std::to_string(us / 1000) + "ms";
    return std::to_string(us) + "us";
}

} // namespace storm
