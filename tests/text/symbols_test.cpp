#include "text/symbols.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "core/error.h"

namespace voxd::text {
namespace {

class SymbolTableTest : public ::testing::Test {
 protected:
  std::string write(const std::string& name, const std::string& content) {
    const std::filesystem::path dir = std::filesystem::temp_directory_path() / "voxd_text_tests";
    std::filesystem::create_directories(dir);
    const std::filesystem::path path = dir / name;
    std::ofstream(path, std::ios::binary) << content;
    return path.string();
  }

  static std::string error_of(const std::string& path) {
    try {
      SymbolTable::load(path);
    } catch (const InputError& e) {
      return e.what();
    }
    return "";
  }
};

TEST_F(SymbolTableTest, LoadsOneSymbolPerLine) {
  const SymbolTable table = SymbolTable::load(write("ok.txt", "_\n \na\n\xC9\x99\n@AA1"));
  ASSERT_EQ(table.size(), 5u);
  EXPECT_EQ(table.id("_"), 0);
  EXPECT_EQ(table.id(" "), 1);
  EXPECT_EQ(table.id("a"), 2);
  EXPECT_EQ(table.id("\xC9\x99"), 3);
  EXPECT_EQ(table.id("@AA1"), 4);
  EXPECT_EQ(table.id("b"), std::nullopt);
  EXPECT_EQ(table.symbol(1), " ");
  EXPECT_THROW(table.symbol(5), InputError);
  EXPECT_THROW(table.symbol(-1), InputError);
}

TEST_F(SymbolTableTest, StripsCarriageReturns) {
  const SymbolTable table = SymbolTable::load(write("crlf.txt", "_\r\na\r\n"));
  EXPECT_EQ(table.size(), 2u);
  EXPECT_EQ(table.id("a"), 1);
}

TEST_F(SymbolTableTest, ErrorsNameFileAndLine) {
  const std::string empty_line = write("empty_line.txt", "_\na\n\nb\n");
  EXPECT_NE(error_of(empty_line).find(empty_line + ":3"), std::string::npos)
      << error_of(empty_line);
  const std::string duplicate = write("duplicate.txt", "_\na\nb\na\n");
  EXPECT_NE(error_of(duplicate).find(duplicate + ":4"), std::string::npos) << error_of(duplicate);
  EXPECT_NE(error_of(duplicate).find("line 2"), std::string::npos) << error_of(duplicate);
  const std::string empty = write("empty.txt", "");
  EXPECT_NE(error_of(empty).find(empty), std::string::npos);
  EXPECT_NE(error_of("/nonexistent/symbols.txt").find("/nonexistent/symbols.txt"),
            std::string::npos);
}

TEST_F(SymbolTableTest, BundledEnglishInventory) {
  const SymbolTable table =
      SymbolTable::load(std::string(VOXD_SOURCE_DIR) + "/data/symbols/espeak-ipa-en.txt");
  EXPECT_EQ(table.symbol(0), "_");
  for (const char* symbol : {" ", ",", ".", "?", "!", "\xCB\x88", "\xCB\x8C", "a\xC9\xAA", "t"}) {
    EXPECT_TRUE(table.id(symbol)) << symbol;
  }
}

TEST(PhonemeSet, Parses) {
  EXPECT_EQ(parse_phoneme_set("espeak-ipa"), PhonemeSet::EspeakIpa);
  EXPECT_EQ(parse_phoneme_set("arpabet"), PhonemeSet::Arpabet);
  EXPECT_EQ(to_string(PhonemeSet::Arpabet), "arpabet");
  EXPECT_THROW(parse_phoneme_set("ipa"), InputError);
}

}  // namespace
}  // namespace voxd::text
