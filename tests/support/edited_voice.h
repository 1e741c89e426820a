// EditedVoice: a test's own copy of a fixture voice directory, whose config.json the test may
// change, removed when the copy goes out of scope. For tests of voice loading and of voices that
// differ from a fixture in one setting.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>

#include "core/error.h"

namespace voxd::test_support {

class EditedVoice {
 public:
  // Copies `source` to a directory of its own under the temporary directory, named after the
  // process, the running test and `tag`.
  explicit EditedVoice(const std::filesystem::path& source, const std::string& tag = "")
      : dir_(std::filesystem::temp_directory_path() /
             ("voxd-" + source.filename().string() + "-" + std::to_string(::getpid()) + "-" +
              test_name() + (tag.empty() ? "" : "-" + tag))) {
    std::filesystem::remove_all(dir_);
    std::filesystem::copy(source, dir_, std::filesystem::copy_options::recursive);
  }
  ~EditedVoice() { std::filesystem::remove_all(dir_); }
  EditedVoice(const EditedVoice&) = delete;
  EditedVoice& operator=(const EditedVoice&) = delete;

  std::string path() const { return dir_.string(); }

  // Rewrites config.json with `change` applied to it.
  void edit(const std::function<void(nlohmann::json&)>& change) const {
    nlohmann::json config;
    {
      std::ifstream in(dir_ / "config.json");
      config = nlohmann::json::parse(in);
    }
    change(config);
    std::ofstream(dir_ / "config.json") << config.dump(2);
  }

  // The message of the InputError that Config::load(path()) throws; a test failure and "" when
  // it loads.
  template <typename Config>
  std::string load_error() const {
    try {
      Config::load(path());
    } catch (const InputError& e) {
      return e.what();
    }
    ADD_FAILURE() << "expected an InputError";
    return "";
  }

 private:
  static std::string test_name() {
    const ::testing::TestInfo* info = ::testing::UnitTest::GetInstance()->current_test_info();
    if (info == nullptr) return "setup";
    std::string name = info->name();
    for (char& c : name) {
      if (c == '/') c = '-';
    }
    return name;
  }

  std::filesystem::path dir_;
};

}  // namespace voxd::test_support
