#include "core/memory_source.h"

#include <unistd.h>

#include <charconv>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>

namespace voxd {
namespace {

// The kB figure of `field` ("MemAvailable:") in /proc/meminfo's text, in bytes.
std::optional<uint64_t> meminfo_field(std::string_view text, std::string_view field) {
  size_t at = 0;
  while ((at = text.find(field, at)) != std::string_view::npos) {
    if (at == 0 || text[at - 1] == '\n') break;
    at += field.size();
  }
  if (at == std::string_view::npos) return std::nullopt;
  size_t digits = at + field.size();
  while (digits < text.size() && text[digits] == ' ') ++digits;
  uint64_t kib = 0;
  const char* end = text.data() + text.size();
  const auto [stop, error] = std::from_chars(text.data() + digits, end, kib);
  if (error != std::errc() || stop == text.data() + digits || kib > UINT64_MAX / 1024) {
    return std::nullopt;
  }
  return kib * 1024;
}

}  // namespace

std::optional<SourceMemory> parse_meminfo(std::string_view text) {
  const std::optional<uint64_t> available = meminfo_field(text, "MemAvailable:");
  const std::optional<uint64_t> total = meminfo_field(text, "MemTotal:");
  if (!available || !total) return std::nullopt;
  return SourceMemory{*available, *total};
}

SourceMemory HostMemorySource::memory() const {
  if (capacity_ != SIZE_MAX) {
    std::lock_guard<std::mutex> lock(mutex_);
    return {capacity_ - outstanding_, capacity_};
  }
  std::ifstream meminfo("/proc/meminfo");
  std::stringstream text;
  text << meminfo.rdbuf();
  if (const std::optional<SourceMemory> memory = parse_meminfo(text.str())) return *memory;
  const long page = sysconf(_SC_PAGESIZE);
  const long pages = sysconf(_SC_PHYS_PAGES);
  const long available = sysconf(_SC_AVPHYS_PAGES);
  if (page <= 0 || pages <= 0 || available < 0) return {};
  return {static_cast<uint64_t>(available) * static_cast<uint64_t>(page),
          static_cast<uint64_t>(pages) * static_cast<uint64_t>(page)};
}

void* HostMemorySource::reserve(size_t bytes) {
  if (bytes == 0 || bytes > SIZE_MAX - kAlignment) return nullptr;
  std::lock_guard<std::mutex> lock(mutex_);
  if (bytes > capacity_ - outstanding_) return nullptr;
  const size_t rounded = (bytes + kAlignment - 1) / kAlignment * kAlignment;
  void* ptr = std::aligned_alloc(kAlignment, rounded);
  if (ptr != nullptr) outstanding_ += bytes;
  return ptr;
}

void HostMemorySource::release(void* ptr, size_t bytes) {
  if (ptr == nullptr) return;
  std::free(ptr);
  std::lock_guard<std::mutex> lock(mutex_);
  outstanding_ -= bytes;
}

size_t HostMemorySource::outstanding() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return outstanding_;
}

}  // namespace voxd
