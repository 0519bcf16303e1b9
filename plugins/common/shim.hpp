// Helpers shared by the Slurm-facing shims in plugins/.
//
// Each shim is a thin extern "C" file: it exports exactly the symbols Slurm
// looks up (plugins/plugin.map), converts Slurm's arguments, and calls the
// C++ core.  No exception may cross into Slurm: every entry point that can
// throw runs inside guarded(), which turns an exception into SLURM_ERROR and
// one log line naming the plugin and the entry point.
#pragma once

#include <exception>
#include <memory>
#include <stdexcept>

#include "lib/common/log.hpp"

extern "C" {
#include "src/common/slurm_xlator.h"
#include "src/common/log.h"
#include "src/common/run_in_daemon.h"
}

// Slurm's log.h defines info()/verbose()/debug() as function-like macros
// and error as slurm_error; they would rewrite Logger's methods.  The sink
// below calls Slurm's functions by their real names instead.
#undef info
#undef verbose
#undef debug
#undef error

// STORM_VERSION and STORM_SLURM_VERSION come from the command line
// (Makefile.am): Storm's own config header would clash with Slurm's
// config.h, which Slurm's headers include.

namespace storm::shim {

// Routes storm::Logger output to Slurm's log functions (slurmctld.log,
// slurmd.log, srun's stderr), keeping Storm's level mapping:
// error, info, verbose and debug map to Slurm's levels of the same name.
inline void slurm_log_sink(LogLevel level, const char *line)
{
    switch (level) {
    case LogLevel::error:
        slurm_error("%s", line);
        break;
    case LogLevel::info:
        slurm_log_var(LOG_LEVEL_INFO, "%s", line);
        break;
    case LogLevel::verbose:
        slurm_log_var(LOG_LEVEL_VERBOSE, "%s", line);
        break;
    case LogLevel::debug:
        slurm_log_var(LOG_LEVEL_DEBUG, "%s", line);
        break;
    }
}

inline void install_slurm_log() noexcept { set_log_sink(slurm_log_sink); }

// The level of a plugin's one "loaded" line: info in the daemons (their log
// files), verbose in client commands (srun, sbatch, sinfo, ... print info
// lines on the user's terminal; -v shows them).
inline void log_loaded(const Logger &log, const char *fmt, ...) noexcept __attribute__((format(printf, 2, 3)));
inline void log_loaded(const Logger &log, const char *fmt, ...) noexcept
{
    va_list ap;
    va_start(ap, fmt);
    log.write(running_in_daemon() ? LogLevel::info : LogLevel::verbose, fmt, ap);
    va_end(ap);
}

// Runs f() and returns its result; an exception becomes `fail` (SLURM_ERROR
// by default) plus one error line "<plugin>: <entry>: <what>".
template <class F>
auto guarded(const Logger &log, const char *entry, F &&f, decltype(f()) fail = SLURM_ERROR) noexcept
    -> decltype(f())
{
    try {
        return f();
    } catch (const std::exception &e) {
        log.error("%s: %s", entry, e.what());
    } catch (...) {
        log.error("%s: unknown exception", entry);
    }
    return fail;
}

} // namespace storm::shim

// Exported plugin identity.  Slurm checks plugin_version against its own
// SLURM_VERSION_NUMBER exactly (SPANK: major.minor), so it comes from the
// Slurm source we were configured with.
#define STORM_PLUGIN_IDENTITY(name, type)                         \
    extern "C" {                                                  \
    extern const char plugin_name[] = name;                       \
    extern const char plugin_type[] = type;                       \
    extern const uint32_t plugin_version = SLURM_VERSION_NUMBER;  \
    }
