#include "tools/dataset.h"

#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <vector>

#include "core/error.h"
#include "core/file_write.h"
#include "text/mandarin/espeak_front_end.h"
#include "tools/align.h"
#include "tools/fd_write.h"
#include "tools/festival_teacher.h"
#include "tools/teacher.h"
#include "tools/wav.h"

namespace voxd::tools {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::ordered_json;

struct CorpusLine {
  size_t line;  // 1-based, for messages
  std::string text;
};

std::vector<CorpusLine> read_corpus(const std::string& path, size_t limit) {
  std::ifstream in(path);
  if (!in) throw InputError(path + ": cannot open the corpus");
  std::vector<CorpusLine> lines;
  std::string text;
  for (size_t number = 1; std::getline(in, text) && (limit == 0 || lines.size() < limit);
       ++number) {
    if (!text.empty() && text.back() == '\r') text.pop_back();
    if (text.find_first_not_of(" \t") == std::string::npos) continue;
    lines.push_back({number, text});
  }
  if (in.bad()) throw InputError(path + ": read error");
  if (lines.empty()) throw InputError(path + ": the corpus has no sentences");
  return lines;
}

std::string utterance_id(size_t index) {
  std::string id = std::to_string(index);
  return std::string(id.size() < 6 ? 6 - id.size() : 0, '0') + id;
}

std::string part_path(const std::string& out, size_t shard, const char* what) {
  return (fs::path(out) / (".part-" + std::to_string(shard) + "." + what)).string();
}

json report_json(const DatasetReport& r) {
  return {{"sentences", r.sentences},
          {"written", r.written},
          {"dropped_front_end", r.dropped_front_end},
          {"dropped_split", r.dropped_split},
          {"dropped_symbols", r.dropped_symbols},
          {"dropped_alignment", r.dropped_alignment},
          {"extra_phonemes", r.extra_phonemes},
          {"substitutions", r.substitutions},
          {"missing_phonemes", r.missing_phonemes},
          {"frames_moved", r.frames_moved},
          {"samples", r.samples}};
}

void add_report(DatasetReport& total, const json& r) {
  total.sentences += r.at("sentences").get<size_t>();
  total.written += r.at("written").get<size_t>();
  total.dropped_front_end += r.at("dropped_front_end").get<size_t>();
  total.dropped_split += r.at("dropped_split").get<size_t>();
  total.dropped_symbols += r.at("dropped_symbols").get<size_t>();
  total.dropped_alignment += r.at("dropped_alignment").get<size_t>();
  total.extra_phonemes += r.at("extra_phonemes").get<size_t>();
  total.substitutions += r.at("substitutions").get<size_t>();
  total.missing_phonemes += r.at("missing_phonemes").get<size_t>();
  total.frames_moved += r.at("frames_moved").get<size_t>();
  total.samples += r.at("samples").get<int64_t>();
}

std::unique_ptr<Teacher> make_teacher(const DatasetOptions& options) {
  switch (options.teacher) {
    case TeacherKind::kEspeak:
      return std::make_unique<EspeakTeacher>(text::mandarin::teacher_voice(options.language),
                                             options.phonemes);
    case TeacherKind::kFestival:
      return std::make_unique<FestivalTeacher>(options.festival_voice, options.out,
                                               options.festival_command);
  }
  throw Error("unknown teacher");
}

// One worker: front end and teacher for the sentences it is given.
class Worker {
 public:
  Worker(const DatasetOptions& options, const text::SymbolTable& symbols)
      : options_(options),
        front_end_(text::mandarin::make_phoneme_front_end(options.phonemes, symbols,
                                                          options.language, "teacher")),
        teacher_(make_teacher(options)) {}

  const Teacher& teacher() const { return *teacher_; }

  // The manifest line for sentence `index`, or nullopt (counted and reported) when dropped.
  std::optional<json> process(size_t index, const CorpusLine& line, DatasetReport& report) {
    ++report.sentences;
    auto drop = [&](size_t& counter, const std::string& why) {
      ++counter;
      std::fprintf(stderr, "%s:%zu: dropped: %s\n", options_.corpus.c_str(), line.line,
                   why.c_str());
      return std::nullopt;
    };
    std::vector<text::Sentence> sentences;
    try {
      sentences = front_end_->process(line.text);
    } catch (const InputError& e) {
      return drop(report.dropped_front_end, e.what());
    }
    if (sentences.size() != 1) {
      return drop(report.dropped_split, "the front end splits it into " +
                                            std::to_string(sentences.size()) +
                                            " sentences; put each on its own line");
    }
    const text::Sentence& sentence = sentences.front();
    if (sentence.dropped > 0) {
      return drop(report.dropped_symbols, std::to_string(sentence.dropped) +
                                              " phonemes have no symbol in " + options_.symbols);
    }
    const Utterance utterance = teacher_->speak(sentence.text);
    const auto samples = static_cast<int64_t>(utterance.audio.size());
    Alignment alignment;
    try {
      alignment = align(sentence.phonemes, utterance.events, samples, kHopLength, options_.rules);
    } catch (const InputError& e) {
      return drop(report.dropped_alignment, e.what());
    }
    const std::string id = utterance_id(index);
    const std::string wav = "wavs/" + id + ".wav";
    write_wav((fs::path(options_.out) / wav).string(), utterance.audio, Teacher::kSampleRate);
    ++report.written;
    report.extra_phonemes += alignment.extra_phonemes;
    report.substitutions += alignment.substitutions;
    report.missing_phonemes += alignment.missing_phonemes;
    report.frames_moved += alignment.frames_moved;
    report.samples += samples;
    return json{{"id", id},
                {"text", line.text},
                {"normalized", sentence.text},
                {"phonemes", sentence.phonemes},
                {"ids", sentence.ids},
                {"durations", alignment.durations},
                {"frames", samples / kHopLength},
                {"samples", samples},
                {"wav", wav}};
  }

 private:
  const DatasetOptions& options_;
  // Before the teacher: its Phonemizer initialises eSpeak first (see EspeakTeacher).
  std::unique_ptr<const text::FrontEnd> front_end_;
  std::unique_ptr<Teacher> teacher_;
};

// Worker::process for one sentence in a forked child of the calling process, which must not
// have spoken before. eSpeak carries state from one utterance to the next (its pitch-flutter
// phase is a function-level static, its filters keep their memory), so the same sentence comes
// out differently depending on what was said before it; a child per sentence starts every
// sentence from the same state, which makes the output independent of --jobs and --limit.
std::optional<json> process_in_child(Worker& worker, const std::string& corpus, size_t index,
                                     const CorpusLine& line, DatasetReport& report) {
  const std::string where = corpus + ":" + std::to_string(line.line);
  int fds[2];
  if (::pipe(fds) != 0) throw Error(where + ": cannot create a pipe");
  std::fflush(nullptr);
  const pid_t pid = ::fork();
  if (pid < 0) {
    ::close(fds[0]);
    ::close(fds[1]);
    throw Error(where + ": cannot start a process for the sentence");
  }
  if (pid == 0) {
    ::close(fds[0]);
    json reply;
    try {
      DatasetReport counts;
      std::optional<json> entry = worker.process(index, line, counts);
      reply = {{"entry", entry ? *entry : json()}, {"report", report_json(counts)}};
    } catch (const std::exception& e) {
      reply = {{"error", e.what()}};
    }
    const bool sent = write_all(fds[1], reply.dump());
    ::close(fds[1]);
    std::fflush(nullptr);
    ::_exit(sent ? 0 : 1);
  }
  ::close(fds[1]);
  std::string text;
  char buffer[1 << 16];
  for (ssize_t n; (n = ::read(fds[0], buffer, sizeof(buffer))) != 0;) {
    if (n > 0) text.append(buffer, static_cast<size_t>(n));
    if (n < 0 && errno != EINTR) break;
  }
  ::close(fds[0]);
  int status = 0;
  const bool exited = ::waitpid(pid, &status, 0) == pid && WIFEXITED(status);
  if (!exited || WEXITSTATUS(status) != 0 || text.empty()) {
    throw Error(where + ": the process for the sentence died");
  }
  const json reply = json::parse(text);
  if (reply.contains("error")) throw Error(where + ": " + reply.at("error").get<std::string>());
  add_report(report, reply.at("report"));
  if (reply.at("entry").is_null()) return std::nullopt;
  return reply.at("entry");
}

// Runs sentences shard, shard + jobs, ... into the part files of `shard`.
void run_shard(const DatasetOptions& options, const std::vector<CorpusLine>& corpus,
               const text::SymbolTable& symbols, size_t shard, size_t jobs) {
  Worker worker(options, symbols);
  DatasetReport report;
  std::string manifest;
  for (size_t i = shard; i < corpus.size(); i += jobs) {
    if (std::optional<json> entry =
            process_in_child(worker, options.corpus, i, corpus[i], report)) {
      manifest += entry->dump(-1, ' ', false) + "\n";
    }
  }
  json counts_json = report_json(report);
  counts_json["teacher"] = worker.teacher().description();
  const std::string counts = counts_json.dump() + "\n";
  write_file_atomically(part_path(options.out, shard, "jsonl"),
                        {{manifest.data(), manifest.size()}});
  write_file_atomically(part_path(options.out, shard, "report"), {{counts.data(), counts.size()}});
}

// Runs the shards in forked processes; Error if any fails.
void run_forked(const DatasetOptions& options, const std::vector<CorpusLine>& corpus,
                const text::SymbolTable& symbols, size_t jobs) {
  std::vector<pid_t> children;
  for (size_t shard = 0; shard < jobs; ++shard) {
    std::fflush(nullptr);
    const pid_t pid = ::fork();
    if (pid < 0) throw Error("cannot start worker process " + std::to_string(shard));
    if (pid == 0) {
      int status = 0;
      try {
        run_shard(options, corpus, symbols, shard, jobs);
      } catch (const std::exception& e) {
        std::fprintf(stderr, "voxd-dataset: worker %zu: %s\n", shard, e.what());
        status = 1;
      }
      std::fflush(nullptr);
      ::_exit(status);
    }
    children.push_back(pid);
  }
  size_t failed = 0;
  for (pid_t pid : children) {
    int status = 0;
    if (::waitpid(pid, &status, 0) != pid || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
      ++failed;
    }
  }
  if (failed > 0) {
    throw Error(std::to_string(failed) + " of " + std::to_string(jobs) +
                " worker processes failed (see the messages above)");
  }
}

// Joins the shards' part files into manifest.jsonl (sorted by id) and the total report; `teacher`
// gets the teacher's description.
DatasetReport merge_parts(const std::string& out, size_t jobs, std::string& teacher) {
  DatasetReport report;
  std::map<std::string, std::string> lines;
  for (size_t shard = 0; shard < jobs; ++shard) {
    const std::string manifest_part = part_path(out, shard, "jsonl");
    const std::string report_part = part_path(out, shard, "report");
    std::ifstream manifest(manifest_part), counts(report_part);
    if (!manifest || !counts) throw Error(manifest_part + ": missing worker output");
    for (std::string line; std::getline(manifest, line);) {
      lines.emplace(json::parse(line).at("id").get<std::string>(), line + "\n");
    }
    const json part = json::parse(counts);
    add_report(report, part);
    teacher = part.at("teacher").get<std::string>();
    fs::remove(manifest_part);
    fs::remove(report_part);
  }
  std::string text;
  for (const auto& [id, line] : lines) text += line;
  write_file_atomically((fs::path(out) / "manifest.jsonl").string(), {{text.data(), text.size()}});
  return report;
}

}  // namespace

DatasetReport generate_dataset(const DatasetOptions& options) {
  if (options.jobs == 0) throw InputError("--jobs must be at least 1");
  if (options.teacher == TeacherKind::kFestival && options.phonemes != text::PhonemeSet::Arpabet) {
    throw InputError(
        "--teacher festival needs --phonemes arpabet (Festival names its phonemes in ARPAbet)");
  }
  const text::SymbolTable symbols = text::SymbolTable::load(options.symbols);
  const std::vector<CorpusLine> corpus = read_corpus(options.corpus, options.limit);
  std::error_code error;
  fs::create_directories(fs::path(options.out) / "wavs", error);
  if (error)
    throw InputError(options.out + ": cannot create the dataset directory: " + error.message());

  const size_t jobs = std::min(options.jobs, corpus.size());
  if (jobs == 1) {
    run_shard(options, corpus, symbols, 0, 1);
  } else {
    run_forked(options, corpus, symbols, jobs);
  }
  std::string teacher;
  const DatasetReport report = merge_parts(options.out, jobs, teacher);
  const std::string info = json{{"sample_rate", kDatasetSampleRate},
                                {"hop_length", kHopLength},
                                {"teacher", teacher},
                                {"symbols", options.symbols},
                                {"count", report.written}}
                               .dump() +
                           "\n";
  write_file_atomically((fs::path(options.out) / "info.json").string(),
                        {{info.data(), info.size()}});
  return report;
}

}  // namespace voxd::tools
