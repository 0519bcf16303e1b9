// switch/rdma's jobinfo on the wire: what slurmctld packs into a step's
// switch info and srun, slurmd and slurmstepd unpack.
//
// Packed form: u16 version, then the step's Context's encode() (a versioned
// string, switch_rdma/context.hpp) or NULL (packstr) for a step without
// one.  unpack_jobinfo() throws std::runtime_error on a truncated buffer or
// another version, and whatever Context::decode() throws.
#include "plugins/switch_rdma/parts.hpp"

namespace storm::plugins::switch_rdma {

namespace {
constexpr uint16_t jobinfo_version = 1;
} // namespace

void pack_jobinfo(const JobInfo *info, buf_t *buffer)
{
    pack16(jobinfo_version, buffer);
    if (info && info->ctx) {
        std::string text = info->ctx->encode();
        packstr(text.data(), buffer); // packmem takes a non-const pointer
    } else {
        packnull(buffer);
    }
}

std::unique_ptr<JobInfo> unpack_jobinfo(buf_t *buffer)
{
    uint16_t version = 0;
    if (unpack16(&version, buffer) != SLURM_SUCCESS)
        throw std::runtime_error("truncated switch info");
    if (version != jobinfo_version)
        throw std::runtime_error("switch info of version " + std::to_string(version) + " (this is " +
                                 std::to_string(jobinfo_version) + ")");
    char *text = nullptr;
    uint32_t len = 0;
    if (unpackstr_xmalloc_chooser(&text, &len, buffer) != SLURM_SUCCESS)
        throw std::runtime_error("truncated switch info");
    auto info = std::make_unique<JobInfo>();
    try {
        if (text)
            info->ctx = rdma::Context::decode(text);
    } catch (...) {
        xfree(text);
        throw;
    }
    xfree(text);
    return info;
}

} // namespace storm::plugins::switch_rdma
