// slurmctld's table of the communication contexts in use (switch/rdma).
//
// One entry per context id a live step holds: the id and the step (job id,
// step id).  switch_p_build_jobinfo allocates the lowest free id, the end
// of the step (or of its job) releases it.
//
// Restart: the table is saved in StateSaveLocation when slurmctld stops
// (switch_p_libstate_save) and loaded when it starts.  Loaded entries are
// "unconfirmed": the steps slurmctld recovers from its own job state
// re-mark their ids with mark(), which confirms them, and the plugin then
// drops the unconfirmed entries whose job has ended (sweep()).  slurmctld's
// job state is thus the authority on which ids live steps hold; the file
// only keeps ids of steps slurmctld no longer knows while their job lives.
//
// Contract: not thread safe (slurmctld calls the plugin under its job
// lock).  Ids are in [0, capacity()) when allocated; mark() accepts any id
// (a restored step keeps the id it was given, even above a lowered
// storm_ctx_max).  load() is strict: any malformed line throws StateError
// naming the file and the line.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace storm::rdma {

// A malformed or unreadable state file: "<path>:<line>: <what>".
class StateError : public std::runtime_error {
public:
    using std::runtime_error::runtime_error;
};

struct ContextHolder {
    uint32_t job_id = 0;
    uint32_t step_id = 0;
    bool confirmed = true; // false: loaded from the state file, not re-marked yet
    bool operator==(const ContextHolder &o) const { return job_id == o.job_id && step_id == o.step_id; }
};

class ContextTable {
public:
    static constexpr const char *file_name = "switch_rdma_contexts";

    explicit ContextTable(uint32_t capacity = 64) : capacity_(capacity) {}

    uint32_t capacity() const noexcept { return capacity_; }
    // A new storm_ctx_max: held ids above it stay until released.
    void set_capacity(uint32_t c) noexcept { capacity_ = c; }

    // The lowest free id in [0, capacity()) for the step, or nullopt when
    // every one is in use.
    std::optional<uint32_t> allocate(uint32_t job_id, uint32_t step_id);
    // Frees `id` if that step holds it; false otherwise (nothing changes).
    bool release(uint32_t id, uint32_t job_id, uint32_t step_id);
    // Frees every id of the job's steps; returns them.
    std::vector<uint32_t> release_job(uint32_t job_id);

    enum class Mark {
        added,     // the id was free: now held by the step
        confirmed, // the file already had it for this step
        replaced,  // an unconfirmed entry of another step gave way
        conflict,  // a confirmed entry of another step holds it: unchanged
    };
    // A restored step's id (switch_p_job_step_allocated).
    Mark mark(uint32_t id, uint32_t job_id, uint32_t step_id);
    // Drops the unconfirmed entries for which `gone(job, step)` is true and
    // confirms the others; returns the dropped ones.
    std::vector<std::pair<uint32_t, ContextHolder>>
    sweep(const std::function<bool(uint32_t job_id, uint32_t step_id)> &gone);

    bool contains(uint32_t id) const { return held_.count(id) != 0; }
    std::optional<ContextHolder> holder(uint32_t id) const;
    size_t size() const noexcept { return held_.size(); }
    bool has_unconfirmed() const noexcept;
    void clear() noexcept { held_.clear(); }

    // The state file's text:
    //   storm-contexts 1
    //   <id> <job id> <step id>        one line per held id, ascending
    std::string text() const;
    // Parses text(); every entry is unconfirmed.  Throws StateError
    // "<name>:<line>: <what>".
    static ContextTable parse(const std::string &text, const std::string &name, uint32_t capacity);
    // Writes <dir>/file_name whole (replace_file, mode 0600); throws
    // std::runtime_error naming the file and errno.
    void save(const std::string &dir) const;
    // Reads <dir>/file_name; a missing file gives an empty table.  Throws
    // StateError if it cannot be read or is malformed.
    static ContextTable load(const std::string &dir, uint32_t capacity);
    static std::string path_in(const std::string &dir) { return dir + "/" + file_name; }

private:
    uint32_t capacity_;
    std::map<uint32_t, ContextHolder> held_;
};

} // namespace storm::rdma
