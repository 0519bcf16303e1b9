// storm-bcast's relocation step (--unpack, --conda-unpack, --venv-relocate):
// once the broadcast committed, a command runs once on each node of the
// job, as the user, through srun (srun --jobid=JOB --overlap, one task per
// node on the broadcast's nodes), in the destination.
//
// Contract: run_on_nodes() returns once srun ended; its result names each
// node where the command exited non-zero (with its status) or never said
// how it ended (srun could not start it there).  A step still running
// after `timeout` (0: no limit) is cancelled: srun gets SIGTERM (it kills
// the tasks with SIGKILL and ends), and SIGKILL 10 s later if it has not
// ended by then; the result says so (timed_out) and names each node that
// had not said how it ended as still running.  The command runs with
// /bin/sh -c in `dir`, with STORM_BCAST_DEST set to `dest`; its output
// (stdout and stderr) goes to storm-bcast's stderr.  Only the `srun` found
// in PATH is run; throws std::runtime_error when it cannot be started.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

namespace storm::tools {

struct NodeRun {
    // "NODE (exit N)", "NODE (no answer)", "NODE (still running)"
    std::vector<std::string> failed;
    int srun_status = 0;    // srun's exit status
    bool timed_out = false; // cancelled after the timeout
};

NodeRun run_on_nodes(uint32_t job, const std::vector<std::string> &nodes, const std::string &node_list,
                     const std::string &dir, const std::string &dest, const std::string &command,
                     std::chrono::seconds timeout = std::chrono::seconds(0));

// The shell command of --venv-relocate: `program`, the text of
// storm-venv-relocate, run by the venv's own python on DEST (python3 -c).
// The text travels in the command, so the nodes need not see the directory
// storm-bcast runs from (a build tree in the submit host's /tmp, a home not
// mounted on the nodes).
std::string venv_relocate_command(const std::string &program);

// Single-quoted for /bin/sh.
std::string sh_quote(const std::string &s);

} // namespace storm::tools
