// Unit tests of the gang matrix (sched_gang/matrix.cpp): the slots jobs
// are packed into, alternative scheduling on idle cells, and a matrix
// that overflows its multiprogramming level.

#include <cstdint>
#include <vector>

#include "lib/net/rangeset.hpp"
#include "sched_gang/matrix.hpp"
#include "tests/unit/cmocka.hpp"

using namespace storm::gang;
using storm::net::RangeSet;

namespace {

JobShape shape(uint32_t id, std::vector<uint64_t> cells, RangeSet nodes = RangeSet::single(0))
{
    return {id, std::move(cells), nodes};
}

void test_matrix_packing(void **)
{
    Matrix m(4);
    // A and B share cells: two slots; C fits beside A.
    assert_true(m.update({shape(1, {1, 2}), shape(2, {1, 2}), shape(3, {3})}));
    assert_int_equal(m.slots(), 2);
    auto h = m.homes();
    assert_int_equal(h[1], 0);
    assert_int_equal(h[2], 1);
    assert_int_equal(h[3], 0);
    // Alternative scheduling: C's cell is idle in slot 1, so C runs there too.
    assert_int_equal(m.masks().at(3), 0x3);
    assert_int_equal(m.masks().at(1), 0x1);
    assert_int_equal(m.masks().at(2), 0x2);
    assert_int_equal(m.idle_cells(0), 0);
    assert_int_equal(m.idle_cells(1), 0); // B holds 1 and 2, C 3
    // The same jobs again: nothing changes.
    assert_false(m.update({shape(1, {1, 2}), shape(2, {1, 2}), shape(3, {3})}));
    // A ends: B and C keep their slots (nobody is disturbed) and B, whose
    // cells are now idle in slot 0, runs there as well.
    assert_true(m.update({shape(2, {1, 2}), shape(3, {3})}));
    h = m.homes();
    assert_int_equal(h[2], 1);
    assert_int_equal(h[3], 0);
    assert_int_equal(m.masks().at(2), 0x3);
    // C ends: slot 0 empties and goes; B moves down with its slot.
    assert_true(m.update({shape(2, {1, 2})}));
    assert_int_equal(m.slots(), 1);
    assert_int_equal(m.homes()[2], 0);
    // A new job goes to the first slot it fits.
    m.update({shape(2, {1, 2}), shape(4, {5}), shape(5, {2})});
    h = m.homes();
    assert_int_equal(h[4], 0);
    assert_int_equal(h[5], 1);
    assert_false(m.overflowed());
    // A job too big for slot 1's idle cells stays out of it: idle cells remain.
    Matrix k(2);
    k.update({shape(1, {1, 2}), shape(2, {1}), shape(3, {2, 3})});
    assert_int_equal(k.homes()[3], 1);
    assert_int_equal(k.masks().at(3), 0x2);
    assert_int_equal(k.idle_cells(1), 0); // 1: job 2; 2, 3: job 3
    assert_int_equal(k.idle_cells(0), 1); // 3
}

void test_matrix_overflow(void **)
{
    Matrix m(2);
    m.update({shape(1, {1}), shape(2, {1}), shape(3, {1})});
    assert_int_equal(m.slots(), 3);
    assert_true(m.overflowed());
    // Every job still runs somewhere.
    for (auto &[id, mask] : m.masks())
        assert_true(mask != 0);
}

} // namespace

int main()
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_matrix_packing),
        cmocka_unit_test(test_matrix_overflow),
    };
    return cmocka_run_group_tests_name("matrix", tests, nullptr, nullptr);
}
