#include "text/ids.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "core/error.h"

namespace voxd::text {
namespace {

using Ids = std::vector<int64_t>;

TEST(ParseIds, AcceptsSpacesCommasAndBrackets) {
  EXPECT_EQ(parse_ids("12 5 7"), (Ids{12, 5, 7}));
  EXPECT_EQ(parse_ids("12,5,7"), (Ids{12, 5, 7}));
  EXPECT_EQ(parse_ids("[12, 5, 7]"), (Ids{12, 5, 7}));
  EXPECT_EQ(parse_ids("  0\n1\t2  "), (Ids{0, 1, 2}));
  EXPECT_EQ(parse_ids("42"), (Ids{42}));
}

TEST(ParseIds, RejectsJunk) {
  for (const char* junk : {"", "   ", "[]", "abc", "1 -2", "1,,2", ",1", "1,", "1 2x", "1.5",
                           "[1 2", "99999999999999999999"}) {
    EXPECT_THROW(parse_ids(junk), InputError) << junk;
  }
  try {
    parse_ids("1 2 x");
    FAIL();
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("offset 4"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace voxd::text
