#include "scheduler/voice_pool.h"

#include <spdlog/spdlog.h>

#include <map>

#include "core/error.h"

namespace voxd::scheduler {

VoicePool::VoicePool(DeviceRuntime& runtime, const FamilyRegistry& families,
                     const std::vector<std::string>& directories, DType dtype, bool lazy,
                     const SchedulerOptions& scheduling)
    : runtime_(runtime), dtype_(dtype), scheduling_(scheduling), lazy_(lazy) {
  if (directories.empty()) {
    throw InputError("no voice given: name at least one voice directory (--voice DIR)");
  }
  std::map<std::string, std::string> seen;
  for (const std::string& directory : directories) {
    const Family& family = families.family_of(directory);
    auto entry = std::make_unique<VoiceEntry>(family, family.read(directory));
    const auto [at, inserted] = seen.emplace(entry->card().name, directory);
    if (!inserted) {
      throw InputError("voices '" + at->second + "' and '" + directory + "' are both named '" +
                       entry->card().name +
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
        throw InputError("voice '" + entry->card().name + "' (" + entry->card().directory +
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
    if (entry->card().name == id) return entry.get();
  }
  return nullptr;
}

void VoicePool::load(VoiceEntry& entry) {
  if (entry.models) return;
  entry.models = entry.definition->load(runtime_.weights_context(), dtype_, scheduling_);
  // The weights' copies and conversions are queued on lane 0: done before a step of any lane
  // reads them.
  runtime_.backend().synchronize();
  entry.last_used = Clock::now();
  entry.kv_cache_pages.store(entry.models->kv_cache_pages());
  entry.kv_cache_page_bytes.store(entry.models->kv_cache_page_bytes());
  entry.loaded.store(true);
  spdlog::info("voice '{}' loaded ({} on {})", entry.card().name, dtype_name(dtype_),
               runtime_.device().to_string());
}

void VoicePool::unload(VoiceEntry& entry) {
  if (!entry.models) return;
  entry.models.reset();
  entry.kv_cache_pages.store(0);
  entry.kv_cache_page_bytes.store(0);
  entry.loaded.store(false);
  spdlog::info("voice '{}' unloaded", entry.card().name);
}

}  // namespace voxd::scheduler
