// A program's shared libraries for `--send-libs` (storm-bcast, and srun
// --bcast through cli_filter/storm): every library the dynamic loader
// resolves for the program (as ldd(1) lists them: direct and indirect),
// plus libraries the program dlopen()s that a list names, and what those
// load in turn; each with the chain of symbolic links it is found through
// (libfoo.so -> libfoo.so.1 -> libfoo.so.1.2.3 arrive as the same two
// links and the file), all in one directory, as stock sbcast puts them in
// DEST_libs/ so that the program runs with that directory on
// LD_LIBRARY_PATH.
//
// Contract:
//  - parse_library_list(text) reads a list of dlopen()ed libraries: one
//    absolute path per line, "#" comment lines and empty lines skipped,
//    nothing else (a relative path, a line with a NUL byte) -- it throws
//    BcastError naming the line.  read_library_list(file) reads and parses
//    the list in `file` (at most 1 MiB; "" gives an empty list) as the
//    calling process can; its errors name the file.
//  - scan_libraries(program, dlopened, exclude) gives the directory's
//    entries: its top (mode 0755), then for each library, in ldd's order,
//    the links of its chain (each named after the link, its target the
//    base name of the next one) and the file (named after it).  Libraries
//    under an excluded directory (comma-separated, "none": none; as
//    BcastExclude) are left out, unless the list names them.  A program
//    that is not dynamic has no libraries (the list's still count).  It
//    throws BcastError for a library ldd cannot find, a list entry that is
//    not a shared library, a chain longer than 40 links, or two different
//    files of one name.
#pragma once

#include <string>
#include <vector>

#include "launch_bcast/client.hpp"

namespace storm::bcast {

std::vector<std::string> parse_library_list(const std::string &text);
std::vector<std::string> read_library_list(const std::string &file);

Source scan_libraries(const std::string &program, const std::vector<std::string> &dlopened,
                      const std::string &exclude);

// The libraries ldd lists for `file` (absolute paths as ldd prints them,
// the loader included), in its order; empty for a file that is not
// dynamic (*dynamic, if given, says false then).  Throws BcastError when
// ldd cannot run, fails otherwise, or cannot find one.
std::vector<std::string> ldd(const std::string &file, bool *dynamic);

} // namespace storm::bcast
