// Names the calling thread, as `top -H`, `ps -L` and perf show it: the
// threads Storm starts inside slurmd, slurmctld, slurmstepd and srun would
// otherwise all carry the daemon's name.  At most 15 characters; a longer
// name is refused by the kernel and the thread keeps the old one.
#pragma once

#include <pthread.h>

namespace storm {

inline void name_thread(const char *name) noexcept { (void)pthread_setname_np(pthread_self(), name); }

} // namespace storm
