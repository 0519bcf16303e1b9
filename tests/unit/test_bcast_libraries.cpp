// Unit tests of --send-libs' libraries (launch_bcast/libraries.cpp): the
// strict list of dlopen()ed libraries; a real program's libraries (this
// test's own: libcmocka.so.0 is a link to the file) with their links; a
// listed library found through a chain of a relative and an absolute link
// (libfoo.so -> libfoo.so.1 -> /abs/libfoo.so.1.2.3: the same two links,
// targets by base name, and the file); exclusion; refusals; ldd of a name
// a shell would read otherwise.
#include <climits>
#include <cstdlib>
#include <string>
#include <sys/stat.h>
#include <unistd.h>

#include "launch_bcast/libraries.hpp"
#include "tests/unit/cmocka.hpp"
#include "tests/unit/helpers.hpp"

using namespace storm::bcast;
using test_helpers::contains;
using test_helpers::error_of;
using test_helpers::TempDir;

namespace {

const Entry *find(const Source &s, const std::string &name)
{
    for (const auto &e : s.entries)
        if (e.path == name)
            return &e;
    return nullptr;
}

std::string base(const std::string &p) { return p.substr(p.rfind('/') + 1); }

std::string real(const std::string &p)
{
    char r[PATH_MAX];
    return realpath(p.c_str(), r) ? r : "";
}

std::string self()
{
    char b[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", b, sizeof b - 1);
    return n > 0 ? std::string(b, static_cast<size_t>(n)) : "";
}

void test_list(void **)
{
    auto l = parse_library_list("# dlopen()ed\n/a/libx.so\n\n/b/lib y.so.1\n");
    assert_int_equal(l.size(), 2);
    assert_string_equal(l[0].c_str(), "/a/libx.so");
    assert_string_equal(l[1].c_str(), "/b/lib y.so.1");
    assert_int_equal(parse_library_list("").size(), 0);
    assert_true(contains(error_of<BcastError>([] { parse_library_list("/a.so\n#\nlibz.so.1\n"); }),
                         "line 3: \"libz.so.1\" is not an absolute path"));
    assert_true(contains(error_of<BcastError>([] { parse_library_list(std::string("/a\0b", 4)); }),
                         "line 1: a NUL byte"));
    assert_true(contains(error_of<BcastError>([] { parse_library_list(" /a.so"); }), "not an absolute path"));
    // from a file (--libs-from, STORM_BCAST_LIBS_FROM): errors name it
    TempDir tmp("storm-libs");
    const std::string f = tmp.path + "/list";
    assert_int_equal(system(("printf '# x\\n/a/libx.so\\n' > " + f).c_str()), 0);
    auto r = read_library_list(f);
    assert_int_equal(r.size(), 1);
    assert_string_equal(r[0].c_str(), "/a/libx.so");
    assert_int_equal(read_library_list("").size(), 0);
    assert_true(contains(error_of<BcastError>([&] { read_library_list(f + ".none"); }),
                         "cannot read " + f + ".none: No such file"));
    assert_int_equal(system(("echo libz.so.1 >> " + f).c_str()), 0);
    assert_true(contains(error_of<BcastError>([&] { read_library_list(f); }),
                         f + ": library list, line 3: \"libz.so.1\" is not an absolute path"));
}

void test_program(void **)
{
    const std::string me = self();
    auto found = ldd(me, nullptr);
    std::string cmocka;
    for (const auto &l : found)
        if (contains(l, "/libcmocka.so"))
            cmocka = l;
    assert_false(cmocka.empty());
    Source s = scan_libraries(me, {}, "none");
    assert_true(s.entries[0].dir());
    assert_int_equal(s.entries.size(), s.paths.size());
    // libcmocka.so.0 -> libcmocka.so.0.x.y, and the file under its name
    const std::string file = base(real(cmocka));
    assert_string_not_equal(file.c_str(), base(cmocka).c_str());
    const Entry *link = find(s, base(cmocka));
    assert_non_null(link);
    assert_int_equal(link->kind, Entry::symlink);
    assert_string_equal(link->target.c_str(), file.c_str());
    const Entry *f = find(s, file);
    assert_non_null(f);
    assert_int_equal(f->kind, Entry::file);
    struct stat st;
    assert_int_equal(stat(cmocka.c_str(), &st), 0);
    assert_int_equal(f->size, st.st_size);
    assert_non_null(find(s, "libc.so.6"));
    // excluded: everything ldd finds under the directory
    const std::string dir = cmocka.substr(0, cmocka.rfind('/'));
    Source x = scan_libraries(me, {}, "/nowhere," + dir + "/");
    assert_null(find(x, base(cmocka)));
    assert_null(find(x, "libc.so.6"));
    // a file that is not dynamic has no libraries; as a listed library it
    // is refused
    bool dynamic = true;
    assert_int_equal(ldd("/etc/hostname", &dynamic).size(), 0);
    assert_false(dynamic);
    assert_true(contains(error_of<BcastError>([&] { scan_libraries(me, {"/etc/hostname"}, "none"); }),
                         "/etc/hostname is not a shared library"));
    assert_true(contains(error_of<BcastError>([&] { scan_libraries(me, {"/nonexistent/libq.so"}, "none"); }),
                         "cannot read /nonexistent/libq.so"));
}

void test_dlopen_chain(void **)
{
    TempDir tmp("storm-libs");
    const std::string &d = tmp.path;
    assert_false(d.empty());
    const std::string me = self();
    std::string cmocka;
    for (const auto &l : ldd(me, nullptr))
        if (contains(l, "/libcmocka.so"))
            cmocka = real(l);
    assert_int_equal(
        system(("cp '" + cmocka + "' " + d + "/libfoo.so.1.2.3 && ln -s " + d + "/libfoo.so.1.2.3 " + d +
                "/libfoo.so.1 && ln -s libfoo.so.1 " + d + "/libfoo.so")
                   .c_str()),
        0);
    Source s = scan_libraries(me, {d + "/libfoo.so"}, "none");
    const Entry *a = find(s, "libfoo.so"), *b = find(s, "libfoo.so.1"), *c = find(s, "libfoo.so.1.2.3");
    assert_non_null(a);
    assert_non_null(b);
    assert_non_null(c);
    assert_int_equal(a->kind, Entry::symlink);
    assert_string_equal(a->target.c_str(), "libfoo.so.1");
    assert_int_equal(b->kind, Entry::symlink);
    assert_string_equal(b->target.c_str(), "libfoo.so.1.2.3"); // was absolute
    assert_int_equal(c->kind, Entry::file);
    // its own libraries too (libc), once
    int libc = 0;
    for (const auto &e : s.entries)
        libc += e.path == "libc.so.6";
    assert_int_equal(libc, 1);
    // another file of a name already taken is refused
    assert_int_equal(system(("mkdir " + d + "/o && cp /proc/self/exe " + d + "/o/libfoo.so.1.2.3").c_str()),
                     0);
    assert_true(contains(error_of<BcastError>([&] {
                             scan_libraries(me, {d + "/libfoo.so", d + "/o/libfoo.so.1.2.3"}, "none");
                         }),
                         "two different libraries named libfoo.so.1.2.3"));
    // ldd gets the name as one argument, whatever it holds (no shell)
    const std::string odd = d + "/it's a $(lib) `x`.so";
    assert_int_equal(system(("cp '" + cmocka + "' \"" + d + "/it's a \\$(lib) \\`x\\`.so\"").c_str()), 0);
    int odd_libc = 0;
    for (const auto &l : ldd(odd, nullptr))
        odd_libc += base(l) == "libc.so.6";
    assert_int_equal(odd_libc, 1);
}

} // namespace

int main()
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_list),
        cmocka_unit_test(test_program),
        cmocka_unit_test(test_dlopen_chain),
    };
    return cmocka_run_group_tests(tests, nullptr, nullptr);
}
