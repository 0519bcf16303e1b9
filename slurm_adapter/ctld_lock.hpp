// slurmctld's locks, set by name: the struct gains members across lines
// (26.05: select_node), and those not named here stay NO_LOCK.
#pragma once

extern "C" {
#include "src/slurmctld/locks.h"
}

namespace storm::shim {

inline slurmctld_lock_t ctld_lock(lock_level_t job, lock_level_t node, lock_level_t part,
                                  lock_level_t conf = NO_LOCK, lock_level_t fed = NO_LOCK)
{
    slurmctld_lock_t lock{};
    lock.conf = conf;
    lock.job = job;
    lock.node = node;
    lock.part = part;
    lock.fed = fed;
    return lock;
}

} // namespace storm::shim
