#include "text/normalize.h"

#include <gtest/gtest.h>

#include <string>
#include <utility>
#include <vector>

#include "core/error.h"
#include "text/numbers.h"

namespace voxd::text {
namespace {

using Cases = std::vector<std::pair<std::string, std::string>>;

void expect_normalized(const Cases& cases) {
  for (const auto& [input, expected] : cases) {
    EXPECT_EQ(normalize(input), expected) << "input: " << input;
  }
}

TEST(Numbers, Cardinals) {
  const Cases cases = {
      {"0", "zero"},
      {"7", "seven"},
      {"13", "thirteen"},
      {"20", "twenty"},
      {"21", "twenty-one"},
      {"99", "ninety-nine"},
      {"100", "one hundred"},
      {"101", "one hundred one"},
      {"999", "nine hundred ninety-nine"},
      {"1000", "one thousand"},
      {"1001", "one thousand one"},
      {"123456", "one hundred twenty-three thousand four hundred fifty-six"},
      {"1000000", "one million"},
      {"2000000000", "two billion"},
      {"1000000000000", "one trillion"},
      {"000042", "forty-two"},
  };
  for (const auto& [digits, words] : cases) EXPECT_EQ(cardinal_words(digits), words) << digits;
  EXPECT_EQ(cardinal_words(std::string(40, '1')), digit_words(std::string(40, '1')));
}

TEST(Numbers, Ordinals) {
  const Cases cases = {
      {"1", "first"},
      {"2", "second"},
      {"3", "third"},
      {"4", "fourth"},
      {"5", "fifth"},
      {"8", "eighth"},
      {"9", "ninth"},
      {"11", "eleventh"},
      {"12", "twelfth"},
      {"20", "twentieth"},
      {"21", "twenty-first"},
      {"100", "one hundredth"},
      {"1000000", "one millionth"},
  };
  for (const auto& [digits, words] : cases) EXPECT_EQ(ordinal_words(digits), words) << digits;
}

TEST(Numbers, Years) {
  const Cases cases = {
      {"1984", "nineteen eighty-four"}, {"2000", "two thousand"},
      {"2005", "two thousand five"},    {"2010", "twenty ten"},
      {"2024", "twenty twenty-four"},   {"1900", "nineteen hundred"},
      {"1905", "nineteen oh five"},     {"1066", "ten sixty-six"},
  };
  for (const auto& [digits, words] : cases) EXPECT_EQ(year_words(digits), words) << digits;
}

TEST(Normalize, Numbers) {
  expect_normalized({
      {"I have 3 cats", "I have three cats"},
      {"-5", "minus five"},
      {"It was -12 degrees", "It was minus twelve degrees"},
      {"1,234,567", "one million two hundred thirty-four thousand five hundred sixty-seven"},
      {"1,2", "one,two"},
      {"3.14", "three point one four"},
      {"1,234.5", "one thousand two hundred thirty-four point five"},
      {".5", "point five"},
      {"007", "zero zero seven"},
      {"999999999999",
       "nine hundred ninety-nine billion nine hundred ninety-nine million nine "
       "hundred ninety-nine thousand nine hundred ninety-nine"},
      {"mp3", "mp three"},
      {"page 250", "page two hundred fifty"},
      {"room #4", "room number four"},
  });
}

TEST(Normalize, OrdinalsAndYears) {
  expect_normalized({
      {"21st", "twenty-first"},
      {"the 2nd and 3rd", "the second and third"},
      {"11th", "eleventh"},
      {"May 1st", "May first"},
      {"in 1984", "in nineteen eighty-four"},
      {"in 2005", "in two thousand five"},
      {"the 1990s", "the nineteen nineties"},
      {"the 80s", "the eighties"},
  });
}

TEST(Normalize, CurrencyAndPercent) {
  expect_normalized({
      {"$5.50", "five dollars fifty cents"},
      {"$1", "one dollar"},
      {"$1.01", "one dollar one cent"},
      {"$0.99", "ninety-nine cents"},
      {"$5 million", "five million dollars"},
      {"$1,000", "one thousand dollars"},
      {"\u20AC20", "twenty euros"},
      {"\u00A33.50", "three pounds fifty pence"},
      {"\u00A5100", "one hundred yen"},
      {"50%", "fifty percent"},
      {"3.5%", "three point five percent"},
  });
}

TEST(Normalize, TimesAndUnits) {
  expect_normalized({
      {"10:30", "ten thirty"},
      {"10:05", "ten oh five"},
      {"10:00", "ten o'clock"},
      {"7:45 pm", "seven forty-five PM"},
      {"at 5pm", "at five PM"},
      {"We meet at 9 a.m. Bring food.", "We meet at nine AM. Bring food."},
      {"5km", "five kilometers"},
      {"1 kg", "one kilogram"},
      {"60 mph", "sixty miles per hour"},
      {"20\u00B0C", "twenty degrees Celsius"},
  });
}

TEST(Normalize, Abbreviations) {
  expect_normalized({
      {"Mr. Smith", "mister Smith"},
      {"Mrs. Brown and Dr. Who", "missus Brown and doctor Who"},
      {"Prof. Xavier", "professor Xavier"},
      {"apples, pears, etc. are fruit", "apples, pears, et cetera are fruit"},
      {"fruit, e.g. apples", "fruit, for example apples"},
      {"one thing, i.e. this", "one thing, that is this"},
      {"Acme Inc. is big", "Acme incorporated is big"},
      {"Acme Inc. It is big.", "Acme incorporated. It is big."},
      {"No. 5", "number five"},
      {"No. I won't", "No. I won't"},
      {"St. Patrick", "Saint Patrick"},
      {"on Main St. today", "on Main street today"},
      {"cats vs. dogs", "cats versus dogs"},
      {"the U.S.A.", "the USA."},
      {"approx. 5", "approximately five"},
      {"John Smith Jr. was there", "John Smith junior was there"},
  });
}

TEST(Normalize, UnicodeCleanUp) {
  expect_normalized({
      {"\u201CHello\u201D \u2013 \u2018world\u2019\u2026", "\"Hello\" - 'world'..."},
      {"1990\u20131995", "nineteen ninety to nineteen ninety-five"},
      {"wait\u2014what", "wait - what"},
      {"\uFF28\uFF45\uFF4C\uFF4C\uFF4F", "Hello"},
      {"\uFB01ne", "fine"},
      {"a\u00A0b", "a b"},
      {"  a\t\t b  ", "a b"},
      {"a\n\n\nb", "a\nb"},
      {"a\r\nb", "a\nb"},
      {"a\x07"
       "b",
       "ab"},
      {"I \U0001F600 you", "I you"},
      {"\U0001F44D\U0001F3FD", ""},
      {"I \u2764\uFE0F it!", "I it!"},
      {"soft\u00ADhyphen", "softhyphen"},
      {"Hello \u4E16\u754C \u043C\u0438\u0440", "Hello \u4E16\u754C \u043C\u0438\u0440"},
      {"cafe\u0301", "caf\u00E9"},
  });
}

TEST(Normalize, InvalidUtf8NamesTheOffset) {
  for (const auto& [input, offset] :
       std::vector<std::pair<std::string, std::string>>{{"ab\xff", "offset 2"},
                                                        {"hello \xe2\x82", "offset 6"},
                                                        {"\xc0\xaf", "offset 0"},
                                                        {"ok \xed\xa0\x80", "offset 3"}}) {
    try {
      normalize(input);
      ADD_FAILURE() << "no error for " << offset;
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find(offset), std::string::npos) << e.what();
    }
  }
}

TEST(Normalize, FormsThatAreNotDatesOrPhoneNumbers) {
  // Impossible dates, versions and addresses with more parts stay numbers.
  for (const std::string text :
       {"2023-02-29", "2024-13-01", "13/13/2024", "1.2.3.4", "3/4", "10.0.0.1", "2024-03-05-07"}) {
    const std::string spoken = normalize(text);
    for (const char* month : {"January", "February", "March", "April", "December"}) {
      EXPECT_EQ(spoken.find(month), std::string::npos) << text << " → " << spoken;
    }
  }
  // Digits separated by spaces alone are numbers, not a phone number.
  EXPECT_EQ(normalize("555 123"), "five hundred fifty-five one hundred twenty-three");
  // Ranges of years are not phone numbers.
  EXPECT_EQ(normalize("1990-1995").find(','), std::string::npos);
  // Too many digits for a phone number (E.164 has at most 15).
  EXPECT_EQ(normalize("+1 234 567 890 123 456").find("plus one, two three four"),
            std::string::npos);
  // Words around a dot that is no web address are read with "dot"; plain sentence ends are not.
  EXPECT_EQ(normalize("Node.js is fast. It is."), "Node dot js is fast. It is.");
  EXPECT_EQ(normalize("Ph.D. student"), "PhD student");
}

TEST(Normalize, OtherLanguagesGetCleanUpOnly) {
  EXPECT_EQ(normalize("3 \u201EKatzen\u201C", "de"), "3 \"Katzen\"");
  EXPECT_EQ(normalize("3 cats", "en-us"), "three cats");
}

}  // namespace
}  // namespace voxd::text
