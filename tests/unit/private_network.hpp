// A network namespace of the calling process's own, whose loopback carries
// multicast: for the tests of the multicast path (tests/unit/test_mcast.cpp,
// tests/fuzz/fuzz_mcast.cpp), which need root (CAP_SYS_ADMIN).
#pragma once

#include <cstring>
#include <net/if.h>
#include <sched.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

namespace test_helpers {

// Moves the process into a new network namespace and brings its loopback
// up with IFF_MULTICAST; false if either fails (not root, no namespaces).
inline bool private_network()
{
    if (unshare(CLONE_NEWNET) != 0)
        return false;
    int s = socket(AF_INET, SOCK_DGRAM, 0);
    if (s < 0)
        return false;
    ifreq ifr{};
    std::strcpy(ifr.ifr_name, "lo");
    bool ok = ioctl(s, SIOCGIFFLAGS, &ifr) == 0;
    ifr.ifr_flags |= IFF_UP | IFF_MULTICAST;
    ok = ok && ioctl(s, SIOCSIFFLAGS, &ifr) == 0;
    close(s);
    return ok;
}

} // namespace test_helpers
