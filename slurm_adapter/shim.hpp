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
#include <string>
#include <type_traits>

#include "lib/common/log.hpp"

extern "C" {
#include "src/common/slurm_xlator.h"
#include "src/common/log.h"
#include "src/common/plugin.h"
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
// error, warning, info, verbose and debug map to Slurm's levels of the
// same name.
inline void slurm_log_sink(LogLevel level, const char *line)
{
    switch (level) {
    case LogLevel::error:
        slurm_error("%s", line);
        break;
    case LogLevel::warning:
        slurm_log_var(LOG_LEVEL_INFO, "warning: %s", line);
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

// Slurm's current threshold (it changes with scontrol setdebug and
// reconfigure): the highest level any of its logs writes.
inline bool slurm_log_wants(LogLevel level)
{
    static const int levels[] = {LOG_LEVEL_ERROR, LOG_LEVEL_INFO, LOG_LEVEL_INFO, LOG_LEVEL_VERBOSE,
                                 LOG_LEVEL_DEBUG};
    return get_log_level() >= levels[static_cast<int>(level)];
}

inline void install_slurm_log() noexcept { set_log_sink(slurm_log_sink, slurm_log_wants); }

// Logs a plugin's one "loaded" line: at info where `to_log_file` (a daemon
// writing its log file), else at verbose.  Client commands (srun, sbatch,
// sinfo, ...) print info lines on the user's terminal, and so does slurmd
// for plugins it loads before it daemonizes (every select plugin); -v shows
// the verbose line there.
inline void log_loaded(const Logger &log, bool to_log_file, const char *fmt, ...) noexcept
    __attribute__((format(printf, 3, 4)));
inline void log_loaded(const Logger &log, bool to_log_file, const char *fmt, ...) noexcept
{
    va_list ap;
    va_start(ap, fmt);
    log.write(to_log_file ? LogLevel::info : LogLevel::verbose, fmt, ap);
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

// Another Slurm plugin, loaded through Slurm's own loader as the daemon
// would (plugin_context_create, which calls its init()), whose entry points
// fill `Ops` in the order of `syms`.  Destruction unloads it (its fini()).
// Throws std::runtime_error if it cannot be loaded.
template <class Ops> class WrappedPlugin {
public:
    WrappedPlugin(const char *type, const char *name, const char **syms, size_t syms_size)
        : ctx_(plugin_context_create(type, name, reinterpret_cast<void **>(&ops_), syms, syms_size))
    {
        static_assert(std::is_trivially_copyable<Ops>::value, "Ops is a table of pointers");
        if (syms_size != sizeof(Ops))
            throw std::logic_error(std::string("symbol list and ops table of ") + name + " differ");
        if (!ctx_)
            throw std::runtime_error(std::string("cannot load ") + name + " from PluginDir");
    }
    ~WrappedPlugin() { plugin_context_destroy(ctx_); }
    WrappedPlugin(const WrappedPlugin &) = delete;
    WrappedPlugin &operator=(const WrappedPlugin &) = delete;

    const Ops &ops() const noexcept { return ops_; }

private:
    Ops ops_{};
    plugin_context_t *ctx_;
};

// The body of a plugin's init(): routes Storm's log into Slurm's, builds
// the plugin's one context with make() (which returns a unique_ptr and may
// throw) and keeps it in `global` until fini_context().  An exception
// becomes SLURM_ERROR plus one log line "<plugin>: init: <what>".
template <class Ctx, class Make> int init_context(Ctx *&global, const char *plugin, Make make) noexcept
{
    install_slurm_log();
    Logger log{plugin};
    return guarded(log, "init", [&] {
        global = make().release();
        return SLURM_SUCCESS;
    });
}

// The body of a plugin's fini(): destroys the context init_context() made.
template <class Ctx> int fini_context(Ctx *&global) noexcept
{
    delete global;
    global = nullptr;
    return SLURM_SUCCESS;
}

} // namespace storm::shim

// Exported plugin identity.  Slurm checks plugin_version against its own
// SLURM_VERSION_NUMBER exactly (SPANK: major.minor), so it comes from the
// Slurm source we were configured with.
#define STORM_PLUGIN_IDENTITY(name, type)                                                                    \
    extern "C" {                                                                                             \
    extern const char plugin_name[] = name;                                                                  \
    extern const char plugin_type[] = type;                                                                  \
    extern const uint32_t plugin_version = SLURM_VERSION_NUMBER;                                             \
    }
