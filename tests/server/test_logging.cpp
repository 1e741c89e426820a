// log_event in both formats, through a logger that writes to a string: text lines carry the
// fields as key=value in order (strings with spaces quoted), JSON lines are one object each with
// time, level, msg and the fields; lines below the level are dropped.

#include <gtest/gtest.h>
#include <spdlog/sinks/ostream_sink.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <memory>
#include <nlohmann/json.hpp>
#include <regex>
#include <sstream>
#include <string>

#include "core/error.h"
#include "server/logging.h"

namespace voxd::server {
namespace {

class LoggingTest : public ::testing::Test {
 protected:
  void SetUp() override {
    previous_ = spdlog::default_logger();
    auto sink = std::make_shared<spdlog::sinks::ostream_sink_mt>(out_);
    spdlog::set_default_logger(std::make_shared<spdlog::logger>("test", sink));
    spdlog::set_level(spdlog::level::info);
  }
  void TearDown() override { spdlog::set_default_logger(previous_); }

  std::ostringstream out_;
  std::shared_ptr<spdlog::logger> previous_;
};

TEST_F(LoggingTest, TextLinesCarryFieldsInOrder) {
  configure_logging(LogFormat::kText);
  log_event(spdlog::level::info, "request",
            {{"id", "abc-1"}, {"status", 200}, {"voice", "en demo"}, {"audio_s", 1.5}});
  const std::string line = out_.str();
  EXPECT_NE(line.find(" info request id=abc-1 status=200 voice=\"en demo\" audio_s=1.5\n"),
            std::string::npos)
      << line;
  EXPECT_EQ(line.find('\n'), line.size() - 1);
  EXPECT_EQ(line[4], '-');  // starts with the date
}

TEST_F(LoggingTest, JsonLinesAreOneObjectEach) {
  configure_logging(LogFormat::kJson);
  log_event(spdlog::level::warn, "memory allocated while idle",
            {{"unexplained_bytes", 4096}, {"summary", "line one\nline \"two\""}});
  spdlog::info("a plain line with {} braces", "{}");
  std::istringstream lines(out_.str());
  std::string first, second, extra;
  ASSERT_TRUE(std::getline(lines, first));
  ASSERT_TRUE(std::getline(lines, second));
  EXPECT_FALSE(std::getline(lines, extra));
  const nlohmann::json a = nlohmann::json::parse(first);
  EXPECT_EQ(a["level"], "warning");
  EXPECT_EQ(a["msg"], "memory allocated while idle");
  EXPECT_EQ(a["unexplained_bytes"], 4096);
  EXPECT_EQ(a["summary"], "line one\nline \"two\"");
  // RFC 3339 in UTC to the microsecond.
  EXPECT_TRUE(std::regex_match(a["time"].get<std::string>(),
                               std::regex(R"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z)")))
      << a["time"];
  const nlohmann::json b = nlohmann::json::parse(second);
  EXPECT_EQ(b["msg"], "a plain line with {} braces");
  EXPECT_FALSE(b.contains("unexplained_bytes"));  // fields belong to their own line only
}

// What a client sent reaches a text line neither as a line break nor as raw control or
// non-ASCII bytes: fields other than plain words are quoted as ASCII-only JSON, and the
// message's control bytes are escaped.
TEST_F(LoggingTest, TextLinesCarryNoRawControlOrNonAsciiBytes) {
  configure_logging(LogFormat::kText);
  spdlog::warn("speech stream cut off: {}", "bad\r\nthing");
  log_event(spdlog::level::info, "request",
            {{"path", "/a\xc2\x85\r"}, {"voice", "\xe5\xa5\xb3\xe5\xa3\xb0"}, {"id", "x=1"}});
  const std::string text = out_.str();
  EXPECT_EQ(std::count(text.begin(), text.end(), '\n'), 2) << text;
  EXPECT_EQ(text.find('\r'), std::string::npos) << text;
  EXPECT_TRUE(std::all_of(text.begin(), text.end(), [](char c) {
    return static_cast<unsigned char>(c) < 0x80;
  })) << text;
  EXPECT_NE(text.find("speech stream cut off: bad\\x0d\\x0athing\n"), std::string::npos) << text;
  EXPECT_NE(text.find(" path=\"/a\\u0085\\r\""), std::string::npos) << text;
  EXPECT_NE(text.find(" voice=\"\\u5973\\u58f0\""), std::string::npos) << text;
  EXPECT_NE(text.find(" id=\"x=1\""), std::string::npos) << text;
}

TEST_F(LoggingTest, LinesBelowTheLevelAreDropped) {
  configure_logging(LogFormat::kJson);
  log_event(spdlog::level::debug, "probe", {{"path", "/healthz"}});
  EXPECT_EQ(out_.str(), "");
}

TEST(LogFormat, Parses) {
  EXPECT_EQ(parse_log_format("text"), LogFormat::kText);
  EXPECT_EQ(parse_log_format("json"), LogFormat::kJson);
  EXPECT_THROW(parse_log_format("yaml"), InputError);
}

}  // namespace
}  // namespace voxd::server
