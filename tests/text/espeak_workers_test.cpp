// eSpeak NG in worker processes: the same phonemes as the library in this process, from many
// threads at once, and a worker that crashes, hangs or answers nonsense replaced without taking
// the caller down.
#include "text/espeak_workers.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "core/error.h"
#include "text/phonemizer.h"

namespace voxd::text {
namespace {

namespace fs = std::filesystem;

const std::vector<std::string> kSentences = {
    "The quick brown fox jumps over the lazy dog.",
    "Ticket 42, please hold; your call is important to us!",
    "\"Well,\" she said - twice - (quietly) \"it's 3:15 already?\"",
    "Streaming speech arrives while the rest of the sentence is still being made.",
};

struct Phonemes {
  std::vector<std::string> ipa, mnemonic, arpabet;
  bool operator==(const Phonemes&) const = default;
};

Phonemes phonemize(const Phonemizer& phonemizer, const std::string& sentence) {
  return {phonemizer.phonemize_ipa(sentence, "en-us"),
          phonemizer.phonemize_mnemonic(sentence, "en-us"),
          phonemizer.phonemize_arpabet(sentence, "en-us")};
}

EspeakWorkers::Options worker_options(int count) {
  EspeakWorkers::Options options;
  options.program = VOXD_ESPEAK_WORKER;
  options.count = count;
  return options;
}

// Routes this process's eSpeak calls to `workers` for the test's length.
class UsingWorkers {
 public:
  explicit UsingWorkers(std::shared_ptr<EspeakWorkers> workers) { use_espeak_workers(workers); }
  ~UsingWorkers() { use_espeak_workers(nullptr); }
};

// A stand-in worker: a shell script that reads the ready check (a frame of 16 bytes: its length,
// the phoneme mode, an empty language and no clauses) and answers it, then does `then`; `then`
// starts with nothing of the ready check left to read.
fs::path script_worker(const std::string& name, const std::string& then) {
  const fs::path path = fs::path(testing::TempDir()) / ("voxd-fake-worker-" + name);
  std::ofstream(path) << "#!/bin/sh\n"
                      << "head -c 16 >/dev/null\n"
                      << "printf '\\005\\000\\000\\000\\000\\000\\000\\000\\000'\n"
                      << then << "\n";
  fs::permissions(path, fs::perms::owner_all);
  return path;
}

// Expects `call` to throw an E whose message contains `part`.
template <typename E, typename Call>
void expect_throws(Call call, const std::string& part) {
  try {
    call();
  } catch (const E& e) {
    EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
    return;
  }
  ADD_FAILURE() << "expected an exception naming \"" << part << "\"";
}

TEST(EspeakWorkers, GiveWhatTheLibraryInThisProcessGives) {
  const Phonemizer phonemizer;
  std::vector<Phonemes> in_process;
  for (const std::string& sentence : kSentences) {
    in_process.push_back(phonemize(phonemizer, sentence));
  }
  const std::vector<std::string> mandarin =
      phonemizer.phonemize_mnemonic("ni3 hao3, huar1.", "cmn-latn-pinyin");
  ASSERT_FALSE(in_process.front().ipa.empty());

  const auto workers = std::make_shared<EspeakWorkers>(worker_options(2));
  UsingWorkers using_workers(workers);
  for (size_t i = 0; i < kSentences.size(); ++i) {
    EXPECT_EQ(phonemize(phonemizer, kSentences[i]), in_process[i]) << kSentences[i];
  }
  EXPECT_EQ(phonemizer.phonemize_mnemonic("ni3 hao3, huar1.", "cmn-latn-pinyin"), mandarin);
  EXPECT_EQ(workers->replaced(), 0);
  for (const pid_t pid : workers->pids()) EXPECT_GT(pid, 0);
}

TEST(EspeakWorkers, ServeManyThreadsAtOnce) {
  const Phonemizer phonemizer;
  std::vector<Phonemes> in_process;
  for (const std::string& sentence : kSentences) {
    in_process.push_back(phonemize(phonemizer, sentence));
  }
  UsingWorkers using_workers(std::make_shared<EspeakWorkers>(worker_options(2)));
  std::vector<int> mismatches(4, 0);
  std::vector<std::thread> threads;
  for (size_t t = 0; t < mismatches.size(); ++t) {
    threads.emplace_back([&, t] {
      for (size_t i = 0; i < 40; ++i) {
        const size_t k = (i + t) % kSentences.size();
        if (!(phonemize(phonemizer, kSentences[k]) == in_process[k])) ++mismatches[t];
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  EXPECT_EQ(mismatches, std::vector<int>(4, 0));
}

TEST(EspeakWorkers, AnUnknownLanguageIsAnInputErrorAndTheWorkerGoesOn) {
  EspeakWorkers workers(worker_options(1));
  const pid_t pid = workers.pids().at(0);
  expect_throws<InputError>([&] { workers.phonemes({"hello"}, "no-such-language", 0); },
                            "no-such-language");
  EXPECT_EQ(workers.phonemes({"hello"}, "en-us", 0).size(), 1u);
  EXPECT_EQ(workers.pids().at(0), pid);
  EXPECT_EQ(workers.replaced(), 0);
}

TEST(EspeakWorkers, AKilledWorkerIsReplacedAndTheCallAnswered) {
  EspeakWorkers::Options options = worker_options(1);
  std::vector<std::string> reports;
  options.on_replaced = [&reports](const std::string& what) { reports.push_back(what); };
  EspeakWorkers workers(options);
  const std::vector<std::string> before = workers.phonemes({"hello world"}, "en-us", 0);
  const pid_t pid = workers.pids().at(0);
  ASSERT_EQ(::kill(pid, SIGKILL), 0);
  EXPECT_EQ(workers.phonemes({"hello world"}, "en-us", 0), before);
  EXPECT_EQ(workers.replaced(), 1);
  EXPECT_NE(workers.pids().at(0), pid);
  ASSERT_EQ(reports.size(), 1u);
  // Found dead before the call, or dying under it: either way, which worker and how it ended.
  EXPECT_NE(reports[0].find("worker " + std::to_string(pid) + " "), std::string::npos)
      << reports[0];
  EXPECT_NE(reports[0].find("killed by signal 9"), std::string::npos) << reports[0];
}

TEST(EspeakWorkers, TextThatKillsTheWorkerTwiceIsAnInputError) {
  // Answers the ready check, then exits at the first byte of the next request.
  EspeakWorkers::Options options = worker_options(1);
  options.program = script_worker("dies", "exec head -c 1 >/dev/null");
  EspeakWorkers workers(options);
  for (int call = 1; call <= 2; ++call) {
    expect_throws<InputError>([&] { workers.phonemes({"hello"}, "en-us", 0); }, "died on it twice");
    EXPECT_EQ(workers.replaced(), 2 * call);
  }
}

TEST(EspeakWorkers, AReplacementThatCannotStartIsReportedAndAnError) {
  // Removes its own program once started, then dies at the first request: its replacement has
  // no program to run.
  EspeakWorkers::Options options = worker_options(1);
  options.program = script_worker("vanishes", "rm -f \"$0\"\nexec head -c 1 >/dev/null");
  std::vector<std::string> reports;
  options.on_replaced = [&reports](const std::string& what) { reports.push_back(what); };
  EspeakWorkers workers(options);
  expect_throws<Error>([&] { workers.phonemes({"hello"}, "en-us", 0); },
                       "cannot start the eSpeak NG worker");
  ASSERT_EQ(reports.size(), 2u);
  EXPECT_NE(reports[0].find("died during a call"), std::string::npos) << reports[0];
  EXPECT_NE(reports[1].find("could not be started again"), std::string::npos) << reports[1];
  EXPECT_EQ(workers.pids().at(0), 0);
}

TEST(EspeakWorkers, AWorkerThatHangsIsKilledAfterTheTimeout) {
  EspeakWorkers::Options options = worker_options(1);
  options.program = script_worker("hangs", "exec sleep 60");
  options.timeout = std::chrono::milliseconds(300);
  std::vector<std::string> reports;
  options.on_replaced = [&reports](const std::string& what) { reports.push_back(what); };
  EspeakWorkers workers(options);
  const pid_t pid = workers.pids().at(0);
  expect_throws<Error>([&] { workers.phonemes({"hello"}, "en-us", 0); }, "longer than 300 ms");
  EXPECT_EQ(workers.replaced(), 1);
  EXPECT_EQ(workers.pids().at(0), 0);
  EXPECT_NE(::kill(pid, 0), 0) << "the hung worker was not killed";
  ASSERT_EQ(reports.size(), 1u);
  EXPECT_NE(reports[0].find("hung over a call (killed by signal 9"), std::string::npos)
      << reports[0];
  // A request larger than the socket's buffer, to a worker that does not read: the write, too,
  // gives up at the deadline, not when the worker ends (its sleep of 60 s).
  const auto started = std::chrono::steady_clock::now();
  expect_throws<Error>([&] { workers.phonemes({std::string(8 << 20, 'a')}, "en-us", 0); },
                       "longer than 300 ms");
  EXPECT_LT(std::chrono::steady_clock::now() - started, std::chrono::seconds(30))
      << "the write waited for the worker rather than for its deadline";
  EXPECT_EQ(workers.replaced(), 2);
}

TEST(EspeakWorkers, AProgramThatIsNoWorkerIsRefusedAtStart) {
  EspeakWorkers::Options options = worker_options(1);
  options.program = "/nonexistent/voxd-espeak-worker";
  expect_throws<Error>([&] { EspeakWorkers{options}; }, "/nonexistent/voxd-espeak-worker");
  options.program = "/bin/true";
  EXPECT_THROW(EspeakWorkers{options}, Error);
  const fs::path nonsense = fs::path(testing::TempDir()) / "voxd-fake-worker-nonsense";
  std::ofstream(nonsense) << "#!/bin/sh\nprintf '\\001\\000\\000\\000\\007'\nexec sleep 60\n";
  fs::permissions(nonsense, fs::perms::owner_all);
  options.program = nonsense;
  expect_throws<Error>([&] { EspeakWorkers{options}; }, "not an answer");
}

// The worker's loop on a socket pair, in this process.
class WorkerLoop : public testing::Test {
 protected:
  void SetUp() override {
    ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM, 0, ends_), 0);
    loop_ = std::thread([this] { status_ = serve_espeak_requests(ends_[1], ends_[1]); });
  }
  void TearDown() override {
    if (loop_.joinable()) finish();
    ::close(ends_[1]);
  }
  void send(const std::string& bytes) {
    ASSERT_EQ(::write(ends_[0], bytes.data(), bytes.size()), static_cast<ssize_t>(bytes.size()));
  }
  // Closes this end and waits for the loop.
  int finish() {
    ::shutdown(ends_[0], SHUT_WR);
    loop_.join();
    ::close(ends_[0]);
    return status_;
  }
  static std::string u32(uint32_t value) {
    return std::string(reinterpret_cast<const char*>(&value), sizeof value);
  }

  int ends_[2] = {-1, -1};
  std::thread loop_;
  int status_ = -1;
};

TEST_F(WorkerLoop, EndsWellWhenItsInputEnds) {
  EXPECT_EQ(finish(), 0);
}

TEST_F(WorkerLoop, AFrameTooLongIsNotARequest) {
  send(u32(0xFFFFFFFFu));
  EXPECT_EQ(finish(), 1);
}

TEST_F(WorkerLoop, APayloadThatIsNotARequestEndsIt) {
  // A clause count far beyond the bytes that follow.
  const std::string payload = u32(0) + u32(5) + "en-us" + u32(1000000);
  send(u32(static_cast<uint32_t>(payload.size())) + payload);
  EXPECT_EQ(finish(), 1);
}

TEST_F(WorkerLoop, AnswersARequest) {
  const std::string payload = u32(0) + u32(5) + "en-us" + u32(1) + u32(5) + "hello";
  send(u32(static_cast<uint32_t>(payload.size())) + payload);
  uint32_t length = 0;
  ASSERT_EQ(::read(ends_[0], &length, sizeof length), static_cast<ssize_t>(sizeof length));
  std::string answer(length, '\0');
  size_t got = 0;
  while (got < length) {
    const ssize_t n = ::read(ends_[0], answer.data() + got, length - got);
    ASSERT_GT(n, 0);
    got += static_cast<size_t>(n);
  }
  ASSERT_GE(answer.size(), 9u);
  EXPECT_EQ(answer[0], '\0');  // an answer, not an error
  uint32_t count = 0;
  std::memcpy(&count, answer.data() + 1, sizeof count);
  EXPECT_EQ(count, 1u);
  EXPECT_NE(answer.find('h'), std::string::npos) << "hello's phonemes start with h";
  EXPECT_EQ(finish(), 0);
}

}  // namespace
}  // namespace voxd::text
