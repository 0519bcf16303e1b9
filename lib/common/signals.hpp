// Signal dispositions Storm's event loops rely on.
#pragma once

#include <csignal>
#include <pthread.h>

namespace storm {

// Blocks SIGPIPE in the calling thread (and the threads it creates later),
// so that writing to a peer that died fails with EPIPE instead of killing
// the process.  Every thread that runs a prim::Engine calls it.
inline void block_sigpipe() noexcept
{
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGPIPE);
    pthread_sigmask(SIG_BLOCK, &set, nullptr);
}

// Blocks every signal in the calling thread: a worker thread of a daemon
// or of srun, whose signals are for the process's own signal handling.
inline void block_all_signals() noexcept
{
    sigset_t all;
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, nullptr);
}

} // namespace storm
