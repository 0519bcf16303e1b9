// Unit tests of slurmctld's table of communication contexts
// (switch_rdma/context_table.*): allocation, release, the state file and
// the re-marking of restored steps.
#include <cstdlib>
#include <fstream> // before cmocka, whose fail() macro breaks <ios>

#include "tests/unit/cmocka.hpp"

#include <string>
#include <unistd.h>

#include "switch_rdma/context_table.hpp"
#include "tests/unit/helpers.hpp"

using storm::rdma::ContextHolder;
using storm::rdma::ContextTable;
using storm::rdma::StateError;
using test_helpers::contains;

namespace {

std::string state_error(const std::string &text)
{
    return test_helpers::error_of<StateError>([&] { ContextTable::parse(text, "/x/state", 64); });
}

// A temporary directory, removed with its files.
struct TempDir {
    std::string path;
    TempDir()
    {
        char t[] = "/tmp/storm-ctxtable-XXXXXX";
        assert_non_null(mkdtemp(t));
        path = t;
    }
    ~TempDir()
    {
        unlink(ContextTable::path_in(path).c_str());
        unlink((ContextTable::path_in(path) + ".new").c_str());
        rmdir(path.c_str());
    }
    void write(const std::string &text) const
    {
        std::ofstream(ContextTable::path_in(path), std::ios::binary) << text;
    }
};

void test_allocate_lowest_free(void **)
{
    ContextTable t(4);
    assert_int_equal(*t.allocate(10, 0), 0);
    assert_int_equal(*t.allocate(10, 1), 1);
    assert_int_equal(*t.allocate(11, 0), 2);
    assert_true(t.release(1, 10, 1));
    assert_false(t.contains(1));
    assert_int_equal(*t.allocate(12, 0), 1); // the gap first
    assert_int_equal(*t.allocate(12, 1), 3);
    assert_int_equal(t.size(), 4);
    auto h = t.holder(3);
    assert_true(h.has_value());
    assert_int_equal(h->job_id, 12);
    assert_int_equal(h->step_id, 1);
}

void test_exhaustion(void **)
{
    ContextTable t(2);
    assert_true(t.allocate(1, 0).has_value());
    assert_true(t.allocate(1, 1).has_value());
    assert_false(t.allocate(1, 2).has_value());
    assert_false(t.allocate(2, 0).has_value());
    assert_true(t.release(0, 1, 0));
    assert_int_equal(*t.allocate(2, 0), 0);
    // A lower storm_ctx_max: held ids above it stay, no new ones there.
    t.set_capacity(1);
    assert_true(t.contains(1));
    assert_false(t.allocate(3, 0).has_value());
    assert_true(t.release(0, 2, 0));
    assert_int_equal(*t.allocate(3, 0), 0);
    assert_false(t.allocate(3, 1).has_value());
}

void test_release_only_by_holder(void **)
{
    ContextTable t(8);
    assert_int_equal(*t.allocate(5, 0), 0);
    assert_false(t.release(0, 5, 1)); // another step of the job
    assert_false(t.release(0, 6, 0)); // another job
    assert_false(t.release(3, 5, 0)); // a free id
    assert_true(t.contains(0));
    assert_true(t.release(0, 5, 0));
    assert_false(t.release(0, 5, 0)); // twice
    assert_int_equal(t.size(), 0);
}

void test_release_job(void **)
{
    ContextTable t(8);
    t.allocate(5, 0);
    t.allocate(6, 0);
    t.allocate(5, 1);
    t.allocate(5, 7);
    auto gone = t.release_job(5);
    assert_int_equal(gone.size(), 3);
    assert_int_equal(gone[0], 0);
    assert_int_equal(gone[1], 2);
    assert_int_equal(gone[2], 3);
    assert_int_equal(t.size(), 1);
    assert_true(t.contains(1));
    assert_true(t.release_job(5).empty());
}

void test_text_round_trip(void **)
{
    ContextTable t(8);
    t.allocate(100, 0);
    t.allocate(100, 1);
    t.allocate(4294967294u, 4294967293u);
    t.release(1, 100, 1);
    std::string text = t.text();
    assert_string_equal(text.c_str(), "storm-contexts 1\n0 100 0\n2 4294967294 4294967293\n");
    auto u = ContextTable::parse(text, "f", 8);
    assert_int_equal(u.size(), 2);
    assert_true(u.contains(0));
    assert_false(u.contains(1));
    assert_int_equal(u.holder(2)->job_id, 4294967294u);
    assert_int_equal(u.holder(2)->step_id, 4294967293u);
    assert_false(u.holder(2)->confirmed);
    assert_true(u.has_unconfirmed());
    assert_string_equal(u.text().c_str(), text.c_str());
    // An empty table.
    assert_int_equal(ContextTable::parse("storm-contexts 1\n", "f", 8).size(), 0);
}

void test_save_load(void **)
{
    TempDir d;
    // No file yet: an empty table.
    assert_int_equal(ContextTable::load(d.path, 8).size(), 0);
    ContextTable t(8);
    t.allocate(7, 0);
    t.allocate(7, 1);
    t.allocate(9, 3);
    t.save(d.path);
    assert_int_equal(access((ContextTable::path_in(d.path) + ".new").c_str(), F_OK), -1);
    auto u = ContextTable::load(d.path, 8);
    assert_string_equal(u.text().c_str(), t.text().c_str());
    assert_int_equal(u.capacity(), 8);
    // The loaded table allocates above what it holds.
    assert_int_equal(*u.allocate(10, 0), 3);
    // An unwritable place.
    std::string e =
        test_helpers::error_of<std::runtime_error>([] { ContextTable(1).save("/nonexistent/dir"); });
    assert_true(contains(e, "/nonexistent/dir/switch_rdma_contexts"));
}

void test_malformed_rejected(void **)
{
    std::string e = state_error("");
    assert_true(contains(e, "/x/state:1: empty file"));
    e = state_error("storm-contexts 2\n");
    assert_true(contains(e, "/x/state:1: expected \"storm-contexts 1\""));
    e = state_error("storm-contexts 1\n0 1 2\n1 2\n");
    assert_true(contains(e, "/x/state:3: expected \"<id> <job id> <step id>\""));
    e = state_error("storm-contexts 1\n0 1 2 3\n");
    assert_true(contains(e, "/x/state:2: bad step id \"2 3\""));
    e = state_error("storm-contexts 1\n0 1 x\n");
    assert_true(contains(e, "/x/state:2: bad step id"));
    e = state_error("storm-contexts 1\n-1 1 2\n");
    assert_true(contains(e, "/x/state:2: bad context id"));
    e = state_error("storm-contexts 1\n0 4294967296 2\n");
    assert_true(contains(e, "/x/state:2: bad job id"));
    e = state_error("storm-contexts 1\n0  1 2\n");
    assert_true(contains(e, "/x/state:2: bad job id"));
    e = state_error("storm-contexts 1\n01 1 2\n");
    assert_true(contains(e, "/x/state:2: bad context id"));
    e = state_error("storm-contexts 1\n\n");
    assert_true(contains(e, "/x/state:2:"));
    e = state_error("storm-contexts 1\n3 1 2\n4 1 3\n3 5 6\n");
    assert_true(contains(e, "/x/state:4: context 3 listed twice"));
    e = state_error("storm-contexts 1\n3 1 2");
    assert_true(contains(e, "/x/state:2: last line does not end with a newline"));
    e = state_error("storm-contexts 1\r\n");
    assert_true(contains(e, "/x/state:1:"));

    // Through load(): the file's path in the message.
    TempDir d;
    d.write("storm-contexts 1\n0 1 2\nbad\n");
    e = test_helpers::error_of<StateError>([&] { ContextTable::load(d.path, 8); });
    assert_true(contains(e, ContextTable::path_in(d.path) + ":3: "));
}

void test_remark_after_load(void **)
{
    // The file has 0 (1.0), 1 (2.0), 2 (3.0); slurmctld's job state knows
    // steps 1.0 (id 0), 4.0 (id 2, the file is stale) and 5.0 (id 6).
    auto t = ContextTable::parse("storm-contexts 1\n0 1 0\n1 2 0\n2 3 0\n", "f", 8);
    assert_true(t.mark(0, 1, 0) == ContextTable::Mark::confirmed);
    assert_true(t.mark(2, 4, 0) == ContextTable::Mark::replaced);
    assert_true(t.mark(6, 5, 0) == ContextTable::Mark::added);
    // A second claim on a confirmed id is a conflict that changes nothing.
    assert_true(t.mark(6, 9, 9) == ContextTable::Mark::conflict);
    assert_int_equal(t.holder(6)->job_id, 5);
    // A restored step's id above storm_ctx_max is kept.
    assert_true(t.mark(20, 6, 1) == ContextTable::Mark::added);
    assert_true(t.has_unconfirmed()); // id 1 of step 2.0
    // No new allocation may take a re-marked id.
    assert_int_equal(*t.allocate(7, 0), 3);
    // Job 2 has ended: its unconfirmed entry goes; the others stay.
    auto dropped = t.sweep([](uint32_t job, uint32_t) { return job == 2; });
    assert_int_equal(dropped.size(), 1);
    assert_int_equal(dropped[0].first, 1);
    assert_int_equal(dropped[0].second.job_id, 2);
    assert_false(t.has_unconfirmed());
    assert_int_equal(*t.allocate(8, 0), 1);
    assert_int_equal(*t.allocate(8, 1), 4);

    // An unconfirmed entry of a job that lives stays (confirmed) after a
    // sweep, until the job ends.
    auto u = ContextTable::parse("storm-contexts 1\n0 1 0\n", "f", 8);
    assert_true(u.sweep([](uint32_t, uint32_t) { return false; }).empty());
    assert_true(u.contains(0));
    assert_false(u.has_unconfirmed());
    assert_int_equal(u.release_job(1).size(), 1);
}

} // namespace

int main()
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_allocate_lowest_free),   cmocka_unit_test(test_exhaustion),
        cmocka_unit_test(test_release_only_by_holder), cmocka_unit_test(test_release_job),
        cmocka_unit_test(test_text_round_trip),        cmocka_unit_test(test_save_load),
        cmocka_unit_test(test_malformed_rejected),     cmocka_unit_test(test_remark_after_load),
    };
    return cmocka_run_group_tests_name("context_table", tests, nullptr, nullptr);
}
