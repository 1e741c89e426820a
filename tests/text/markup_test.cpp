#include "text/markup.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <string>
#include <vector>

#include "core/error.h"

namespace voxd::text {
namespace {

// The spans' texts with spaces collapsed and ends trimmed, joined with " | ".
std::string texts(const std::vector<Span>& spans) {
  std::string out;
  for (const Span& span : spans) {
    if (!out.empty()) out += " | ";
    bool space = false;
    std::string text;
    for (char c : span.text) {
      if (c == ' ' || c == '\n') {
        space = !text.empty();
      } else {
        if (space) text += ' ';
        space = false;
        text += c;
      }
    }
    out += text;
  }
  return out;
}

std::string plain(std::string_view text) {
  return texts(parse_markup(text, "en-us"));
}

std::string error_of(std::string_view text) {
  try {
    parse_markup(text, "en-us");
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

TEST(Markup, PlainTextIsOneSpan) {
  const std::vector<Span> spans = parse_markup("Just words, no markup.", "en-us");
  ASSERT_EQ(spans.size(), 1u);
  EXPECT_EQ(spans[0].text, "Just words, no markup.\n");
  EXPECT_FLOAT_EQ(spans[0].rate, 1.0f);
  EXPECT_EQ(spans[0].pause_after_ms, 0);
}

TEST(Markup, BreakTimesAndStrengths) {
  for (const auto& [tag, ms] : std::vector<std::pair<std::string, int>>{
           {"<break time=\"500ms\"/>", 500},
           {"<break time='1.5s'/>", 1500},
           {"<break time=\"2S\"/>", 2000},
           {"<break time=\"0ms\"/>", 0},
           {"<break/>", 500},
           {"<break strength=\"none\"/>", 0},
           {"<break strength=\"x-weak\"/>", 150},
           {"<break strength=\"weak\"/>", 300},
           {"<break strength=\"strong\"/>", 800},
           {"<break strength=\"x-strong\"/>", 1200},
           {"<break time=\"250ms\" strength=\"x-strong\"/>", 250},
           {"<BREAK TIME=\"100ms\">", 100}}) {
    const std::vector<Span> spans = parse_markup("a " + tag + " b", "en-us");
    ASSERT_EQ(spans.size(), 2u) << tag;
    EXPECT_EQ(spans[0].pause_after_ms, ms) << tag;
    EXPECT_EQ(spans[1].pause_after_ms, 0) << tag;
  }
  // A break before any text has nothing to follow and is dropped.
  const std::vector<Span> leading = parse_markup("<break time=\"1s\"/>Hi", "en-us");
  ASSERT_EQ(leading.size(), 1u);
  EXPECT_EQ(leading[0].pause_after_ms, 0);
  // Breaks in a row add up to at most kMaxBreakMs: 6,000 of 10 s stay one 10 s pause.
  std::string many = "Hi.";
  for (int i = 0; i < 6000; ++i) many += "<break time=\"10s\"/>";
  const std::vector<Span> capped = parse_markup(many, "en-us");
  ASSERT_FALSE(capped.empty());
  EXPECT_EQ(capped.front().pause_after_ms, kMaxBreakMs);
}

TEST(Markup, BadBreaksAndRatesAreInputErrors) {
  EXPECT_EQ(error_of("a <break time=\"5 seconds\"/> b"),
            "<break time=\"5 seconds\">: expected a duration such as 500ms or 1.5s");
  EXPECT_EQ(error_of("<break time=\"-1s\"/>"),
            "<break time=\"-1s\">: expected a duration such as 500ms or 1.5s");
  EXPECT_EQ(error_of("a <break time=\"11s\"/>"),
            "<break time=\"11s\"> is longer than the 10 s a break may last");
  EXPECT_NE(error_of("<break strength=\"huge\"/>").find("expected none, x-weak"),
            std::string::npos);
  EXPECT_NE(error_of("<prosody rate=\"warp\">x</prosody>").find("expected x-slow, slow"),
            std::string::npos);
  EXPECT_EQ(error_of("<prosody rate=\"10\">x</prosody>"),
            "<prosody rate=\"10\"> is outside 0.25 to 4 times the normal rate");
  EXPECT_NE(error_of("<prosody rate=\"nan\">x</prosody>"), "");
  EXPECT_NE(error_of("<prosody rate=\"-100%\">x</prosody>"), "");
}

TEST(Markup, ProsodyRates) {
  for (const auto& [value, rate] : std::vector<std::pair<std::string, float>>{{"x-slow", 0.5f},
                                                                              {"slow", 0.75f},
                                                                              {"fast", 1.25f},
                                                                              {"x-fast", 1.5f},
                                                                              {"150%", 1.5f},
                                                                              {"+20%", 1.2f},
                                                                              {"-20%", 0.8f},
                                                                              {"1.3", 1.3f}}) {
    const std::vector<Span> spans =
        parse_markup("a <prosody rate=\"" + value + "\">b</prosody> c", "en-us");
    ASSERT_EQ(spans.size(), 3u) << value;
    EXPECT_FLOAT_EQ(spans[0].rate, 1.0f) << value;
    EXPECT_FLOAT_EQ(spans[1].rate, rate) << value;
    EXPECT_FLOAT_EQ(spans[2].rate, 1.0f) << value;
  }
  // A rate that changes nothing does not split the text.
  EXPECT_EQ(parse_markup("a <prosody rate=\"medium\">b</prosody> c", "en-us").size(), 1u);
  // Nested rates multiply; the product stays within 0.25 to 4.
  const std::vector<Span> nested =
      parse_markup("<prosody rate=\"2\">a <prosody rate=\"3\">b</prosody> c</prosody> d", "en-us");
  ASSERT_EQ(nested.size(), 4u);
  EXPECT_FLOAT_EQ(nested[0].rate, 2.0f);
  EXPECT_FLOAT_EQ(nested[1].rate, 4.0f);
  EXPECT_FLOAT_EQ(nested[2].rate, 2.0f);
  EXPECT_FLOAT_EQ(nested[3].rate, 1.0f);
  // Pitch and volume are not honoured and do not split the text.
  EXPECT_EQ(parse_markup("a <prosody pitch=\"high\">b</prosody> c", "en-us").size(), 1u);
}

TEST(Markup, SayAsAndSub) {
  EXPECT_EQ(plain("<say-as interpret-as=\"spell-out\">abc</say-as>"), "ay bee see");
  EXPECT_EQ(plain("<say-as interpret-as=\"characters\">R2D2</say-as>"), "ar two dee two");
  EXPECT_EQ(plain("<say-as interpret-as=\"cardinal\">-1,024</say-as>"),
            "minus one thousand twenty-four");
  EXPECT_EQ(plain("<say-as interpret-as=\"ordinal\">22nd</say-as>"), "twenty-second");
  EXPECT_EQ(plain("<say-as interpret-as=\"digits\">1984</say-as>"), "one nine eight four");
  EXPECT_EQ(plain("<say-as interpret-as=\"telephone\">(555) 010-9999</say-as>"),
            "five five five, zero one zero, nine nine nine nine");
  EXPECT_EQ(plain("<say-as interpret-as=\"date\" format=\"mdy\">12/25/2024</say-as>"),
            "December twenty-fifth, twenty twenty-four");
  EXPECT_EQ(plain("<say-as interpret-as=\"date\">2024-12-25</say-as>"),
            "December twenty-fifth, twenty twenty-four");
  EXPECT_EQ(plain("<say-as interpret-as=\"date\" format=\"md\">3/5</say-as>"), "March fifth");
  EXPECT_EQ(plain("<say-as interpret-as=\"date\" format=\"dm\">5/3</say-as>"), "March fifth");
  EXPECT_EQ(plain("<say-as interpret-as=\"date\" format=\"y\">1999</say-as>"),
            "nineteen ninety-nine");
  // Content that does not fit the interpretation is read as written.
  EXPECT_EQ(plain("<say-as interpret-as=\"cardinal\">many</say-as>"), "many");
  EXPECT_EQ(plain("<say-as interpret-as=\"date\" format=\"mdy\">13/45/2024</say-as>"),
            "13/45/2024");
  EXPECT_EQ(plain("<say-as interpret-as=\"unknown\">x1</say-as>"), "x1");
  // Tags inside say-as and sub are dropped; unclosed ones end with the text.
  EXPECT_EQ(plain("<say-as interpret-as=\"characters\">a<b>b</b></say-as>"), "ay bee");
  EXPECT_EQ(plain("<say-as interpret-as=\"characters\">xy"), "ex why");
  EXPECT_EQ(plain("<sub alias=\"Doctor\">Dr.</sub> Who"), "Doctor Who");
  EXPECT_EQ(plain("<sub alias=\"&quot;quoted&quot; &amp; more\">x</sub>"), "\"quoted\" & more");
  EXPECT_EQ(plain("<sub>no alias</sub>"), "no alias");
  EXPECT_EQ(plain("<sub alias=\"unclosed\">hidden"), "unclosed");
  // Other languages keep say-as content as written, for their own eSpeak voice.
  EXPECT_EQ(texts(parse_markup("<say-as interpret-as=\"cardinal\">12</say-as>", "de")), "12");
}

TEST(Markup, HtmlAndMalformedTagsAreNeverRead) {
  EXPECT_EQ(plain("<html><head><title>T</title><style>p{x:1}</style></head><body>"
                  "<p>One</p><div>Two<br>Three</div></body></html>"),
            "One Two Three");
  EXPECT_EQ(plain("x <script type=\"a\">var s = '<b>';</script> y"), "x y");
  EXPECT_EQ(plain("<a href=\"https://x.com/?a=1&b=2\">link</a> text"), "link text");
  EXPECT_EQ(plain("<table><tr><td>a</td><td>b</td></tr></table>"), "a, b,");
  EXPECT_EQ(plain("<?xml version=\"1.0\"?><!DOCTYPE speak><speak>Hi</speak>"), "Hi");
  EXPECT_EQ(plain("<![CDATA[<kept> as text]]> and more"), "<kept> as text and more");
  EXPECT_EQ(plain("open <!-- never closed"), "open");
  EXPECT_EQ(plain("<break time=\"1s\""), "");
  EXPECT_EQ(plain("a <b c=\"unclosed quote> d\ne"), "a e");
  EXPECT_EQ(plain("x <notatag y <b>bold</b>"), "x bold");
  EXPECT_EQ(plain("if a < b and c > d"), "if a < b and c > d");
  EXPECT_EQ(plain("I <3 you"), "I <3 you");
  EXPECT_EQ(plain("<https://example.com/x>"), "https://example.com/x");
  EXPECT_EQ(plain("&lt;b&gt; is a tag"), "<b> is a tag");
  EXPECT_EQ(plain("&#x48;&#105; &#0; &#xD800; &#99999999; &bogus; &amp"), "Hi &bogus; &amp");
  for (const std::string& text : {std::string("<<<<>>>>"), std::string("< / >"), std::string("</>"),
                                  std::string("<a"), std::string("<")}) {
    const std::string result = plain(text);
    EXPECT_EQ(result.find_first_of("abcdefghijklmnopqrstuvwxyz"), std::string::npos) << text;
  }
}

TEST(Markup, Markdown) {
  EXPECT_EQ(plain("*a* **b** ***c*** _d_ __e__ ~~f~~"), "a b c d e f");
  EXPECT_EQ(plain("(*note*), \"*quoted*\""), "(note), \"quoted\"");
  EXPECT_EQ(plain("5 * 3 and 2*3 and snake_case"), "5 * 3 and 2*3 and snake_case");
  EXPECT_EQ(plain("\\*not emphasis\\*"), "*not emphasis*");
  EXPECT_EQ(plain("#hashtag #"), "#hashtag #");
  EXPECT_EQ(plain("###### six"), "six");
  EXPECT_EQ(plain("####### seven"), "####### seven");
  EXPECT_EQ(plain("2024. A good year."), "2024. A good year.");
  EXPECT_EQ(plain("  + plus item"), "plus item");
  EXPECT_EQ(plain("3) third"), "third");
  EXPECT_EQ(plain("> > nested quote"), "nested quote");
  EXPECT_EQ(plain("> - quoted item"), "quoted item");
  EXPECT_EQ(plain("[link][ref] and more\n[ref]: https://example.com \"Title\""), "link and more");
  EXPECT_EQ(plain("[Note]: read this"), "[Note]: read this");
  EXPECT_EQ(plain("[not a link] (x)"), "[not a link] (x)");
  EXPECT_EQ(plain("~~~\nfenced with tildes\n~~~\nafter"), "after");
  EXPECT_EQ(plain("```python\nprint(1)\n"), "");  // an unclosed fence runs to the end
  EXPECT_EQ(plain("use `a < b` here"), "use a < b here");
  EXPECT_EQ(plain("(`<div>` and `&amp;`)"), "(<div> and &amp;)");
  EXPECT_EQ(plain("unmatched ` backtick"), "unmatched backtick");
  EXPECT_EQ(plain("Title\n====="), "Title");
  // An SSML document is not Markdown.
  EXPECT_EQ(plain("<speak>*stars* stay</speak>"), "*stars* stay");
}

// Hostile markup (unclosed brackets, tags and quotes, repeated) costs time in proportion to its
// length: eight times the text takes well under 8² times as long. A ratio, so that a slow build
// (sanitizers) or a busy machine does not fail it, while a quadratic scan does.
TEST(Markup, HostileInputTakesLinearTime) {
  const std::vector<std::string> units = {"[",
                                          "[a](",
                                          "<a ",
                                          "*",
                                          "`",
                                          "&#",
                                          "<!--",
                                          "<say-as>",
                                          "<prosody>",
                                          "</prosody>",
                                          "<break/>",
                                          "\n```",
                                          "<speak><a b=\"",
                                          "<a b='",
                                          "<speak><a b=\"<"};
  const auto seconds_for = [&](size_t bytes) {
    const auto start = std::chrono::steady_clock::now();
    for (const std::string& unit : units) {
      std::string text;
      while (text.size() < bytes) text += unit;
      parse_markup(text, "en-us");
    }
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  };
  seconds_for(16 * 1024);  // warm-up
  const double small = std::max(seconds_for(50 * 1024), 1e-4);
  const double large = seconds_for(400 * 1024);
  EXPECT_LT(large / small, 24.0) << small << " s for 50 KiB, " << large << " s for 400 KiB";
}

}  // namespace
}  // namespace voxd::text
