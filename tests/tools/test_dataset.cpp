// Tests of voxd-dataset: the alignment and WAV header units, the Festival teacher, and datasets
// of a few sentences checked against docs/dataset-format.md (and for determinism).
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/error.h"
#include "text/espeak_front_end.h"
#include "tools/align.h"
#include "tools/festival_teacher.h"
#include "tools/wav.h"

namespace {

namespace fs = std::filesystem;
using voxd::tools::align;
using voxd::tools::AlignRules;
using voxd::tools::PhonemeEvent;

const std::string kSymbols = std::string(VOXD_SOURCE_DIR) + "/data/symbols/espeak-ipa-en.txt";
const std::string kCorpus = std::string(VOXD_SOURCE_DIR) + "/data/corpus/en-sentences.txt";
const std::string kArpabetSymbols =
    std::string(VOXD_SOURCE_DIR) + "/tests/fixtures/voices/tiny-arpabet/symbols.txt";

std::string read_bytes(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream bytes;
  bytes << in.rdbuf();
  return bytes.str();
}

uint32_t u32(const std::string& b, size_t at) {
  uint32_t v = 0;
  for (int i = 3; i >= 0; --i) v = (v << 8) | static_cast<uint8_t>(b[at + i]);
  return v;
}

uint16_t u16(const std::string& b, size_t at) {
  return static_cast<uint16_t>(static_cast<uint8_t>(b[at]) | static_cast<uint8_t>(b[at + 1]) << 8);
}

// Runs voxd-dataset with `args`; returns its exit status.
int run_tool(const std::string& args) {
  const int status = std::system((std::string(VOXD_DATASET_BIN) + " " + args).c_str());
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

TEST(DatasetAlign, SplitsAudioAtPhonemeEventsAndGivesPausesToPunctuation) {
  // "ab, c." with a pause after b: a [0,512) b [512,1024) pause [1024,1536) c [1536,2048).
  const std::vector<std::string> tokens = {"a", "ˈ", "b", ",", " ", "c", "."};
  const std::vector<PhonemeEvent> events = {
      {"a", 100}, {"b", 512}, {"", 1024}, {"c", 1536}, {"", 2048}};
  const auto result = align(tokens, events, 2100, 256, {});
  EXPECT_EQ(result.durations, (std::vector<int64_t>{2, 0, 2, 2, 0, 2, 0}));
  EXPECT_EQ(result.extra_phonemes, 0u);
}

TEST(DatasetAlign, PauseWithoutPunctuationGoesToTheWordBoundary) {
  const std::vector<std::string> tokens = {"a", " ", "b"};
  const auto result = align(tokens, {{"a", 0}, {"", 512}, {"b", 768}}, 1024, 256, {});
  EXPECT_EQ(result.durations, (std::vector<int64_t>{2, 1, 1}));
}

TEST(DatasetAlign, VoicedTokenRoundedToZeroTakesAFrameFromItsNeighbour) {
  // b lasts 50 samples: its boundaries round to the same frame.
  const std::vector<std::string> tokens = {"a", "b", "."};
  const auto result = align(tokens, {{"a", 0}, {"b", 1000}, {"", 1050}}, 2048, 256, {});
  EXPECT_EQ(result.durations, (std::vector<int64_t>{3, 1, 4}));
  EXPECT_EQ(result.frames_moved, 1u);
}

TEST(DatasetAlign, TonedTokensMatchTheTeachersTonelessPhonemes) {
  // eSpeak's Mandarin events name the vowel without its tone, and "_|" pauses arrive as "".
  const std::vector<std::string> tokens = {"m", "ˈ", "A55", " ", "m", "ˈ", "A51", "."};
  const std::vector<PhonemeEvent> events = {{"m", 0},    {"A", 256},  {"", 768},
                                            {"m", 1024}, {"A", 1280}, {"", 1792}};
  const auto result = align(tokens, events, 2048, 256, {});
  EXPECT_EQ(result.durations, (std::vector<int64_t>{1, 0, 2, 1, 1, 0, 2, 1}));
  EXPECT_THROW(align({"m", "A55"}, {{"m", 0}, {"A5", 256}}, 512, 256, {}), voxd::InputError);
}

TEST(DatasetAlign, RejectsMismatchedPhonemesAndLimitsExtras) {
  const std::vector<std::string> tokens = {"a", "b"};
  EXPECT_THROW(align(tokens, {{"a", 0}, {"c", 512}}, 1024, 256, {}), voxd::InputError);
  const std::vector<PhonemeEvent> extra = {{"a", 0}, {"x", 256}, {"b", 512}};
  EXPECT_THROW(align(tokens, extra, 1024, 256, {}), voxd::InputError);
  const auto result = align(tokens, extra, 1024, 256, {.max_extra_phonemes = 1});
  EXPECT_EQ(result.durations, (std::vector<int64_t>{2, 2}));
  EXPECT_EQ(result.extra_phonemes, 1u);
}

TEST(DatasetAlign, ArpabetTokensMatchTheTeachersUnstressedNames) {
  // "HH IY1 sp" against Festival's "pau hh iy pau".
  const std::vector<std::string> tokens = {"HH", "IY1", "sp"};
  const auto result = align(tokens, {{"", 0}, {"HH", 256}, {"IY", 512}, {"", 1024}}, 1280, 256, {});
  EXPECT_EQ(result.durations, (std::vector<int64_t>{2, 2, 1}));
  EXPECT_EQ(result.substitutions, 0u);
  EXPECT_THROW(align({"IY1"}, {{"EY", 0}}, 512, 256, {}), voxd::InputError);
}

TEST(DatasetAlign, SubstitutionsPairVowelWithVowelAndConsonantWithConsonantWithinTheLimit) {
  // "P AA2 S IH0 B" said as "p aa s ax b": IH0 as AH0.
  const std::vector<std::string> tokens = {"P", "AA2", "S", "IH0", "B"};
  const std::vector<PhonemeEvent> events = {
      {"P", 0}, {"AA", 256}, {"S", 512}, {"AH0", 768}, {"B", 1024}};
  EXPECT_THROW(align(tokens, events, 1280, 256, {}), voxd::InputError);
  const auto result = align(tokens, events, 1280, 256, {.max_substitutions = 1});
  EXPECT_EQ(result.durations, (std::vector<int64_t>{1, 1, 1, 1, 1}));
  EXPECT_EQ(result.substitutions, 1u);
  EXPECT_EQ(result.extra_phonemes, 0u);
  // A vowel never stands for a consonant: IH0 against Z is an extra phoneme and a missing token.
  const std::vector<PhonemeEvent> consonant = {
      {"P", 0}, {"AA", 256}, {"S", 512}, {"Z", 768}, {"B", 1024}};
  EXPECT_THROW(align(tokens, consonant, 1280, 256, {.max_substitutions = 5}), voxd::InputError);
  const auto apart = align(tokens, consonant, 1280, 256,
                           {.max_extra_phonemes = 1, .max_substitutions = 5, .max_missing = 1});
  EXPECT_EQ(apart.substitutions, 0u);
  EXPECT_EQ(apart.extra_phonemes, 1u);
  EXPECT_EQ(apart.missing_phonemes, 1u);
  // Two substitutions where one is allowed.
  const std::vector<PhonemeEvent> two = {
      {"P", 0}, {"AO", 256}, {"S", 512}, {"AH0", 768}, {"B", 1024}};
  EXPECT_THROW(align(tokens, two, 1280, 256, {.max_substitutions = 1}), voxd::InputError);
}

TEST(DatasetAlign, AMissingTokenTakesAFrameFromItsNeighbour) {
  // "T IY0 Z" said as "t z": IY0 gets no audio of its own, then a frame of T's.
  const std::vector<std::string> tokens = {"T", "IY0", "Z"};
  const std::vector<PhonemeEvent> events = {{"T", 0}, {"Z", 768}};
  EXPECT_THROW(align(tokens, events, 1536, 256, {}), voxd::InputError);
  const auto result = align(tokens, events, 1536, 256, {.max_missing = 1});
  EXPECT_EQ(result.durations, (std::vector<int64_t>{2, 1, 3}));
  EXPECT_EQ(result.missing_phonemes, 1u);
  EXPECT_EQ(result.frames_moved, 1u);
}

TEST(FestivalTeacher, NamesSegmentsInArpabet) {
  EXPECT_EQ(voxd::tools::festival_phoneme("pau"), "");
  EXPECT_EQ(voxd::tools::festival_phoneme("ax"), "AH0");
  EXPECT_EQ(voxd::tools::festival_phoneme("hh"), "HH");
  EXPECT_EQ(voxd::tools::festival_phoneme("iy"), "IY");
}

TEST(FestivalTeacher, SpeaksWithSltAndItsSegmentsAlignWithTheArpabetFrontEnd) {
  const fs::path scratch = fs::temp_directory_path();
  voxd::tools::FestivalTeacher teacher("cmu_us_slt_arctic_hts", scratch.string());
  EXPECT_TRUE(teacher.description().starts_with("festival 2.")) << teacher.description();
  EXPECT_TRUE(teacher.description().ends_with(" cmu_us_slt_arctic_hts"));
  const voxd::text::SymbolTable table = voxd::text::SymbolTable::load(kArpabetSymbols);
  const voxd::text::EspeakFrontEnd front_end(voxd::text::PhonemeSet::Arpabet, table);
  const auto sentences = front_end.process("He is up by a pawn, I think.");
  ASSERT_EQ(sentences.size(), 1u);
  const voxd::tools::Utterance said = teacher.speak(sentences[0].text);
  // About 2 s of speech at 22,050 Hz, events in order within it, a pause first and last.
  EXPECT_GT(said.audio.size(), 22050u);
  EXPECT_LT(said.audio.size(), 4u * 22050u);
  ASSERT_GE(said.events.size(), 10u);
  EXPECT_EQ(said.events.front().name, "");
  EXPECT_EQ(said.events.back().name, "");
  for (size_t i = 1; i < said.events.size(); ++i) {
    EXPECT_LE(said.events[i - 1].sample, said.events[i].sample);
  }
  EXPECT_LE(said.events.back().sample, static_cast<int64_t>(said.audio.size()));
  int peak = 0;
  for (int16_t s : said.audio) peak = std::max(peak, std::abs(static_cast<int>(s)));
  EXPECT_GT(peak, 3000);  // speech, not silence
  const auto alignment =
      align(sentences[0].phonemes, said.events, static_cast<int64_t>(said.audio.size()), 256,
            {.max_extra_phonemes = 2, .max_substitutions = 3, .max_missing = 2});
  int64_t frames = 0;
  for (int64_t d : alignment.durations) frames += d;
  EXPECT_EQ(frames, static_cast<int64_t>(said.audio.size()) / 256);
  // The same sentence again gives the same samples (the dataset must not depend on the order).
  EXPECT_EQ(teacher.speak(sentences[0].text).audio, said.audio);
}

TEST(FestivalTeacher, AnUnknownVoiceIsAnInputErrorNamingIt) {
  try {
    voxd::tools::FestivalTeacher teacher("no_such_voice", fs::temp_directory_path().string());
    FAIL() << "no error";
  } catch (const voxd::InputError& e) {
    EXPECT_NE(std::string(e.what()).find("no_such_voice"), std::string::npos) << e.what();
  }
}

TEST(DatasetWav, HeaderIsCanonicalMono16BitPcm) {
  const auto h = voxd::tools::wav_header(1000, 22050);
  const std::string b(h.begin(), h.end());
  EXPECT_EQ(b.substr(0, 4), "RIFF");
  EXPECT_EQ(u32(b, 4), 36u + 2000u);
  EXPECT_EQ(b.substr(8, 8), "WAVEfmt ");
  EXPECT_EQ(u32(b, 16), 16u);
  EXPECT_EQ(u16(b, 20), 1);
  EXPECT_EQ(u16(b, 22), 1);
  EXPECT_EQ(u32(b, 24), 22050u);
  EXPECT_EQ(u32(b, 28), 44100u);
  EXPECT_EQ(u16(b, 32), 2);
  EXPECT_EQ(u16(b, 34), 16);
  EXPECT_EQ(b.substr(36, 4), "data");
  EXPECT_EQ(u32(b, 40), 2000u);
}

TEST(DatasetWav, ReadsBackWhatItWritesAndRefusesOtherFormats) {
  const fs::path path = fs::temp_directory_path() / ("voxd-wav-" + std::to_string(::getpid()));
  const std::vector<int16_t> audio = {0, 1, -1, 32767, -32768, 1234};
  voxd::tools::write_wav(path.string(), audio, 32000);
  int rate = 0;
  EXPECT_EQ(voxd::tools::read_wav(path.string(), rate), audio);
  EXPECT_EQ(rate, 32000);
  // A stereo header: the channel count is named in the error.
  std::string bytes = read_bytes(path);
  bytes[22] = 2;
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
  try {
    voxd::tools::read_wav(path.string(), rate);
    ADD_FAILURE() << "no error";
  } catch (const voxd::Error& e) {
    EXPECT_NE(std::string(e.what()).find("2 channels"), std::string::npos) << e.what();
  }
  std::ofstream(path, std::ios::binary | std::ios::trunc) << "RIFF";
  EXPECT_THROW(voxd::tools::read_wav(path.string(), rate), voxd::Error);
  fs::remove(path);
}

class DatasetTool : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("voxd-dataset-test-" + std::to_string(::getpid()));
    fs::remove_all(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  fs::path dir_;
};

TEST_F(DatasetTool, TenSentencesFollowTheFormat) {
  const fs::path out = dir_ / "a";
  ASSERT_EQ(run_tool("--corpus " + kCorpus + " --symbols " + kSymbols + " --out " + out.string() +
                     " --limit 10 --jobs 2"),
            0);

  const auto info = nlohmann::json::parse(read_bytes(out / "info.json"));
  EXPECT_EQ(info.at("sample_rate"), 22050);
  EXPECT_EQ(info.at("hop_length"), 256);
  EXPECT_EQ(info.at("teacher"), "espeak-ng 1.51 en-us");
  EXPECT_EQ(info.at("symbols"), kSymbols);
  EXPECT_EQ(info.at("count"), 10);

  const voxd::text::SymbolTable table = voxd::text::SymbolTable::load(kSymbols);
  const voxd::text::EspeakFrontEnd front_end(voxd::text::PhonemeSet::EspeakIpa, table);
  std::ifstream manifest(out / "manifest.jsonl");
  std::string line, previous_id;
  size_t count = 0, voiced_total = 0;
  int64_t samples_total = 0;
  while (std::getline(manifest, line)) {
    const auto entry = nlohmann::json::parse(line);
    SCOPED_TRACE(line);
    const std::string id = entry.at("id");
    EXPECT_GT(id, previous_id);
    previous_id = id;
    const auto phonemes = entry.at("phonemes").get<std::vector<std::string>>();
    const auto ids = entry.at("ids").get<std::vector<int64_t>>();
    const auto durations = entry.at("durations").get<std::vector<int64_t>>();
    const int64_t frames = entry.at("frames"), samples = entry.at("samples");

    const auto sentences = front_end.process(entry.at("text").get<std::string>());
    ASSERT_EQ(sentences.size(), 1u);
    EXPECT_EQ(entry.at("normalized"), sentences[0].text);
    EXPECT_EQ(phonemes, sentences[0].phonemes);
    ASSERT_EQ(ids.size(), phonemes.size());
    ASSERT_EQ(durations.size(), phonemes.size());
    int64_t sum = 0;
    for (size_t i = 0; i < phonemes.size(); ++i) {
      EXPECT_EQ(table.symbol(ids[i]), phonemes[i]);
      EXPECT_GE(durations[i], 0);
      if (voxd::tools::is_voiced(phonemes[i])) {
        EXPECT_GT(durations[i], 0) << "token " << i << " '" << phonemes[i] << "'";
        ++voiced_total;
      } else if (phonemes[i] == "ˈ" || phonemes[i] == "ˌ") {
        EXPECT_EQ(durations[i], 0);
      }
      sum += durations[i];
    }
    EXPECT_EQ(sum, frames);
    EXPECT_EQ(frames, samples / 256);

    EXPECT_EQ(entry.at("wav"), "wavs/" + id + ".wav");
    const std::string wav = read_bytes(out / entry.at("wav").get<std::string>());
    ASSERT_EQ(wav.size(), 44 + 2 * static_cast<size_t>(samples));
    EXPECT_EQ(wav.substr(0, 4), "RIFF");
    EXPECT_EQ(u16(wav, 20), 1);  // PCM
    EXPECT_EQ(u16(wav, 22), 1);  // mono
    EXPECT_EQ(u32(wav, 24), 22050u);
    EXPECT_EQ(u16(wav, 34), 16);
    EXPECT_EQ(u32(wav, 40), 2 * static_cast<uint32_t>(samples));
    samples_total += samples;
    ++count;
  }
  EXPECT_EQ(count, 10u);
  const double seconds_per_phoneme = static_cast<double>(samples_total) / 22050.0 / voiced_total;
  EXPECT_GT(seconds_per_phoneme, 0.03);
  EXPECT_LT(seconds_per_phoneme, 0.5);

  // eSpeak is deterministic, and the sharding does not change the output.
  const fs::path again = dir_ / "b";
  ASSERT_EQ(run_tool("--corpus " + kCorpus + " --symbols " + kSymbols + " --out " + again.string() +
                     " --limit 10 --jobs 1"),
            0);
  for (const auto& file : fs::recursive_directory_iterator(out)) {
    if (!file.is_regular_file()) continue;
    const fs::path relative = fs::relative(file.path(), out);
    EXPECT_TRUE(read_bytes(file.path()) == read_bytes(again / relative)) << relative;
  }
  size_t files = 0;
  for (const auto& file : fs::recursive_directory_iterator(again)) files += file.is_regular_file();
  EXPECT_EQ(files, 12u);  // 10 WAVs, manifest.jsonl, info.json
}

TEST_F(DatasetTool, FestivalSentencesFollowTheFormatWhateverTheJobs) {
  const std::string options = " --teacher festival --phonemes arpabet --symbols " +
                              kArpabetSymbols + " --corpus " + kCorpus +
                              " --limit 3 --max-extra-phonemes 3 --max-substitutions 6 "
                              "--max-missing 3 --out ";
  const fs::path two = dir_ / "two", one = dir_ / "one";
  ASSERT_EQ(run_tool(options + two.string() + " --jobs 2"), 0);
  ASSERT_EQ(run_tool(options + one.string() + " --jobs 1"), 0);
  const auto info = nlohmann::json::parse(read_bytes(two / "info.json"));
  EXPECT_EQ(info.at("sample_rate"), 22050);
  EXPECT_TRUE(info.at("teacher").get<std::string>().starts_with("festival 2."));
  EXPECT_TRUE(info.at("teacher").get<std::string>().ends_with(" cmu_us_slt_arctic_hts"));
  EXPECT_EQ(info.at("count"), 3);
  std::ifstream manifest(two / "manifest.jsonl");
  size_t lines = 0;
  for (std::string line; std::getline(manifest, line); ++lines) {
    const auto entry = nlohmann::json::parse(line);
    SCOPED_TRACE(line);
    const auto phonemes = entry.at("phonemes").get<std::vector<std::string>>();
    const auto durations = entry.at("durations").get<std::vector<int64_t>>();
    ASSERT_EQ(durations.size(), phonemes.size());
    int64_t sum = 0;
    for (size_t i = 0; i < phonemes.size(); ++i) {
      if (voxd::tools::is_voiced(phonemes[i])) {
        EXPECT_GT(durations[i], 0) << phonemes[i];
      }
      sum += durations[i];
    }
    EXPECT_EQ(sum, entry.at("frames").get<int64_t>());
    EXPECT_EQ(phonemes.back(), "sp");  // ARPAbet tokens, the final pause its own
  }
  EXPECT_EQ(lines, 3u);
  // Festival's output does not depend on what a worker said before: the same bytes either way.
  for (const auto& file : fs::recursive_directory_iterator(two)) {
    if (!file.is_regular_file()) continue;
    const fs::path relative = fs::relative(file.path(), two);
    EXPECT_TRUE(read_bytes(file.path()) == read_bytes(one / relative)) << relative;
  }
}

TEST_F(DatasetTool, FestivalWithAPhonemeSetOtherThanArpabetIsRefused) {
  EXPECT_EQ(
      run_tool("--teacher festival --phonemes espeak-ipa --symbols " + kSymbols + " --corpus " +
               kCorpus + " --limit 1 --out " + (dir_ / "d").string() + " 2>/dev/null"),
      2);
}

TEST_F(DatasetTool, MissingCorpusIsAnInputErrorNamingTheFile) {
  EXPECT_EQ(run_tool("--corpus " + (dir_ / "nope.txt").string() + " --symbols " + kSymbols +
                     " --out " + (dir_ / "c").string() + " 2>/dev/null"),
            2);
}

}  // namespace
