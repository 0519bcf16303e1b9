#include "lib/common/log.hpp"

#include <cstdio>

namespace storm {
namespace {

void stderr_sink(LogLevel level, const char *line)
{
    static const char *const names[] = {"error", "warning", "info", "verbose", "debug"};
    std::fprintf(stderr, "%s: %s\n", names[static_cast<int>(level)], line);
}

LogSink g_sink = stderr_sink;
LogFilter g_filter = nullptr;

} // namespace

void set_log_sink(LogSink sink, LogFilter filter) noexcept
{
    g_sink = sink ? sink : stderr_sink;
    g_filter = sink ? filter : nullptr;
}

void Logger::write(LogLevel level, const char *fmt, va_list ap) const noexcept
{
    if (g_filter && !g_filter(level))
        return; // not formatted at all: debug lines sit on hot paths

    char line[1024];
    int off = std::snprintf(line, sizeof line, "%s: ", component_.c_str());
    if (off < 0 || static_cast<size_t>(off) >= sizeof line)
        off = 0;
    std::vsnprintf(line + off, sizeof line - off, fmt, ap);
    g_sink(level, line);
}

#define STORM_LOG_METHOD(name, level)                                                                        \
    void Logger::name(const char *fmt, ...) const noexcept                                                   \
    {                                                                                                        \
        va_list ap;                                                                                          \
        va_start(ap, fmt);                                                                                   \
        write(level, fmt, ap);                                                                               \
        va_end(ap);                                                                                          \
    }
STORM_LOG_METHOD(error, LogLevel::error)
STORM_LOG_METHOD(warning, LogLevel::warning)
STORM_LOG_METHOD(info, LogLevel::info)
STORM_LOG_METHOD(verbose, LogLevel::verbose)
STORM_LOG_METHOD(debug, LogLevel::debug)
#undef STORM_LOG_METHOD

} // namespace storm
