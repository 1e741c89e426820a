// A voice's admission work for a burst, as voxd serve's admission threads do it: each request's
// text through VoiceDefinition::prepare (normalising, splitting, the front end, the stream's
// work), REQUESTS of them shared by THREADS threads at once. Prints requests per second and the
// mean time of one on each thread count, so that a front end that runs one call at a time (eSpeak
// NG takes a process-wide lock) shows as throughput that does not grow with the threads. The
// texts are stream_load.py --unique's kind: "Ticket N, " and a sentence. --espeak-processes runs
// every thread count again with eSpeak NG in that many worker processes (voxd serve
// --espeak-processes); 0 is the library in this process.
//
//   build/bench/voxd_admission_bench --voice voices/en-demo [--requests 1000] [--threads 1,2]
//       [--espeak-processes 0,2]
#include <CLI/CLI.hpp>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "families/registry.h"
#include "scheduler/family.h"
#include "text/espeak_workers.h"

namespace {

using Clock = std::chrono::steady_clock;

const char* const kSentences[] = {
    "the quick brown fox jumps over the lazy dog.",
    "streaming speech arrives while the rest of the sentence is still being made.",
    "please hold, your call is important to us.",
    "turn left at the next light, then keep right for two miles until you see the bridge.",
};

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"A voice's admission work (the text front end) for a burst, on several threads"};
  std::string voice_dir;
  int requests = 1000;
  std::vector<int> thread_counts = {1, 2};
  bool first_clause_alone = true;
  std::vector<int> espeak_process_counts = {0};
  std::string espeak_worker = VOXD_ESPEAK_WORKER;
  app.add_option("--voice", voice_dir, "Voice directory")->required();
  app.add_option("--requests", requests, "Requests admitted")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app.add_option("--threads", thread_counts, "Thread counts to time, in turn")
      ->delimiter(',')
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app.add_option("--first-clause-alone", first_clause_alone,
                 "As voxd serve --first-clause-alone (true or false)")
      ->capture_default_str();
  app.add_option("--espeak-processes", espeak_process_counts,
                 "eSpeak NG worker process counts to time, in turn (0: in this process)")
      ->delimiter(',')
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  app.add_option("--espeak-worker", espeak_worker, "The voxd-espeak-worker program")
      ->capture_default_str();
  CLI11_PARSE(app, argc, argv);

  try {
    const auto& families = voxd::families::registry();
    const std::unique_ptr<voxd::scheduler::VoiceDefinition> voice =
        families.family_of(voice_dir).read(voice_dir);
    std::vector<std::string> texts;
    for (int i = 0; i < requests; ++i) {
      texts.push_back("Ticket " + std::to_string(i + 1) + ", " +
                      kSentences[static_cast<size_t>(i) % std::size(kSentences)]);
    }
    voxd::scheduler::SchedulerOptions scheduling;
    scheduling.first_clause_alone = first_clause_alone;
    const voxd::scheduler::SpeechOptions options;
    (void)voice->prepare(texts.front(), options, scheduling);  // the front end's first call
    std::printf(
        "| eSpeak processes | threads | requests | seconds | requests/s | ms a request on a thread "
        "|\n");
    std::printf("|---|---|---|---|---|---|\n");
    for (const int process_count : espeak_process_counts) {
      if (process_count > 0) {
        voxd::text::EspeakWorkers::Options workers;
        workers.program = espeak_worker;
        workers.count = process_count;
        voxd::text::use_espeak_workers(std::make_shared<voxd::text::EspeakWorkers>(workers));
      }
      for (const int thread_count : thread_counts) {
        std::atomic<int> next{0};
        const auto start = Clock::now();
        std::vector<std::thread> threads;
        for (int t = 0; t < thread_count; ++t) {
          threads.emplace_back([&] {
            for (int i = next++; i < requests; i = next++) {
              (void)voice->prepare(texts[static_cast<size_t>(i)], options, scheduling);
            }
          });
        }
        for (std::thread& thread : threads) thread.join();
        const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
        std::printf("| %d | %d | %d | %.3f | %.0f | %.3f |\n", process_count, thread_count,
                    requests, seconds, requests / seconds,
                    1000.0 * seconds * thread_count / requests);
      }
      voxd::text::use_espeak_workers(nullptr);
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "voxd_admission_bench: %s\n", e.what());
    return 1;
  }
  return 0;
}
