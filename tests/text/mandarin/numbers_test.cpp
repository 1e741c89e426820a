// Tests for the Mandarin number readings: one case table per rule, then robustness on random input.
#include "text/mandarin/numbers.h"

#include <gtest/gtest.h>

#include <array>
#include <cstddef>
#include <random>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/error.h"
#include "text/normalize.h"

namespace voxd::text::mandarin {
namespace {

using Cases = std::vector<std::pair<std::string, std::string>>;

void expect_read(const Cases& cases) {
  for (const auto& [input, expected] : cases) {
    EXPECT_EQ(read_numbers(input), expected) << "input: " << input;
  }
}

bool is_valid_utf8(std::string_view text) {
  try {
    check_utf8(text);
    return true;
  } catch (const InputError&) {
    return false;
  }
}

TEST(MandarinNumbersCardinal, ZerosAndUnits) {
  const Cases cases = {
      {"0", "零"},
      {"1", "一"},
      {"9", "九"},
      {"10", "十"},
      {"15", "十五"},
      {"20", "二十"},
      {"99", "九十九"},
      {"100", "一百"},
      {"105", "一百零五"},
      {"110", "一百一十"},
      {"1005", "一千零五"},
      {"1012", "一千零一十二"},
      {"10010", "一万零一十"},
      {"100000", "十万"},
      {"100010", "十万零一十"},
      {"100015", "十万零一十五"},
      {"1000000", "一百万"},
      {"10001000", "一千万一千"},
      {"100000000", "一亿"},
      {"100001000", "一亿零一千"},
      {"110000000", "一亿一千万"},
      {"1000000000", "十亿"},
      {"1000000000000", "一万亿"},
      {"1000100000000", "一万零一亿"},
      {"1000000010000", "一万亿零一万"},
      {"1234567890123456", "一千二百三十四万五千六百七十八亿九千零一十二万三千四百五十六"},
      {"9999999999999999", "九千九百九十九万九千九百九十九亿九千九百九十九万九千九百九十九"},
  };
  for (const auto& [digits, hanzi] : cases) EXPECT_EQ(cardinal(digits), hanzi) << digits;
}

TEST(MandarinNumbersCardinal, Liang) {
  const Cases cases = {
      {"2", "二"},           {"12", "十二"},       {"22", "二十二"},
      {"200", "二百"},       {"2000", "两千"},     {"20000", "两万"},
      {"22000", "两万两千"}, {"120000", "十二万"}, {"20030000", "两千零三万"},
      {"200000000", "两亿"}, {"1002", "一千零二"}, {"2222", "两千二百二十二"},
  };
  for (const auto& [digits, hanzi] : cases) EXPECT_EQ(cardinal(digits), hanzi) << digits;
}

TEST(MandarinNumbersCardinal, DigitByDigitFallbacks) {
  EXPECT_EQ(cardinal("007"), "〇〇七");
  EXPECT_EQ(cardinal("12345678901234567"), "一二三四五六七八九〇一二三四五六七");
  EXPECT_EQ(cardinal(""), "");
  EXPECT_EQ(digit_by_digit("2024", false), "二〇二四");
  EXPECT_EQ(digit_by_digit("110", true), "幺幺零");
  EXPECT_EQ(digit_by_digit("110", false), "一一〇");
}

TEST(MandarinNumbersDecimal, Helper) {
  const Cases cases = {
      {"3.14", "三点一四"}, {"0.50", "零点五"},       {"12.0", "十二"},
      {"0.5", "零点五"},    {"3.05", "三点零五"},     {"12.5", "十二点五"},
      {"2.5", "二点五"},    {"100.01", "一百点零一"}, {"7", "七"},
  };
  for (const auto& [digits, hanzi] : cases) EXPECT_EQ(decimal(digits), hanzi) << digits;
}

TEST(MandarinNumbersRead, PlainNumbersAndDecimals) {
  expect_read({
      {"15", "十五"},
      {"2000", "两千"},
      {"3.14", "三点一四"},
      {"0.5", "零点五"},
      {"12.0", "十二"},
      {"1,234,567", "一百二十三万四千五百六十七"},
      {"1,234.5", "一千二百三十四点五"},
      {"1,2", "一,二"},
      {"007", "〇〇七"},
      {"共有123456人", "共有十二万三千四百五十六人"},
      {"版本1.2.3", "版本一点二点三"},
  });
}

TEST(MandarinNumbersRead, LiangBeforeMeasureWords) {
  expect_read({
      {"2个", "两个"},     {"2本书", "两本书"}, {"2小时", "两小时"}, {"2分钟", "两分钟"},
      {"2万", "两万"},     {"2亿", "两亿"},     {"2倍", "两倍"},     {"2人", "两人"},
      {"2年", "两年"},     {"2点", "两点"},     {"第2", "第二"},     {"第2个", "第二个"},
      {"12个", "十二个"},  {"2月", "二月"},     {"2号", "二号"},     {"2.5个", "二点五个"},
      {"2年级", "二年级"}, {"2米", "二米"},     {"2", "二"},
  });
}

TEST(MandarinNumbersRead, Negatives) {
  expect_read({
      {"-5", "负五"},
      {"-3.5", "负三点五"},
      {"气温-5度", "气温负五度"},
      {"x = -2", "x = 负二"},
      {"5-3=2", "五-三=二"},
      {"相差 -12", "相差 负十二"},
  });
}

TEST(MandarinNumbersRead, Percent) {
  expect_read({
      {"50%", "百分之五十"},
      {"3.5%", "百分之三点五"},
      {"-2%", "百分之负二"},
      {"100%", "百分之百"},
      {"200%", "百分之二百"},
      {"5‰", "千分之五"},
      {"涨了3%-5%", "涨了百分之三到百分之五"},
      {"3-5%", "百分之三到百分之五"},
  });
}

TEST(MandarinNumbersRead, Fractions) {
  expect_read({
      {"3/4", "四分之三"},
      {"1/2", "二分之一"},
      {"1/100", "一百分之一"},
      {"1/0", "一/零"},
  });
}

TEST(MandarinNumbersRead, Ranges) {
  expect_read({
      {"3-5天", "三到五天"},
      {"10~20人", "十到二十人"},
      {"10～20人", "十到二十人"},
      {"3—5个", "三到五个"},
      {"1.5-2米", "一点五到二米"},
      {"2-3个", "两到三个"},
      {"100-200元", "一百到二百元"},
      {"3-5kg", "三到五千克"},
      {"-5~10℃", "负五到十摄氏度"},
      {"2023-2024年", "二〇二三到二〇二四年"},
      {"1-2-3", "一-二-三"},
  });
}

TEST(MandarinNumbersRead, Years) {
  expect_read({
      {"2024年", "二〇二四年"},
      {"1999年", "一九九九年"},
      {"2000年", "二〇〇〇年"},
      {"98年", "九八年"},
      {"08年", "〇八年"},
      {"3年", "三年"},
      {"10年", "十年"},
      {"2年", "两年"},
      {"100年", "一百年"},
      {"20年来", "二十年来"},
      {"80年代", "八十年代"},
  });
}

TEST(MandarinNumbersRead, Dates) {
  expect_read({
      {"2024-03-05", "二〇二四年三月五日"},
      {"2024/3/5", "二〇二四年三月五日"},
      {"2024.03.05", "二〇二四年三月五日"},
      {"2024-12-31", "二〇二四年十二月三十一日"},
      {"2024年3月5日", "二〇二四年三月五日"},
      {"2024年03月05日", "二〇二四年三月五日"},
      {"12月31日", "十二月三十一日"},
      {"5号", "五号"},
      {"10月1日", "十月一日"},
      {"2024-13-05", "两千零二十四-十三-〇五"},
  });
}

TEST(MandarinNumbersRead, Times) {
  expect_read({
      {"8:30", "八点三十分"},
      {"14:05", "十四点零五分"},
      {"9:15:30", "九点十五分三十秒"},
      {"2:00", "两点"},
      {"12:00", "十二点"},
      {"0:30", "零点三十分"},
      {"10:08", "十点零八分"},
      {"2:30", "两点三十分"},
      {"08:00", "八点"},
      {"25:99", "二十五:九十九"},
      {"8:00-17:00", "八点到十七点"},
      {"3点05分", "三点零五分"},
  });
}

TEST(MandarinNumbersRead, Money) {
  expect_read({
      {"¥12.50", "十二点五元"},
      {"￥100", "一百元"},
      {"¥2", "两元"},
      {"$5", "五美元"},
      {"$1,000", "一千美元"},
      {"€20", "二十欧元"},
      {"£3.5", "三点五英镑"},
      {"$3亿", "三亿美元"},
      {"¥10-20", "十到二十元"},
      {"¥10-¥20", "十元到二十元"},
      {"-¥5", "负五元"},
      {"12.5元", "十二点五元"},
      {"3块5", "三块五"},
      {"100 USD", "一百美元"},
      {"100RMB", "一百人民币"},
      {"50 CNY", "五十人民币"},
  });
}

TEST(MandarinNumbersRead, PhoneNumbers) {
  expect_read({
      {"13812345678", "幺三八幺二三四五六七八"},
      {"138 1234 5678", "幺三八幺二三四五六七八"},
      {"010-12345678", "零幺零幺二三四五六七八"},
      {"400-800-1234", "四零零八零零幺二三四"},
      {"0755-8888888", "零七五五八八八八八八八"},
      {"+86 13812345678", "加八六幺三八幺二三四五六七八"},
      {"1234567", "幺二三四五六七"},
      {"01012345678", "零幺零幺二三四五六七八"},
      {"1000000", "一百万"},
      {"1234567元", "一百二十三万四千五百六十七元"},
      {"拨打110", "拨打幺幺零"},
      {"打12345热线", "打幺二三四五热线"},
      {"请打120", "请打幺二零"},
      {"电话：10086", "电话：幺零零八六"},
      {"110元", "一百一十元"},
      {"10010", "一万零一十"},
      {"119", "一百一十九"},
  });
}

TEST(MandarinNumbersRead, DigitStrings) {
  expect_read({
      {"007", "〇〇七"},
      {"G1234", "G一二三四"},
      {"CA1234", "CA一二三四"},
      {"房间302", "房间三〇二"},
      {"航班1234", "航班一二三四"},
      {"PM2.5", "PM二点五"},
  });
}

TEST(MandarinNumbersRead, Ordinals) {
  expect_read({
      {"第3", "第三"},
      {"第1", "第一"},
      {"第10", "第十"},
      {"第2", "第二"},
      {"第21", "第二十一"},
      {"第2024年", "第两千零二十四年"},
  });
}

TEST(MandarinNumbersRead, Units) {
  expect_read({
      {"5kg", "五千克"},
      {"2kg", "两千克"},
      {"2L", "两升"},
      {"2km", "两公里"},
      {"2m", "两米"},
      {"2 g", "两克"},
      {"2t", "两吨"},
      {"2h", "两小时"},
      {"2min", "两分钟"},
      {"2s", "两秒"},
      {"2ms", "二毫秒"},
      {"2℃", "二摄氏度"},
      {"2GB", "二吉字节"},
      {"25℃", "二十五摄氏度"},
      {"25°C", "二十五摄氏度"},
      {"98°F", "九十八华氏度"},
      {"90°", "九十度"},
      {"500mg", "五百毫克"},
      {"3cm", "三厘米"},
      {"60km/h", "六十公里每小时"},
      {"10m/s", "十米每秒"},
      {"500ml", "五百毫升"},
      {"500mL", "五百毫升"},
      {"100m²", "一百平方米"},
      {"100㎡", "一百平方米"},
      {"100m2", "一百平方米"},
      {"5km²", "五平方公里"},
      {"3m³", "三立方米"},
      {"16GB", "十六吉字节"},
      {"512MB", "五百一十二兆字节"},
      {"1TB", "一太字节"},
      {"4KB", "四千字节"},
      {"50Hz", "五十赫兹"},
      {"2.4GHz", "二点四吉赫"},
      {"100MHz", "一百兆赫"},
      {"10kHz", "十千赫兹"},
      {"100W", "一百瓦"},
      {"3kW", "三千瓦"},
      {"220V", "二百二十伏"},
      {"5A，", "五安，"},
      {"5A级景区", "五A级景区"},
      {"5000mAh", "五千毫安时"},
      {"3h", "三小时"},
      {"30min", "三十分钟"},
      {"5 kg", "五千克"},
      {"5mins", "五mins"},
      {"5 meters", "五 meters"},
      {"1.5L", "一点五升"},
  });
}

TEST(MandarinNumbersRead, MixedSentences) {
  expect_read({
      {"2024年3月5日下午3:30，气温25℃，涨了3.5%，价格¥12.50，请拨打13812345678。",
       "二〇二四年三月五日下午三点三十分，气温二十五摄氏度，涨了百分之三点五，价格十二点五元，"
       "请拨打幺三八幺二三四五六七八。"},
      {"我买了2本书和3支笔，一共花了¥45。", "我买了两本书和三支笔，一共花了四十五元。"},
      {"G1234次列车8:05从北京出发，全程1,318km。",
       "G一二三四次列车八点零五分从北京出发，全程一千三百一十八公里。"},
      {"会议定于2024-06-01 14:00举行，预计3-5小时。",
       "会议定于二〇二四年六月一日 十四点举行，预计三到五小时。"},
      {"没有数字的句子。", "没有数字的句子。"},
      {"", ""},
  });
}

TEST(MandarinNumbersRead, MalformedBytesPassThrough) {
  const std::string input = std::string("\xff\xfe") + "12" + "\xc3" + "个\x80";
  EXPECT_EQ(read_numbers(input), std::string("\xff\xfe") + "十二" + "\xc3" + "个\x80");
}

TEST(MandarinNumbersRobustness, RandomInputNeverThrows) {
  std::mt19937 rng(20240305);
  const std::array<std::string_view, 40> pieces{
      "0",    "1",    "2",    "7",  "9",    "-", "+", ".",  ",",   ":",  "/",  "%",  "~",  " ",
      "¥",    "$",    "€",    "£",  "℃",    "°", "‰", "第", "年",  "月", "日", "号", "个", "点",
      "拨打", "电话", "房间", "kg", "km/h", "m", "A", "G",  "USD", "，", "—",  "～"};
  std::uniform_int_distribution<size_t> piece(0, pieces.size() - 1);
  std::uniform_int_distribution<int> length(0, 30);
  std::uniform_int_distribution<int> byte(0, 255);
  for (int round = 0; round < 3000; ++round) {
    std::string mixed;
    const int pieces_count = length(rng);
    for (int i = 0; i < pieces_count; ++i) mixed += pieces[piece(rng)];
    std::string output;
    EXPECT_NO_THROW(output = read_numbers(mixed)) << mixed;
    EXPECT_TRUE(is_valid_utf8(output)) << mixed;

    std::string bytes;
    const int bytes_count = length(rng);
    for (int i = 0; i < bytes_count; ++i) bytes += static_cast<char>(byte(rng));
    EXPECT_NO_THROW(output = read_numbers(bytes));
    if (is_valid_utf8(bytes)) {
      EXPECT_TRUE(is_valid_utf8(output)) << bytes;
    }
  }
}

TEST(MandarinNumbersRobustness, HelpersAcceptAnyText) {
  EXPECT_EQ(cardinal("1a2"), "十二");
  EXPECT_EQ(decimal("."), "零");
  EXPECT_EQ(decimal("1..5"), "一点五");
  EXPECT_EQ(digit_by_digit("1-0", true), "幺-零");
}

}  // namespace
}  // namespace voxd::text::mandarin
