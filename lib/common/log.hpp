// Storm logging: one prefixed line per event, written to a replaceable sink.
//
// Contract: every line a component writes starts with its name, e.g.
// "switch/rdma: node agent started", and a service inside a component adds
// its own once, through child(): "switch/rdma: gang: ...".  Format strings
// never carry a hand-typed prefix.  Inside Slurm daemons the plugin shims
// install a sink that forwards to Slurm's own log functions (so lines land
// in slurmctld.log / slurmd.log with Slurm's timestamps); elsewhere (unit
// tests, tools) the default sink writes to stderr.  The sink is process
// wide and must be installed before threads that log are started.
#pragma once

#include <cstdarg>
#include <string>

namespace storm {

// warning: something failed and a fallback that works took over (the
// service goes on, perhaps in a lesser mode); error: something failed.
enum class LogLevel { error, warning, info, verbose, debug };

// A sink receives one complete line, without a trailing newline.
using LogSink = void (*)(LogLevel level, const char *line);

// Whether the sink writes lines of `level` now (lines it would drop are not
// formatted at all).
using LogFilter = bool (*)(LogLevel level);

// Install `sink` (nullptr restores the stderr sink, which writes every
// level) and its `filter` (nullptr: every line).  Not thread safe against
// concurrent logging: call it from init() before starting threads.
void set_log_sink(LogSink sink, LogFilter filter = nullptr) noexcept;

// A component's logger: a fixed prefix and printf-style helpers.  Cheap to
// copy; never throws (a formatting failure logs a truncated line).
class Logger {
public:
    explicit Logger(std::string component) : component_(std::move(component)) {}

    const std::string &component() const noexcept { return component_; }
    // The logger of a service inside this component: its lines start with
    // "<component>: <service>: ".
    Logger child(const std::string &service) const { return Logger(component_ + ": " + service); }

    void error(const char *fmt, ...) const noexcept __attribute__((format(printf, 2, 3)));
    void warning(const char *fmt, ...) const noexcept __attribute__((format(printf, 2, 3)));
    void info(const char *fmt, ...) const noexcept __attribute__((format(printf, 2, 3)));
    void verbose(const char *fmt, ...) const noexcept __attribute__((format(printf, 2, 3)));
    void debug(const char *fmt, ...) const noexcept __attribute__((format(printf, 2, 3)));
    void write(LogLevel level, const char *fmt, va_list ap) const noexcept;

private:
    std::string component_;
};

} // namespace storm
