// MappedFile (src/core/mapped_file.h): the bytes of a file in place, one line naming the path
// when it cannot map it, and ownership of the mapping that moves.
#include <gtest/gtest.h>

#include <string>
#include <utility>

#include "core/mapped_file.h"
#include "error_of.h"
#include "temp_dir.h"

using namespace moet;
using moet::test::error_of;

TEST(MappedFile, MapsTheWholeFileAndAnEmptyOneToNothing) {
  test::TempDir dir("moet_mapped_file");
  const MappedFile f(dir.write("a.bin", std::string("abc\0def", 7)), "test file");
  ASSERT_EQ(f.size(), 7u);
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(f.data()), f.size()),
            std::string("abc\0def", 7));
  const MappedFile empty(dir.write("empty.bin", ""), "test file");
  EXPECT_EQ(empty.size(), 0u);
  EXPECT_EQ(empty.data(), nullptr);
}

TEST(MappedFile, OneLineNamingThePathWhenItCannotMap) {
  test::TempDir dir("moet_mapped_file");
  const std::string missing = dir.path("missing.bin");
  EXPECT_EQ(error_of([&] {
              MappedFile f(missing, "test file");
            }).rfind(str("cannot open test file '", missing, "': "), 0),
            0u);
  EXPECT_EQ(error_of([&] { MappedFile f(dir.str(), "test file"); }),
            str("'", dir.str(), "' is not a regular file"));
}

TEST(MappedFile, MovesTheMapping) {
  test::TempDir dir("moet_mapped_file");
  MappedFile a(dir.write("a.bin", "xyz"), "test file");
  const unsigned char* p = a.data();
  MappedFile b(std::move(a));
  EXPECT_EQ(b.data(), p);
  EXPECT_EQ(b.size(), 3u);
  EXPECT_EQ(a.data(), nullptr);
  EXPECT_EQ(a.size(), 0u);
  MappedFile c(dir.write("c.bin", "12345"), "test file");
  c = std::move(b);  // c's own mapping is unmapped
  EXPECT_EQ(c.data(), p);
  EXPECT_EQ(c.size(), 3u);
  EXPECT_EQ(b.data(), nullptr);
  EXPECT_EQ(c.data()[2], 'z');
}
