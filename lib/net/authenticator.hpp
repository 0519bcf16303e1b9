// What a connection needs from an authentication scheme: a credential to
// present, and the verification of a peer's.  MungeAuth is the real one;
// unit tests may use a fake.
//
// Contract: verify() returns the payload the credential carries only if it
// is genuine, unexpired and not replayed, and throws AuthError otherwise.
// Both may block (munge talks to munged over a unix socket) and are called
// only when a connection is set up: on its loop, or, where the loop has an
// AuthOffload, on the offload's threads, several at once.  So an
// Authenticator is thread-safe; trusted() is called on the loop.
#pragma once

#include <string>
#include <string_view>
#include <sys/types.h>
#include <vector>

#include "lib/net/munge_auth.hpp"

namespace storm::net {

class Authenticator {
public:
    virtual ~Authenticator() = default;
    virtual std::string credential(std::string_view payload) = 0;
    struct Verified {
        uid_t uid;
        std::string payload;
    };
    virtual Verified verify(std::string_view cred) = 0;
    // Whether a verified uid is one of the daemons' (full access), as
    // opposed to a user's (who may only ask for broadcasts).
    virtual bool trusted(uid_t uid) const = 0;
};

// munge: `trusted` uids are the ones the daemons run as (SlurmdUser and
// SlurmUser); any other genuine credential is a user's.
class MungeAuthenticator : public Authenticator {
public:
    MungeAuthenticator(std::string socket, std::vector<uid_t> allowed)
        : munge_(std::move(socket)), allowed_(std::move(allowed))
    {
    }
    std::string credential(std::string_view payload) override { return munge_.encode(payload); }
    Verified verify(std::string_view cred) override
    {
        auto c = munge_.decode(cred);
        return {c.uid, std::move(c.payload)};
    }
    bool trusted(uid_t uid) const override
    {
        for (uid_t u : allowed_)
            if (uid == u)
                return true;
        return false;
    }

private:
    MungeAuth munge_;
    std::vector<uid_t> allowed_;
};

} // namespace storm::net
