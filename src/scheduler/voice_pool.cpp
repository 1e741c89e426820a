#include "scheduler/voice_pool.h"

#include <spdlog/spdlog.h>

#include <map>

#include "core/error.h"

namespace voxd::scheduler {
namespace {

std::unique_ptr<VoiceEntry> read_voice(const std::string& directory) {
  VoiceConfig config = VoiceConfig::load(directory);
  text::FrontEnd front_end(text::parse_phoneme_set(config.phonemes),
                           text::SymbolTable::load(config.symbols_path), config.language);
  return std::make_unique<VoiceEntry>(std::move(config), std::move(front_end));
}

}  // namespace

VoicePool::VoicePool(DeviceRuntime& runtime, const std::vector<std::string>& directories,
                     DType dtype, bool lazy)
    : runtime_(runtime), dtype_(dtype), lazy_(lazy) {
  if (directories.empty()) {
    throw InputError("no voice given: name at least one voice directory (--voice DIR)");
  }
  std::map<std::string, std::string> seen;
  for (const std::string& directory : directories) {
    std::unique_ptr<VoiceEntry> entry = read_voice(directory);
    const auto [at, inserted] = seen.emplace(entry->config.name, directory);
    if (!inserted) {
      throw InputError("voices '" + at->second + "' and '" + directory + "' are both named '" +
                       entry->config.name +
                       "'; give one of them another \"name\" in its config.json");
    }
    entries_.push_back(std::move(entry));
  }
  if (!lazy) {
    for (const auto& entry : entries_) {
      try {
        load(*entry);
      } catch (const InputError&) {
        throw;
      } catch (const Error& e) {
        throw InputError("voice '" + entry->config.name + "' (" + entry->config.directory +
                         ") cannot be loaded: " + e.what());
      }
    }
  }
}

VoicePool::~VoicePool() {
  for (const auto& entry : entries_) unload(*entry);
}

VoiceEntry* VoicePool::find(const std::string& id) const {
  for (const auto& entry : entries_) {
    if (entry->config.name == id) return entry.get();
  }
  return nullptr;
}

void VoicePool::load(VoiceEntry& entry) {
  if (entry.voice) return;
  entry.voice = Voice::load(runtime_.weights_context(), entry.config.directory, dtype_);
  entry.last_used = Clock::now();
  entry.loaded.store(true);
  spdlog::info("voice '{}' loaded ({} on {})", entry.config.name, dtype_name(dtype_),
               runtime_.device().to_string());
}

void VoicePool::unload(VoiceEntry& entry) {
  if (!entry.voice) return;
  entry.graphs.reset();
  entry.graph_batches.clear();
  entry.voice.reset();
  entry.loaded.store(false);
  spdlog::info("voice '{}' unloaded", entry.config.name);
}

}  // namespace voxd::scheduler
