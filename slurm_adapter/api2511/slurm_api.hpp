// Slurm's plugin API of the 25.11 line: what the shims need that differs
// between release lines (slurm_adapter/README.md).  The build puts this
// folder on the include path when configure found a Slurm 25.11 source
// tree, so a shim includes "slurm_api.hpp" and never tests a version.
#pragma once

namespace storm::slurm_api {

// The release line this adapter is for, as logs and errors name it.
inline constexpr const char *kLine = "25.11";

} // namespace storm::slurm_api
