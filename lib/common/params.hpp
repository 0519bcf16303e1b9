// Strict parsing of Storm's settings inside Slurm's comma-separated
// parameter strings (SwitchParameters, SchedulerParameters, ...).
//
// Contract:
//  - Items are "key=value" or a bare "flag", separated by commas; blanks
//    around items are ignored.  Keys are case sensitive.
//  - Only keys that start with `prefix` are Storm's; the others belong to
//    Slurm or to a wrapped plugin (backfill reads SchedulerParameters too)
//    and are ignored.  An empty prefix claims every key.
//  - Syntax errors, duplicate keys, values out of range and keys that no
//    take_*() call consumed are ConfigError exceptions whose message names
//    the setting, the key, the value and what is allowed.
#pragma once

#include <cstdint>
#include <map>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace storm {

class ConfigError : public std::runtime_error {
public:
    using std::runtime_error::runtime_error;
};

class ParamList {
public:
    // Throws ConfigError on malformed text.  A null or empty text is an
    // empty list.
    ParamList(const char *text, std::string setting, std::string prefix);

    bool has(const std::string &key) const { return items_.count(key) != 0; }

    // Unsigned integer in [min, max]; `def` when the key is absent.
    uint64_t take_uint(const std::string &key, uint64_t min, uint64_t max, uint64_t def);

    // Integer, perhaps negative, in [min, max]; `def` when the key is absent.
    int64_t take_int(const std::string &key, int64_t min, int64_t max, int64_t def);

    // Duration with a unit suffix: us, ms, s or min ("2ms", "30s"; a zero
    // needs none).  Returns
    // microseconds in [min_us, max_us]; `def_us` when absent.
    uint64_t take_duration_us(const std::string &key, uint64_t min_us, uint64_t max_us, uint64_t def_us);

    // Bare flag, or key=yes|no|1|0|true|false.
    bool take_bool(const std::string &key, bool def);

    // One of `choices`; `def` when absent.
    std::string take_choice(const std::string &key, const std::vector<std::string> &choices,
                            const std::string &def);

    // Any non-empty value, as written; `def` when absent.  `allowed` says
    // what the value may be in the error for a bare key or an empty value.
    std::string take_string(const std::string &key, const std::string &allowed, const std::string &def);

    // Throws ConfigError naming every key no take_*() consumed, and the
    // keys that are allowed (those that were asked for).
    void reject_unknown() const;

private:
    struct Item {
        std::string value;
        bool has_value = false;
        bool taken = false;
    };
    Item *find(const std::string &key);
    // take_uint and take_int: the value as `parse` reads it (false for
    // text that is not one) in [min, max]; `def` when the key is absent.
    template <typename T>
    T take_integer(const std::string &key, T min, T max, T def, bool (*parse)(const std::string &, T &));
    [[noreturn]] void bad_value(const std::string &key, const Item &item, const std::string &allowed) const;

    std::string setting_;
    std::string prefix_;
    std::map<std::string, Item> items_;
    std::vector<std::string> asked_;
};

// Formats microseconds for messages: "2ms", "1.5s", "250us".
std::string format_duration_us(uint64_t us);

} // namespace storm
